"""A local controller's conversion registration (kube/local_conversion.py), from tables: the
patch that points the CRD at it and takes the refusal off, the patch that puts the refusal
back, and what a dry-run probe's answer means. Applied as the API server applies JSON patches
(tests/support/json_patch.py); the real API server's side is test_local_run.py."""

from __future__ import annotations

import asyncio
import copy

import aiohttp
import pytest
from structlog.testing import capture_logs

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.leader import NotLeaderError
from linkerd_config.kube.local_conversion import (
    LocalConversion,
    Outcome,
    Refusal,
    Registration,
    probe_verdict,
    register_patch,
    restore_patch,
)
from linkerd_config.linkerd.spec.crd import (
    CONVERSION_PROBE,
    CONVERSION_REFUSAL,
    LINKERD_CONFIGS_V1ALPHA1,
    LOCAL_CONVERTER,
    conversion_webhook,
    crd,
)
from tests.support.json_patch import PatchTestFailed, apply
from tests.support.leadership_fakes import Toggled

REG = Registration(
    crd=str(LINKERD_CONFIGS_V1ALPHA1),
    url="https://127.0.0.1:40123/convert",
    ca_pem=b"-----BEGIN CERTIFICATE-----\nours\n-----END CERTIFICATE-----\n",
    refusal=Refusal("v1alpha1", CONVERSION_REFUSAL),
    probe=CONVERSION_PROBE,
    probe_path=LINKERD_CONFIGS_V1ALPHA1.path(),
    marker=LOCAL_CONVERTER,
)


