"""A local controller's conversion registration (kube/local_conversion.py), from tables: the
patch that points the CRD at it and takes the refusal off, the patch that puts the refusal
back, and what a dry-run probe's answer means. Applied as the API server applies JSON patches
(tests/support/json_patch.py); the real API server's side is test_local_run.py."""

from __future__ import annotations

import copy

import pytest

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.local_conversion import (
    Refusal,
    Registration,
    probe_verdict,
    register_patch,
    restore_patch,
)
from linkerd_config.linkerd.linkerdconfig_resource import (
    CONVERSION_PROBE,
    CONVERSION_REFUSAL,
    LINKERD_CONFIGS_V1ALPHA1,
    LOCAL_CONVERTER,
    conversion_webhook,
    crd,
)
from tests.support.json_patch import PatchTestFailed, apply

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