def installed(local: bool = True, rv: str = "7") -> dict:
    obj = crd(local=local)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def rules(obj: dict, version: str) -> list:
    (v,) = [v for v in obj["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"].get("x-kubernetes-validations", [])


def client_config(obj: dict) -> dict:
    return obj["spec"]["conversion"]["webhook"]["clientConfig"]


def test_register_points_at_us_and_takes_the_refusal_off() -> None:
    before = installed()
    after = apply(before, register_patch(before, REG) or [])
    assert client_config(after) == {"url": REG.url, "caBundle": REG.ca_bundle}
    assert rules(after, "v1alpha1") == []
    assert (
        "x-kubernetes-validations" not in after["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    )
    # Nothing else moved: the schemas are the webhook-served CRD's.
    served = installed(local=False)
    for a, s in zip(after["spec"]["versions"], served["spec"]["versions"], strict=True):
        assert a == s


def test_register_keeps_other_root_rules() -> None:
    before = installed()
    other = {"rule": "self.metadata.name != 'x'", "message": "not x"}
    before["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"].insert(
        0, other
    )
    after = apply(before, register_patch(before, REG) or [])
    assert rules(after, "v1alpha1") == [other]


@pytest.mark.parametrize(
    ("case", "change", "expected"),
    [
        ("served by the in-cluster Service", lambda o: o.update(installed(local=False)), None),
        (
            "a CRD with a URL but not marked local (someone else's converter)",
            lambda o: o["metadata"].pop("annotations"),
            None,
        ),
        (
            "no such version",
            lambda o: o["spec"].update(versions=o["spec"]["versions"][1:]),
            None,
        ),
    ],
)
def test_register_leaves_alone(case: str, change: object, expected: object) -> None:
    obj = installed()
    change(obj)  # type: ignore[operator]
    assert register_patch(obj, REG) is expected, case


def test_register_is_guarded_by_the_resource_version_it_read() -> None:
    read = installed(rv="7")
    patch = register_patch(read, REG) or []
    with pytest.raises(PatchTestFailed):
        apply(installed(rv="8"), patch)


def test_register_again_over_a_stale_registration() -> None:
    """A controller killed without its stop path left its url and CA: a new one replaces
    them (there is no refusal to take off)."""
    stale = apply(installed(), register_patch(installed(), REG) or [])
    stale["spec"]["conversion"] = conversion_webhook(url="https://127.0.0.1:1", ca_pem=b"old")
    stale["metadata"]["resourceVersion"] = "9"
    after = apply(stale, register_patch(stale, REG) or [])
    assert client_config(after) == {"url": REG.url, "caBundle": REG.ca_bundle}
    assert rules(after, "v1alpha1") == []


def test_restore_puts_the_refusal_back_only_while_the_crd_points_at_us() -> None:
    registered = apply(installed(), register_patch(installed(), REG) or [])
    restored = apply(registered, restore_patch(registered, REG) or [])
    assert rules(restored, "v1alpha1") == [CONVERSION_REFUSAL]
    assert restore_patch(restored, REG) is None  # already refuses

    # Another controller registered since (its own CA): not ours to undo.
    theirs = copy.deepcopy(registered)
    client_config(theirs)["caBundle"] = "dGhlaXJz"
    assert restore_patch(theirs, REG) is None
    # And the guard holds if it changes between our read and our write.
    patch = restore_patch(registered, REG) or []
    with pytest.raises(PatchTestFailed):
        apply(theirs, patch)
    # `make deploy` since: the Service converts; nothing to restore.
    assert restore_patch(installed(local=False), REG) is None


def error(message: str) -> ApiError:
    return ApiError(422, "POST", "/x", {"message": message}, None)


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        (None, True),
        (error(f'LinkerdConfig "x" is invalid: <nil>: {CONVERSION_REFUSAL["message"]}'), None),
        (
            error(
                "conversion webhook for config.linkerd.io/v1alpha1, Kind=LinkerdConfig failed: "
                'Post "https://127.0.0.1:9443/convert": dial tcp: connection refused'
            ),
            False,
        ),
        (error("conversion webhook ...: x509: certificate signed by unknown authority"), False),
        # Refused before any conversion (an admission plugin): proves nothing, not success.
        (error("admission webhook denied the request"), False),
    ],
)
def test_probe_verdicts(answer: ApiError | None, verdict: bool | None) -> None:
    assert probe_verdict(answer, REG.refusal) is verdict


# -- LocalConversion acting on a CRD held in memory, stopped or failed at every step --------


class CrdApi:
    """The CRD endpoints as the API server answers them: GET, JSON PATCH (a failed test op
    is 422; resourceVersion bumped), and the dry-run probe, answered by ``probe_answer``."""

    def __init__(self, crd_obj: dict) -> None:
        self.crd = crd_obj
        self.crd["metadata"]["resourceVersion"] = "1"
        self.probe_answer: ApiError | None = None
        self.probe_gate = asyncio.Event()
        self.probe_gate.set()
        self.conflicts = 0
        self.failures: list[BaseException] = []
        """Raised, one a request, before anything else is answered."""
        self.writes: list[tuple[str, bool]] = []

    async def request(self, method: str, path: str, **kw: object) -> dict:
        if self.failures:
            raise self.failures.pop(0)
        if method == "GET":
            if self.crd is None:
                raise ApiError(404, method, path, {"message": "not found"}, None)
            return copy.deepcopy(self.crd)
        if method == "PATCH":
            self.writes.append((method, bool(kw.get("fenced", True))))
            if self.conflicts:
                self.conflicts -= 1
                self.crd["metadata"]["resourceVersion"] = str(
                    int(self.crd["metadata"]["resourceVersion"]) + 1
                )
            try:
                self.crd = apply(self.crd, kw["body"])  # type: ignore[arg-type]
            except PatchTestFailed as exc:
                raise ApiError(422, method, path, {"message": str(exc)}, None) from exc
            self.crd["metadata"]["resourceVersion"] = str(
                int(self.crd["metadata"]["resourceVersion"]) + 1
            )
            return copy.deepcopy(self.crd)
        assert method == "POST" and kw["params"] == {"dryRun": "All"}
        await self.probe_gate.wait()
        if self.probe_answer is not None:
            raise self.probe_answer
        return {}


def local(api: CrdApi, **kw: float) -> LocalConversion:
    return LocalConversion(
        api,  # type: ignore[arg-type]
        probe_timeout=kw.get("probe_timeout", 5.0),
        probe_interval=0.01,
        retry_delays=(0.01,),
    )


async def test_registers_then_restores_at_stop() -> None:
    api = CrdApi(crd(local=True))
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    await asyncio.wait_for(conv.settled.wait(), 5)
    assert conv.outcome is Outcome.REGISTERED
    assert rules(api.crd, "v1alpha1") == []
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rules(api.crd, "v1alpha1") == [CONVERSION_REFUSAL]
    # The registration went through the write gate; the stop's restore could not.
    assert api.writes == [("PATCH", True), ("PATCH", False)]


async def test_stopped_before_the_probe_answered_still_restores() -> None:
    """The seam found by test_local_run: SIGINT while the probe is in flight left the CRD
    pointing at a dead process with no refusal."""
    api = CrdApi(crd(local=True))
    api.probe_gate.clear()
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if rules(api.crd, "v1alpha1") == []:
            break
    assert rules(api.crd, "v1alpha1") == [] and conv.outcome is None
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rules(api.crd, "v1alpha1") == [CONVERSION_REFUSAL]


async def test_an_api_server_that_cannot_reach_us_gets_the_refusal_back() -> None:
    api = CrdApi(crd(local=True))
    api.probe_answer = error("conversion webhook for ...: connect: connection refused")
    conv = local(api, probe_timeout=0.2)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    await asyncio.wait_for(conv.settled.wait(), 5)
    assert conv.outcome is Outcome.UNREACHABLE
    assert conv.last_probe_error and "connection refused" in conv.last_probe_error
    assert rules(api.crd, "v1alpha1") == [CONVERSION_REFUSAL]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rules(api.crd, "v1alpha1") == [CONVERSION_REFUSAL]


async def test_the_old_schema_still_in_force_is_waited_out() -> None:
    api = CrdApi(crd(local=True))
    api.probe_answer = error(f"invalid: {CONVERSION_REFUSAL['message']}")
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    await asyncio.sleep(0.1)
    assert not conv.settled.is_set()
    api.probe_answer = None  # the API server has the new schema and converts through us
    await asyncio.wait_for(conv.settled.wait(), 5)
    assert conv.outcome is Outcome.REGISTERED
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_write_between_read_and_patch_is_read_again() -> None:
    api = CrdApi(crd(local=True))
    api.conflicts = 2
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    await asyncio.wait_for(conv.settled.wait(), 5)
    assert conv.outcome is Outcome.REGISTERED
    assert api.conflicts == 0 and len(api.writes) == 3  # two refused, then applied
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize(
    ("crd_obj", "outcome"),
    [(crd(local=False), Outcome.SERVED_ELSEWHERE), (None, Outcome.NO_CRD)],
)
async def test_nothing_to_register(crd_obj: dict | None, outcome: Outcome) -> None:
    api = CrdApi(crd(local=True))
    api.crd = copy.deepcopy(crd_obj) if crd_obj else None  # type: ignore[assignment]
    if api.crd:
        api.crd["metadata"]["resourceVersion"] = "1"
    before = copy.deepcopy(api.crd)
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    await asyncio.wait_for(conv.settled.wait(), 5)
    assert conv.outcome is outcome
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert api.crd == before and api.writes == []


async def test_each_term_registers_again() -> None:
    """Another process registered itself while this one did not lead: leading again, this
    one points the CRD back at itself."""
    api = CrdApi(crd(local=True))
    terms = Toggled()
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, terms))
    await asyncio.wait_for(conv.settled.wait(), 5)
    terms.lose()
    other = conversion_webhook(url="https://127.0.0.1:1", ca_pem=b"theirs")
    api.crd["spec"]["conversion"] = other
    await asyncio.sleep(0.05)
    assert api.crd["spec"]["conversion"] == other  # not while following
    terms.gain()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if client_config(api.crd).get("url") == REG.url:
            break
    assert client_config(api.crd) == {"url": REG.url, "caBundle": REG.ca_bundle}
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rules(api.crd, "v1alpha1") == [CONVERSION_REFUSAL]


@pytest.mark.parametrize(
    "failure",
    [
        ApiError(500, "GET", "/x", {"message": "etcdserver: leader changed"}, None),
        ConnectionResetError("reset by peer"),
        TimeoutError(),
    ],
    ids=["500", "reset", "timeout"],
)
async def test_a_failure_on_the_way_is_tried_again_not_fatal(failure: BaseException) -> None:
    """An API server restarting while a local run registers: the run keeps going (before,
    the exception ended the conversion task, and with it the process)."""
    api = CrdApi(crd(local=True))
    api.failures = [failure, failure]
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    await asyncio.wait_for(conv.settled.wait(), 5)
    assert conv.outcome is Outcome.REGISTERED and not task.done()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rules(api.crd, "v1alpha1") == [CONVERSION_REFUSAL]


async def test_a_crd_that_keeps_changing_is_tried_again() -> None:
    api = CrdApi(crd(local=True))
    api.conflicts = 7  # more than one attempt's reads
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    await asyncio.wait_for(conv.settled.wait(), 5)
    assert conv.outcome is Outcome.REGISTERED
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_term_ending_mid_registration_is_not_fatal() -> None:
    """The renew deadline passes while the CRD is read: the write gate refuses the PATCH
    (NotLeaderError). That ended the conversion task, and with it the process; now the term
    is over, and the next one registers."""
    leading = Toggled()
    api = CrdApi(crd(local=True))
    real = api.request

    async def request(method: str, path: str, **kw: object) -> dict:
        if method == "PATCH" and kw.get("fenced", True) and not api.writes:
            api.writes.append(("refused", True))
            leading.lose()
            raise NotLeaderError(method, path, "the renew deadline passed")
        return await real(method, path, **kw)

    api.request = request  # type: ignore[method-assign]
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, leading))
    await asyncio.sleep(0.2)
    assert not task.done() and not conv.settled.is_set()
    leading.gain()
    await asyncio.wait_for(conv.settled.wait(), 5)
    assert conv.outcome is Outcome.REGISTERED and not task.done()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rules(api.crd, "v1alpha1") == [CONVERSION_REFUSAL]


@pytest.mark.parametrize(
    "failure",
    [
        aiohttp.ServerDisconnectedError(),
        RuntimeError("KubeClient used before open() or after close()"),
    ],
    ids=["disconnected", "client-closed"],
)
async def test_the_restore_at_stop_never_raises(failure: BaseException) -> None:
    """A stop path: the API server gone, or the client closed under it (the manager moved
    on), is said in a warning, not raised out of the stop."""
    api = CrdApi(crd(local=True))
    conv = local(api)
    task = asyncio.create_task(conv.run(REG, Toggled()))
    await asyncio.wait_for(conv.settled.wait(), 5)
    api.failures = [failure]
    task.cancel()
    with capture_logs() as logs:
        results = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError), results
    assert any(e["event"] == "could not put the conversion refusal back" for e in logs)
