"""The reconcile's outcomes as a table, with simple fakes (``tests/support/controller_fakes.py``):
caches filled by hand, a writer that records what it is asked (or refuses), an event recorder
that lists. No API server."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.controller import Result
from linkerd_config.kube.resource import Json, resource_version
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout import rollback
from linkerd_config.linkerd.rollout.record import Completed, digest
from linkerd_config.linkerd.spec.crd import (
    COMPLETED_ANNOTATION,
    HASH_ANNOTATION,
    LAST_COMPLETED_FIELD,
)
from linkerd_config.linkerd.status.report import MESH_UNSEEN_RETRY_SECONDS
from tests.support.controller_fakes import (
    FakeRecorder,
    FakeWriter,
    conditions,
    controller,
    filled,
)
from tests.support.linkerdconfigs import config, small
from tests.support.samples import (
    SAMPLES,
    SECOND_TRUST_ANCHOR,
    install_configmap,
    load,
    modern_install,
)

CM_KEY = "linkerd/linkerd-config"


def merged(current: Json, applied: Json) -> Json:
    """The ConfigMap after a server-side apply of ``applied``: maps merged key by key."""
    meta = {**current["metadata"]}
    for field in ("labels", "annotations"):
        meta[field] = {**meta.get(field, {}), **applied["metadata"][field]}
    return {**current, "metadata": meta, "data": {**current["data"], **applied["data"]}}


def message_of(status: Json, type_: str) -> str:
    return str(next(c["message"] for c in status["conditions"] if c["type"] == type_))


async def test_a_deleted_linkerdconfig_changes_nothing() -> None:
    ctl, writer, _ = controller(configmap=install_configmap())
    assert await ctl.reconcile("gone") == Result()
    assert writer.applied == writer.statuses == []


async def test_an_invalid_one_is_reported_and_writes_nothing() -> None:
    bad = load(SAMPLES / "invalid" / "bad_cluster_domain.yaml")
    bad["metadata"].update(creationTimestamp="2026-01-01T00:00:00Z", generation=3)
    ctl, writer, recorder = controller(bad, configmap=install_configmap())
    assert await ctl.reconcile(bad["metadata"]["name"]) == Result()
    assert writer.applied == []
    (status,) = writer.statuses
    assert conditions(status)["ConfigMapSynced"] == ("False", "InvalidConfig")
    # Named as the storage version (v1alpha2, what kubectl shows) names it.
    assert "spec.values.clusterDomain:" in status["conditions"][0]["message"]
    assert status["observedGeneration"] == 3
    assert recorder.events == [("Warning", "InvalidConfig")]


async def test_the_younger_of_two_gets_conflict_and_writes_nothing() -> None:
    old, young = config("old", "2026-01-01T00:00:00Z"), config("young", "2026-02-01T00:00:00Z")
    ctl, writer, recorder = controller(old, young, configmap=install_configmap())
    await ctl.reconcile("young")
    assert writer.applied == []
    assert conditions(writer.statuses[0])["Conflict"] == ("True", "ConfigMapOwnedByOther")
    assert recorder.events == [("Warning", "Conflict")]


async def test_drift_is_applied_and_the_rest_preserved_then_nothing_more() -> None:
    ctl, writer, recorder = controller(config(), configmap=install_configmap())
    result = await ctl.reconcile("edge-19.12.3")
    names = [o["metadata"]["name"] for o in writer.applied]
    assert names == ["linkerd-config-preserved", "linkerd-config"]
    preserved, ours = writer.applied
    # What we do not manage, kept aside; and global as written (the trust anchor it may keep).
    assert set(preserved["data"]) == {"install", "global"}
    assert set(ours["data"]) == {"global", "proxy"}  # only what we manage is applied
    assert ("Normal", "ConfigMapUpdated") in recorder.events
    assert conditions(writer.statuses[-1])["Ready"] == ("True", "Ready")  # no pods to roll
    status = writer.statuses[-1]
    assert (status["linkerdVersion"], status["configFormat"]) == ("edge-19.12.3", "legacy")
    assert result.requeue_after is None
    # The caches now show what was written: the next reconcile writes nothing at all.
    ctl.configmaps.store.put(merged(install_configmap(), ours))
    ctl.configmaps.store.put(preserved)
    stored = ctl.configs.store.get("edge-19.12.3")
    assert stored is not None
    ctl.configs.store.put({**stored, "status": writer.statuses[-1]})
    before = (len(writer.applied), len(writer.statuses))
    await ctl.reconcile("edge-19.12.3")
    assert (len(writer.applied), len(writer.statuses)) == before


@pytest.mark.parametrize(
    ("code", "ready", "kstatus_condition"),
    [(422, "False", "Stalled"), (403, "False", "Stalled"), (500, "Unknown", "Reconciling"),
     (429, "Unknown", "Reconciling")],
)  # fmt: skip
async def test_a_refused_write_is_reported_and_retried_with_backoff(
    code: int, ready: str, kstatus_condition: str
) -> None:
    """Retried either way; a refusal only a person lifts (RBAC, a policy) is Stalled, which
    fails a Flux wait at once; a transient one is Reconciling."""
    ctl, writer, recorder = controller(config(), configmap=install_configmap())
    writer.refuse = ApiError(code, "PATCH", "/x", {"reason": "X", "message": "frozen"}, None)
    assert await ctl.reconcile("edge-19.12.3") == Result(requeue=True)
    status = writer.statuses[-1]
    assert conditions(status)["Ready"] == (ready, "WriteFailed")
    assert conditions(status)[kstatus_condition] == ("True", "WriteFailed")
    assert conditions(status)["ConfigMapSynced"] == ("False", "WriteFailed")
    assert ("Warning", "ConfigMapWriteFailed") in recorder.events


def installed(fmt: str, **meta: str) -> tuple[Any, FakeWriter, FakeRecorder, str]:
    """A controller over Linkerd's install in ``fmt`` (``legacy``: edge-19.12.1's
    linkerd-config; ``values``: edge-26.8.3's and its trust roots), the installed
    linkerd-config's metadata updated with ``meta``; and the LinkerdConfig's name."""
    if fmt == "legacy":
        cached, name, other = install_configmap(), "edge-19.12.3", None
        ctl, writer, recorder = controller(config(), configmap=cached)
    else:
        cached, other = modern_install()
        name = "modern"
        ctl, writer, recorder = controller(small(), configmap=cached)
    cached["metadata"].update(meta)
    ctl.configmaps.store.put(cached)
    if other is not None:
        ctl.configmaps.store.put(other)
    return ctl, writer, recorder, name


@pytest.mark.parametrize("fmt", ["legacy", "values"])
async def test_a_write_rendered_on_a_stale_cache_is_conditional_and_a_conflict_is_quiet(
    fmt: str,
) -> None:
    """The managed key is rendered onto the cached ConfigMap (in the values format, Helm's
    text and ours at once), so its apply carries the cached resourceVersion and uid: a
    change the cache has not shown yet (a ``helm upgrade`` racing the write), or a deletion,
    is refused by the API server (409) rather than written over. That is no failure to
    report: nothing Warning, no status; the change's own watch event brings the next
    reconcile."""
    ctl, writer, recorder, name = installed(fmt, resourceVersion="41", uid="the-cached-one")
    writer.refuse = ApiError(409, "PATCH", "/x", {"reason": "Conflict", "message": "the "
                             "object has been modified"}, None)  # fmt: skip
    assert await ctl.reconcile(name) == Result(requeue=True)
    assert not any("conditions" in status for status in writer.statuses)  # adoption's only
    assert not any(t == "Warning" for t, _ in recorder.events)
    writer.refuse = None
    await ctl.reconcile(name)
    target = [
        (version, uid)
        for obj, version, uid in zip(
            writer.applied, writer.apply_preconditions, writer.apply_uids, strict=True
        )
        if obj["metadata"]["name"] == "linkerd-config"
    ]
    # The uid too: deleted since, the object is not created anew holding only our keys
    # (an apply creates what is missing whatever resourceVersion it names; the API server
    # refuses a uid no object has: test_writer_precondition.py).
    assert target == [("41", "the-cached-one")]


@pytest.mark.parametrize("fmt", ["legacy", "values"])
async def test_a_preserved_copy_is_applied_on_its_cached_version_and_a_moved_one_is_left(
    fmt: str,
) -> None:
    """The copy of what is not ours is rendered from the caches, so its apply carries the
    cached copy's resourceVersion: a copy that moved since (our own last write, not yet
    seen) is refused (409) and nothing further is written (the target, rendered from the
    same caches, neither); the next reconcile, on what the watch shows, writes it."""
    ctl, writer, recorder, name = installed(fmt)
    await ctl.reconcile(name)
    (copy_sent,) = [
        a for a in writer.applied if a["metadata"]["name"] == "linkerd-config-preserved"
    ]
    seen = copy.deepcopy(copy_sent)
    seen["metadata"]["resourceVersion"] = "7"
    ctl.configmaps.store.put(seen)
    # Someone else's key appears in the target: the copy must follow it.
    changed = copy.deepcopy(ctl.configmaps.store.get(CM_KEY))
    changed["data"]["theirs"] = "kept aside"
    ctl.configmaps.store.put(changed)
    del writer.applied[:], writer.apply_preconditions[:]
    answer = writer.apply
    conflict = ApiError(409, "PATCH", "/x", {"reason": "Conflict", "message": "modified"}, None)

    async def copy_moved(resource: Any, obj: Json, *, on: Json | None = None) -> Json:
        if obj["metadata"]["name"] == "linkerd-config-preserved":
            writer.apply_preconditions.append(resource_version(on))
            raise conflict
        return await answer(resource, obj, on=on)

    writer.apply = copy_moved  # type: ignore[method-assign]
    assert await ctl.reconcile(name) == Result(requeue=True)
    assert writer.applied == [] and writer.apply_preconditions == ["7"]
    assert not any(t == "Warning" for t, _ in recorder.events)
    writer.apply = answer  # type: ignore[method-assign]
    del writer.apply_preconditions[:]
    await ctl.reconcile(name)
    copies = [
        (a["data"], version)
        for a, version in zip(writer.applied, writer.apply_preconditions, strict=True)
        if a["metadata"]["name"] == "linkerd-config-preserved"
    ]
    assert [(data["theirs"], version) for data, version in copies] == [("kept aside", "7")]


async def test_a_deleted_configmap_is_recreated_whole_from_the_preserved_copy() -> None:
    ctl, writer, _ = controller(config(), configmap=install_configmap())
    await ctl.reconcile("edge-19.12.3")
    preserved = writer.applied[0]
    ctl.configmaps.store.delete(CM_KEY)
    ctl.configmaps.store.put(preserved)
    await ctl.reconcile("edge-19.12.3")
    (created,) = writer.created
    assert set(created["data"]) == {"install", "global", "proxy"}  # whole, in one create
    assert created["metadata"]["annotations"]["linkerd.io/created-by"] == "linkerd/cli edge-19.12.1"


# -- the Helm-values format: Linkerd edge-26.8.3's own install ------------------------------


async def reconciled_modern(
    config: Json | None = None,
) -> tuple[Any, FakeWriter, FakeRecorder, Json]:
    """Linkerd edge-26.8.3 installed, ``config`` (default: ``small()``) reconciled once; the
    installed linkerd-config is returned too."""
    config_cm, roots = modern_install()
    ctl, writer, recorder = controller(config or small(), configmap=config_cm)
    ctl.configmaps.store.put(roots)
    await ctl.reconcile(str((config or small())["metadata"]["name"]))
    return ctl, writer, recorder, config_cm


async def test_values_are_rewritten_in_place_and_kept_whole_aside() -> None:
    ctl, writer, _, config_cm = await reconciled_modern()
    # No trust anchor stated: the trust roots are not ours, but they are kept aside whole.
    preserved, roots_copy, ours = writer.applied
    assert set(preserved["data"]) == {"values", "linkerd-crds-chart-version"}
    assert roots_copy["metadata"]["name"] == "linkerd-identity-trust-roots-preserved"
    assert set(roots_copy["data"]) == {"ca-bundle.crt"}
    assert set(ours["data"]) == {"values"}
    values = yaml.safe_load(ours["data"]["values"])
    assert values["proxy"]["logLevel"] == "debug"
    assert values["controllerReplicas"] == 1  # a value we do not manage, still there
    status = writer.statuses[-1]
    assert status["trustAnchorSource"] == "Cluster"
    # The spec left the version to the cluster: status (and `kubectl get -o wide`) says it.
    assert (status["linkerdVersion"], status["configFormat"]) == ("edge-26.8.3", "values")
    # Written and cached: the next reconcile writes nothing.
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(preserved)
    ctl.configmaps.store.put(roots_copy)
    ctl.configs.store.put({**small(), "status": status})
    before = (len(writer.applied), len(writer.statuses))
    await ctl.reconcile("modern")
    assert (len(writer.applied), len(writer.statuses)) == before


async def test_a_stated_anchor_is_written_to_the_trust_roots_too() -> None:
    anchor = SECOND_TRUST_ANCHOR
    spec_config = small()
    spec_config["spec"]["global"] = {"identityContext": {"trustAnchorsPEM": anchor}}
    _, writer, recorder, _ = await reconciled_modern(spec_config)
    names = [o["metadata"]["name"] for o in writer.applied]
    assert names == [
        "linkerd-config-preserved",
        "linkerd-identity-trust-roots-preserved",
        "linkerd-config",
        "linkerd-identity-trust-roots",
    ]
    # The copy of the trust roots keeps what is not ours there (the install's metadata), and
    # the bundle as written: what the trust-anchor guard sees should the ConfigMap go.
    roots_copy = writer.applied[1]
    assert roots_copy["data"] == {"ca-bundle.crt": anchor.strip()}
    assert (
        "linkerd.io/control-plane-component"
        in roots_copy["metadata"]["annotations"]["config.linkerd.io/preserved-labels"]
    )
    assert writer.applied[-1]["data"] == {"ca-bundle.crt": anchor.strip()}
    assert recorder.events.count(("Normal", "ConfigMapUpdated")) == 2


async def test_a_deleted_modern_configmap_comes_back_from_its_preserved_values() -> None:
    ctl, writer, _, config_cm = await reconciled_modern()
    preserved = writer.applied[0]
    ctl.configmaps.store.delete(CM_KEY)
    ctl.configmaps.store.put(preserved)
    await ctl.reconcile("modern")
    (created,) = writer.created
    assert set(created["data"]) == {"values", "linkerd-crds-chart-version"}
    restored = yaml.safe_load(created["data"]["values"])
    original = yaml.safe_load(config_cm["data"]["values"])
    assert restored["proxy"]["logLevel"] == "debug"
    assert restored["identityTrustAnchorsPEM"] == original["identityTrustAnchorsPEM"]


async def test_a_deleted_values_key_comes_back_from_the_copy_not_asked_of_the_spec() -> None:
    """The key that says the release is gone (issue 39, finding 6): the copy knows it, so
    the controller writes it back as it was, and says so, rather than asking the spec for
    a ``spec.global.version`` it never set."""
    ctl, writer, recorder, config_cm = await reconciled_modern()
    preserved, roots_copy, ours = writer.applied
    for kept in (preserved, roots_copy):
        ctl.configmaps.store.put(kept)
    lost = merged(config_cm, ours)
    del lost["data"]["values"]
    ctl.configmaps.store.put(lost)
    status = writer.statuses[-1]
    ctl.configs.store.put({**small(), "status": status})
    await ctl.reconcile("modern")
    assert writer.applied[-1]["data"] == ours["data"]  # values, exactly as written before
    annotations = dict(writer.applied[-1]["metadata"]["annotations"])
    # The write vouches for the record the first pass made (its rollout completed: no pods).
    completed = Completed.parse(status[LAST_COMPLETED_FIELD])
    assert completed is not None
    assert annotations.pop(COMPLETED_ANNOTATION) == digest(completed)
    assert annotations == {
        k: v for k, v in ours["metadata"]["annotations"].items() if k != COMPLETED_ANNOTATION
    }
    assert recorder.events[-1] == ("Normal", "ConfigMapReverted")
    assert recorder.messages[-1].endswith("(keys values)")
    assert conditions(writer.statuses[-1])["Ready"] == ("True", "Ready")


async def test_a_deleted_legacy_global_comes_back_with_the_clusters_anchor() -> None:
    """A legacy spec without a trust anchor keeps the cluster's, which only ``global`` held:
    the copy keeps ``global`` as written, so a deleted one comes back with it (it used to be
    refused: the anchor 'not set, and ConfigMap linkerd/linkerd-config holds none to keep')."""
    anchorless = config()
    del anchorless["spec"]["global"]["identityContext"]["trustAnchorsPEM"]
    ctl, writer, recorder = controller(anchorless, configmap=install_configmap())
    await ctl.reconcile("edge-19.12.3")
    preserved, ours = writer.applied
    assert set(preserved["data"]) == {"install", "global"}
    ctl.configmaps.store.put(preserved)
    lost = merged(install_configmap(), ours)
    del lost["data"]["global"]
    ctl.configmaps.store.put(lost)
    await ctl.reconcile("edge-19.12.3")
    assert writer.applied[-1]["data"] == ours["data"]
    assert writer.statuses[-1]["trustAnchorSource"] == "Cluster"
    assert recorder.messages[-1].endswith("(keys global)")


async def test_a_spec_for_the_other_format_than_the_cluster_is_refused() -> None:
    config_cm, _ = modern_install()
    ctl, writer, _ = controller(config(), configmap=config_cm)  # edge-19.12.3's sample
    await ctl.reconcile("edge-19.12.3")
    assert writer.applied == []
    (status,) = writer.statuses
    assert conditions(status)["ConfigMapSynced"] == ("False", "InvalidConfig")
    message = message_of(status, "ConfigMapSynced")
    assert "upgrade Linkerd first" in message


async def test_a_helm_upgrade_re_rendering_values_is_reverted_for_what_we_manage() -> None:
    ctl, writer, recorder, config_cm = await reconciled_modern()
    preserved, _, ours = writer.applied
    # `helm upgrade` writes the chart's values back (ours lost), and sets one of its own.
    upgraded = yaml.safe_load(config_cm["data"]["values"])
    upgraded["controllerReplicas"] = 3
    helm = merged(config_cm, ours)
    helm["data"] = {**helm["data"], "values": yaml.safe_dump(upgraded)}
    ctl.configmaps.store.put(helm)
    ctl.configmaps.store.put(preserved)
    await ctl.reconcile("modern")
    reverted = yaml.safe_load(writer.applied[-1]["data"]["values"])
    assert reverted["proxy"]["logLevel"] == "debug"  # ours, back
    assert reverted["controllerReplicas"] == 3  # theirs, kept
    assert recorder.events[-1] == ("Normal", "ConfigMapReverted")


# -- the trust roots: restored whole, or Ready=False naming them -----------------------------

ROOTS_KEY = "linkerd/linkerd-identity-trust-roots"


async def test_deleted_trust_roots_come_back_whole_from_their_copy() -> None:
    ctl, writer, recorder, config_cm = await reconciled_modern()
    _, roots_copy, ours = writer.applied
    _, roots = modern_install()
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(roots_copy)
    ctl.configmaps.store.delete(ROOTS_KEY)
    await ctl.reconcile("modern")
    (created,) = writer.created
    assert created["metadata"]["name"] == "linkerd-identity-trust-roots"
    assert created["data"] == roots["data"]
    assert created["metadata"]["labels"] == roots["metadata"]["labels"]  # nothing of ours
    assert created["metadata"]["annotations"] == roots["metadata"]["annotations"]
    assert recorder.events[-1] == ("Normal", "ConfigMapCreated")
    assert conditions(writer.statuses[-1])["Ready"] == ("True", "Ready")


@pytest.mark.parametrize("copied", [True, False])
async def test_a_trust_bundle_key_deleted_comes_back_from_the_copy_which_is_kept(
    copied: bool,
) -> None:
    """Only ``ca-bundle.crt`` deleted from the trust roots (the spec states no anchor): the
    copy was overwritten with its absence, the only copy of the bundle lost, and Ready stayed
    True. The copy now puts the key back (the restore's field manager, on the cached
    version) and is left as it was; with no copy, the loss is said as a deleted ConfigMap's
    is (ConfigMapMissing) and nothing is written."""
    ctl, writer, recorder, config_cm = await reconciled_modern()
    preserved, roots_copy, ours = writer.applied
    _, roots = modern_install()
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(preserved)
    if copied:
        ctl.configmaps.store.put(roots_copy)
    keyless = {**roots, "data": {}, "metadata": {**roots["metadata"], "resourceVersion": "7"}}
    ctl.configmaps.store.put(keyless)
    writer.applied.clear()
    await ctl.reconcile("modern")
    assert [a["metadata"]["name"] for a in writer.applied] == []  # neither copy nor roots
    status = writer.statuses[-1]
    if not copied:
        assert writer.patched == []
        assert conditions(status)["Ready"] == ("False", "ConfigMapMissing")
        return
    ((name, patch),) = writer.patches
    assert name == "linkerd/linkerd-identity-trust-roots"
    assert patch == {"data": roots["data"], "metadata": {"resourceVersion": "7"}}
    assert recorder.events[-1] == ("Normal", "ConfigMapUpdated")
    assert "ca-bundle.crt" in recorder.messages[-1]


async def test_deleted_trust_roots_stated_by_the_spec_come_back_with_the_install_metadata() -> None:
    spec_config = small()
    spec_config["spec"]["global"] = {"identityContext": {"trustAnchorsPEM": SECOND_TRUST_ANCHOR}}
    ctl, writer, _, config_cm = await reconciled_modern(spec_config)
    _, roots_copy, ours, ours_roots = writer.applied
    _, roots = modern_install()
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(roots_copy)
    ctl.configmaps.store.delete(ROOTS_KEY)
    await ctl.reconcile("modern")
    (created,) = writer.created
    assert created["data"] == {"ca-bundle.crt": SECOND_TRUST_ANCHOR.strip()}
    for field in ("labels", "annotations"):
        assert roots["metadata"][field].items() <= created["metadata"][field].items()
    assert writer.applied[-1] == ours_roots  # and ours applied, so the keys stay ours


async def test_deleted_trust_roots_without_a_copy_are_named_and_nothing_restarts() -> None:
    config_cm, _ = modern_install()
    ctl, writer, recorder = controller(small(), configmap=config_cm)  # never saw the roots
    restarts: list[str] = []

    async def roll(*_args: Any) -> None:
        restarts.append("roll")

    ctl.rollout.roll = roll
    await ctl.reconcile("modern")
    assert writer.created == [] and restarts == []
    status = writer.statuses[-1]
    assert conditions(status)["Ready"] == ("False", "ConfigMapMissing")
    message = message_of(status, "Ready")
    assert "linkerd/linkerd-identity-trust-roots" in message and "missing" in message
    assert recorder.events[-1] == ("Warning", "ConfigMapMissing")


async def test_a_copy_someone_else_wrote_is_no_copy_and_said_so() -> None:
    """Valid JSON that is not an object of strings in the copy's metadata: unreadable, so the
    trust roots are named missing, never a crash with Ready left True."""
    ctl, writer, _, config_cm = await reconciled_modern()
    _, roots_copy, ours = writer.applied
    hostile = copy.deepcopy(roots_copy)
    hostile["metadata"]["annotations"]["config.linkerd.io/preserved-labels"] = '["x"]'
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(hostile)
    ctl.configmaps.store.delete(ROOTS_KEY)
    await ctl.reconcile("modern")
    assert writer.created == []
    status = writer.statuses[-1]
    assert conditions(status)["Ready"] == ("False", "ConfigMapMissing")
    message = message_of(status, "Ready")
    assert "no readable copy" in message


async def test_a_refused_restore_names_the_configmap_it_would_have_created() -> None:
    ctl, writer, _, config_cm = await reconciled_modern()
    _, roots_copy, ours = writer.applied
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(roots_copy)
    ctl.configmaps.store.delete(ROOTS_KEY)
    writer.refuse_create = ApiError(
        422, "POST", "/api/v1/namespaces/linkerd/configmaps", {"message": "invalid label"}, None
    )
    await ctl.reconcile("modern")
    message = message_of(writer.statuses[-1], "ConfigMapSynced")
    assert message.startswith("writing ConfigMap linkerd/linkerd-identity-trust-roots failed")


async def test_what_someone_planted_in_a_copy_is_removed_not_restored_later() -> None:
    ctl, writer, _, config_cm = await reconciled_modern()
    _, roots_copy, ours = writer.applied
    planted = copy.deepcopy(roots_copy)
    planted["data"]["evil-extra-anchor.crt"] = "x"
    planted["metadata"]["annotations"]["planted"] = "y"
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(planted)
    await ctl.reconcile("modern")
    assert writer.patches == [
        (
            "linkerd/linkerd-identity-trust-roots-preserved",
            {
                "data": {"evil-extra-anchor.crt": None},
                "metadata": {"annotations": {"planted": None}},
            },
        )
    ]


async def test_a_key_the_copy_no_longer_keeps_leaves_with_our_apply_not_as_foreign() -> None:
    """Someone removes a key of linkerd-config that is not ours (``install``): the copy of what
    we do not write follows, and the key leaves it with our own server-side apply (we sent it
    before). It is nobody else's content: nothing is patched away, nothing is warned of."""
    ctl, writer, _ = controller(config(), configmap=install_configmap())
    await ctl.reconcile("edge-19.12.3")
    preserved, ours = writer.applied
    assert "install" in preserved["data"]
    ctl.configmaps.store.put(preserved)
    edited = merged(install_configmap(), ours)
    del edited["data"]["install"]
    ctl.configmaps.store.put(edited)
    before = len(writer.applied)
    with capture_logs() as logs:
        await ctl.reconcile("edge-19.12.3")
    (kept,) = writer.applied[before:]
    assert kept["metadata"]["name"] == "linkerd-config-preserved"
    assert "install" not in kept["data"]
    assert writer.patched == []
    assert "foreign content removed from a preserved copy" not in [e["event"] for e in logs]


async def test_a_values_key_the_copy_no_longer_keeps_leaves_with_our_apply_not_as_foreign() -> None:
    """The same in the values format: ``linkerd-crds-chart-version`` (Linkerd's, not ours)
    removed from linkerd-config leaves the copy with our own apply, nothing patched away."""
    ctl, writer, _, config_cm = await reconciled_modern()
    preserved = next(
        a for a in writer.applied if a["metadata"]["name"] == "linkerd-config-preserved"
    )
    ours = next(a for a in writer.applied if a["metadata"]["name"] == "linkerd-config")
    assert "linkerd-crds-chart-version" in preserved["data"]
    ctl.configmaps.store.put(preserved)
    edited = merged(config_cm, ours)
    del edited["data"]["linkerd-crds-chart-version"]
    ctl.configmaps.store.put(edited)
    before = len(writer.applied)
    with capture_logs() as logs:
        await ctl.reconcile("modern")
    kept = [
        a for a in writer.applied[before:] if a["metadata"]["name"] == preserved["metadata"]["name"]
    ]
    assert kept and "linkerd-crds-chart-version" not in kept[-1]["data"]
    assert writer.patched == []
    assert "foreign content removed from a preserved copy" not in [e["event"] for e in logs]


# -- reverts counted: linkerd_config_configmap_reverts_total{linkerdconfig} ------------------

REVERTS = "linkerd_config_configmap_reverts_total"


def reverts(ctl: Any, name: str) -> float | None:
    value: float | None = ctl.metrics.registry.get_sample_value(REVERTS, {"linkerdconfig": name})
    return value


async def test_a_revert_is_counted_and_a_first_write_or_a_new_spec_is_not() -> None:
    ctl, writer, recorder = controller(config(), configmap=install_configmap())
    await ctl.reconcile("edge-19.12.3")
    assert recorder.events[-1] == ("Normal", "ConfigMapUpdated")
    # The series exists from the first write, at zero: a later revert is an increase.
    assert reverts(ctl, "edge-19.12.3") == 0
    preserved, ours = writer.applied
    edited = merged(install_configmap(), ours)
    proxy = ours["data"]["proxy"].replace("edge-19.12.3", "edge-19.12.1")
    edited["data"] = {**edited["data"], "proxy": proxy}
    ctl.configmaps.store.put(edited)
    ctl.configmaps.store.put(preserved)
    await ctl.reconcile("edge-19.12.3")
    assert recorder.events[-1] == ("Normal", "ConfigMapReverted")
    assert reverts(ctl, "edge-19.12.3") == 1
    # A changed spec rewrites the ConfigMap too (another hash): an update, not a revert.
    ctl.configs.store.put(config(clusterDomain="example.org"))
    await ctl.reconcile("edge-19.12.3")
    assert recorder.events[-1] == ("Normal", "ConfigMapUpdated")
    assert reverts(ctl, "edge-19.12.3") == 1


async def test_a_values_revert_is_counted_for_its_linkerdconfig() -> None:
    ctl, writer, recorder, config_cm = await reconciled_modern()
    assert reverts(ctl, "modern") == 0
    preserved, _, ours = writer.applied
    upgraded = yaml.safe_load(config_cm["data"]["values"])  # `helm upgrade`: ours lost
    helm = merged(config_cm, ours)
    helm["data"] = {**helm["data"], "values": yaml.safe_dump(upgraded)}
    ctl.configmaps.store.put(helm)
    ctl.configmaps.store.put(preserved)
    await ctl.reconcile("modern")
    assert recorder.events[-1] == ("Normal", "ConfigMapReverted")
    assert reverts(ctl, "modern") == 1


async def both_anchors_reconciled() -> tuple[str, str, Json, Any]:
    """The install's anchor X, the bundle [X, B], a LinkerdConfig stating [X, B], and
    ``reconciled_modern`` of it."""
    x = modern_install()[1]["data"]["ca-bundle.crt"]
    both = f"{x.strip()}\n{SECOND_TRUST_ANCHOR.strip()}"
    first = small()
    first["spec"]["global"] = {"identityContext": {"trustAnchorsPEM": both}}
    return x, both, first, await reconciled_modern(first)


async def test_a_held_removal_restores_deleted_trust_roots_with_both_anchors() -> None:
    """Issue 37, finding 1, at the reconcile: [X, B] written and recorded, a meshed pod still
    on [X], the spec at [B], the trust roots deleted. The copy kept of what was written
    ([X, B]) restores them, the removal stays held (ConfigMapSynced=False), and the configuration
    written and rolled out is the one with both anchors. Before, they came back holding [B]."""
    x, both, first, (ctl, writer, _, config_cm) = await both_anchors_reconciled()
    _, roots_copy, ours, _ = writer.applied
    assert roots_copy["data"] == {"ca-bundle.crt": both}  # the copy keeps the bundle written
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(roots_copy)
    ctl.configmaps.store.delete(ROOTS_KEY)
    on_x = hashlib.sha256(x.encode()).hexdigest()
    ctl.meshed_pods.store.put(
        {
            "metadata": {
                "name": "bystander-1",
                "namespace": "shop",
                "annotations": {mesh.TRUST_ROOT_ANNOTATION: on_x},
            }
        }
    )
    status = writer.statuses[-1]
    only_b = {**first, "metadata": {**first["metadata"], "generation": 2}}
    only_b["spec"] = {
        **first["spec"],
        "global": {"identityContext": {"trustAnchorsPEM": SECOND_TRUST_ANCHOR}},
    }
    ctl.configs.store.put({**only_b, "status": status})
    await ctl.reconcile("modern")
    (created,) = writer.created
    assert created["data"]["ca-bundle.crt"] == both
    written = writer.statuses[-1]
    assert conditions(written)["ConfigMapSynced"] == ("False", "TrustAnchorRemovalHeld")
    assert written["trustAnchorHold"]["pods"] == ["shop/bystander-1"]
    assert written["configHash"] == status["configHash"]  # the [X, B] configuration


WAITS = "trust bundle change waits for the meshed pods"


async def test_a_bundle_change_waits_unwritten_until_the_meshed_pods_are_seen() -> None:
    """The meshed pods' cache is started on demand (``informers_on_demand``): the first
    reconcile that changes the trust bundle wants it, and until it has filled writes nothing,
    says nothing in status and is tried again shortly; then the guard judges it (here: held,
    a pod on [X] alone). A reconcile that leaves the bundle alone neither wants nor waits for
    the cache."""
    x, _, first, (ctl, writer, _, config_cm) = await both_anchors_reconciled()
    preserved, roots_copy, ours, roots = writer.applied
    installed_roots = modern_install()[1]
    assert roots["metadata"]["name"] == installed_roots["metadata"]["name"]
    for cm in (merged(config_cm, ours), preserved, roots_copy, merged(installed_roots, roots)):
        ctl.configmaps.store.put(cm)
    status = writer.statuses[-1]
    filled(ctl.meshed_pods, yet=False)
    ctl.meshed_pods.store.put(meshed_pod("bystander-1", x))
    ctl.configs.store.put({**first, "status": status})
    with capture_logs() as logs:
        await ctl.reconcile("modern")  # the bundle unchanged: no wait
    assert WAITS not in [e["event"] for e in logs]
    assert ctl.meshed_pods.wanted_at is None
    only_b = {**first, "metadata": {**first["metadata"], "generation": 2}}
    only_b["spec"] = {
        **first["spec"],
        "global": {"identityContext": {"trustAnchorsPEM": SECOND_TRUST_ANCHOR}},
    }
    ctl.configs.store.put({**only_b, "status": status})
    writer.applied.clear()
    statuses = len(writer.statuses)
    with capture_logs() as logs:
        waited = await ctl.reconcile("modern")
    assert waited == Result(requeue_after=MESH_UNSEEN_RETRY_SECONDS)
    assert WAITS in [e["event"] for e in logs]
    assert ctl.meshed_pods.wanted_at is not None  # its first list starts now
    assert writer.applied == [] and writer.created == [] and writer.patched == []
    assert len(writer.statuses) == statuses
    filled(ctl.meshed_pods)
    await ctl.reconcile("modern")
    written = writer.statuses[-1]
    assert conditions(written)["ConfigMapSynced"] == ("False", "TrustAnchorRemovalHeld")
    assert written["trustAnchorHold"]["pods"] == ["shop/bystander-1"]


async def test_a_legacy_bundle_change_is_written_without_wanting_the_meshed_pods() -> None:
    """In the legacy format no pod says which bundle it runs (edge-19.12's injector stamps no
    trust-root hash), so the guard holds nothing there: a removal is written at once, and the
    meshed pods' cache, which could tell nothing, is never wanted (never started)."""
    first = config()
    identity = first["spec"]["global"]["identityContext"]
    x = identity["trustAnchorsPEM"]
    identity["trustAnchorsPEM"] = f"{x.strip()}\n{SECOND_TRUST_ANCHOR.strip()}"
    ctl, writer, _ = controller(first, configmap=install_configmap())
    await ctl.reconcile("edge-19.12.3")
    preserved, ours = writer.applied
    ctl.configmaps.store.put(preserved)
    ctl.configmaps.store.put(merged(install_configmap(), ours))
    filled(ctl.meshed_pods, yet=False)
    only_b = copy.deepcopy({**first, "metadata": {**first["metadata"], "generation": 2}})
    only_b["spec"]["global"]["identityContext"]["trustAnchorsPEM"] = SECOND_TRUST_ANCHOR
    ctl.configs.store.put({**only_b, "status": writer.statuses[-1]})
    writer.applied.clear()
    with capture_logs() as logs:
        assert await ctl.reconcile("edge-19.12.3") == Result()
    assert WAITS not in [e["event"] for e in logs]
    assert ctl.meshed_pods.wanted_at is None
    _, written = writer.applied  # the preserved copy, then linkerd-config itself
    assert written["metadata"]["name"] == "linkerd-config"
    anchors = json.loads(written["data"]["global"])["identityContext"]["trustAnchorsPem"]
    assert anchors.strip() == SECOND_TRUST_ANCHOR.strip()
    assert conditions(writer.statuses[-1])["ConfigMapSynced"][0] == "True"


def meshed_pod(name: str, bundle: str) -> Json:
    digest = hashlib.sha256(bundle.encode()).hexdigest()
    annotations = {mesh.TRUST_ROOT_ANNOTATION: digest}
    return {"metadata": {"name": name, "namespace": "shop", "annotations": annotations}}


async def test_someone_elses_removal_from_a_bundle_left_to_the_cluster_is_held_not_written() -> (
    None
):
    """The spec states no anchor; a ``helm upgrade`` drops X from the trust roots while a
    meshed pod runs X alone. The controller wrote [X, B] back to hold on to it, and once the
    pod was gone the hold lifted with [X, B] written: the rotation's [B] lost for good, and
    the trust roots labelled ours. Now nothing is written (the bundle is not ours) and nothing
    restarts while the pod needs X; once it does not, [B] stands, untouched."""
    x = modern_install()[1]["data"]["ca-bundle.crt"]
    only_b = SECOND_TRUST_ANCHOR.strip()
    both = f"{x.strip()}\n{only_b}"
    config_cm, roots = modern_install()
    roots["data"]["ca-bundle.crt"] = both
    ctl, writer, _ = controller(small(), configmap=config_cm)
    ctl.configmaps.store.put(roots)
    ctl.meshed_pods.store.put(meshed_pod("old-1", x))
    await ctl.reconcile("modern")
    preserved, roots_copy, ours = writer.applied
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(preserved)
    ctl.configmaps.store.put(roots_copy)
    ctl.configs.store.put({**small(), "status": writer.statuses[-1]})
    ctl.configmaps.store.put({**roots, "data": {"ca-bundle.crt": only_b}})  # helm upgrade
    writer.applied.clear()
    restarts: list[str] = []
    real_roll = ctl.rollout.roll

    async def roll(*args: Any, **kwargs: Any) -> Any:
        restarts.append("roll")
        return await real_roll(*args, **kwargs)

    ctl.rollout.roll = roll
    await ctl.reconcile("modern")
    touched = [a["metadata"]["name"] for a in writer.applied] + writer.patched
    assert touched == [] and writer.created == [] and restarts == []
    status = writer.statuses[-1]
    assert conditions(status)["ConfigMapSynced"] == ("False", "TrustAnchorRemovalHeld")
    said = message_of(status, "ConfigMapSynced")
    assert "someone else wrote" in said and "nothing is written or restarted" in said
    assert "stays written" not in said
    ctl.configs.store.put({**small(), "status": status})
    ctl.meshed_pods.store.delete("shop/old-1")
    ctl.meshed_pods.store.put(meshed_pod("new-1", only_b))
    await ctl.reconcile("modern")
    assert "linkerd-identity-trust-roots" not in [a["metadata"]["name"] for a in writer.applied]
    assert conditions(writer.statuses[-1])["ConfigMapSynced"][0] == "True"
    assert writer.statuses[-1]["trustAnchorSource"] == "Cluster"


async def test_an_unreadable_bundle_the_spec_leaves_to_the_cluster_is_named_where_it_is() -> None:
    """The spec states no anchor and the trust roots hold no certificate: said of the
    ConfigMap's key, not of a spec field the object never set."""
    config_cm, roots = modern_install()
    ctl, writer, _ = controller(small(), configmap=config_cm)
    ctl.configmaps.store.put(roots)
    await ctl.reconcile("modern")
    _, roots_copy, ours = writer.applied
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(roots_copy)
    ctl.configmaps.store.put({**roots, "data": {"ca-bundle.crt": "garbage"}})
    ctl.configs.store.put({**small(), "status": writer.statuses[-1]})
    await ctl.reconcile("modern")
    said = message_of(writer.statuses[-1], "ConfigMapSynced")
    assert said.startswith("ConfigMap linkerd/linkerd-identity-trust-roots, key ca-bundle.crt:")
    assert "trustAnchors" not in said


# -- adopting an installation (issue 37, finding 6) -----------------------------------------


def opted_in_pod(version: str) -> Json:
    meta = {
        "name": "web-0",
        "namespace": "apps",
        "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
        "annotations": {mesh.PROXY_VERSION_ANNOTATION: version},
    }
    return {"metadata": meta, "status": {"phase": "Running"}}


def at_version(obj: Json, resource_version: str = "41") -> Json:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": resource_version}}


def paused(obj: Json) -> Json:
    """Its rollout paused: the pods are counted, nothing is restarted (no injector to ask)."""
    return {**obj, "spec": {**obj["spec"], "rollout": {"paused": True}}}


async def test_the_installation_adopted_is_recorded_before_the_first_write() -> None:
    installed = install_configmap()
    ctl, writer, recorder = controller(paused(at_version(config())), configmap=installed)
    ctl.pods.store.put(opted_in_pod("edge-19.12.1"))  # runs what is installed
    await ctl.reconcile("edge-19.12.3")
    assert writer.calls[:3] == ["status", "apply:linkerd-config-preserved", "apply:linkerd-config"]
    record = writer.statuses[0]["lastCompleted"]
    assert record["installed"] == {
        "data": {k: installed["data"][k] for k in ("global", "proxy")},
        "companions": {},
    }
    assert (record["generation"], record["spec"]) == (0, None)
    assert writer.preconditions[0] == "41"  # on the status it was decided from
    assert writer.preconditions[-1] == "41"  # the report's too (a uid is no precondition)
    # The first write vouches for the record (issue 61, finding 1): what it replaces is gone.
    adopted = Completed.parse(record)
    assert adopted is not None
    ours = writer.applied[-1]["metadata"]["annotations"]
    assert ours[COMPLETED_ANNOTATION] == digest(adopted)
    assert ("Normal", "Adopted") in recorder.events
    assert record["configHash"] != writer.statuses[-1]["configHash"]


async def test_a_values_installation_is_recorded_with_its_trust_roots() -> None:
    _, writer, _, installed = await reconciled_modern(at_version(small()))
    record = writer.statuses[0]["lastCompleted"]
    roots = {d["metadata"]["name"]: d["data"] for d in modern_install()}
    assert record["installed"] == {
        "data": {"values": installed["data"]["values"]},
        "companions": {"linkerd-identity-trust-roots": roots["linkerd-identity-trust-roots"]},
    }
    assert writer.calls.index("status") < writer.calls.index("apply:linkerd-config")


async def test_an_adoption_not_recorded_writes_nothing_and_retries() -> None:
    ctl, writer, _ = controller(at_version(config()), configmap=install_configmap())
    writer.refuse_status = ApiError(409, "PATCH", "/x", {"reason": "Conflict"}, None)
    assert await ctl.reconcile("edge-19.12.3") == Result(requeue=True)
    assert writer.applied == []


async def test_no_adoption_of_an_installation_pods_do_not_run_or_after_a_first_write() -> None:
    ctl, writer, recorder = controller(paused(config()), configmap=install_configmap())
    ctl.pods.store.put(opted_in_pod("edge-19.12.0"))  # not on what is installed
    await ctl.reconcile("edge-19.12.3")
    assert all("lastCompleted" not in s for s in writer.statuses)
    assert "apply:linkerd-config" in writer.calls  # written all the same
    assert ("Normal", "Adopted") not in recorder.events
    written = {**config(), "status": {"configHash": "0123456789abcdef"}}
    ctl, writer, recorder = controller(written, configmap=install_configmap())
    await ctl.reconcile("edge-19.12.3")
    assert writer.calls[0] == "apply:linkerd-config-preserved"
    assert ("Normal", "Adopted") not in recorder.events
    # With no pods its own configuration completes at once: a spec, no installation.
    assert writer.statuses[-1]["lastCompleted"]["installed"] is None


async def test_the_injector_wait_restarts_when_the_configmap_moves_to_the_configuration() -> None:
    """The rollout's fallback wait for the injector runs from when the ConfigMap came to the
    configuration: a reconcile that writes it over another (the first write, a rollback's
    end, the spec back to it) restarts it; one that finds it there, or reverts an edit of
    it, does not."""
    ctl, writer, _ = controller(config(), configmap=install_configmap())
    clock = [100.0]
    ctl.rollout.monotonic = lambda: clock[0]
    await ctl.reconcile("edge-19.12.3")
    (first,) = [a for a in writer.applied if a["metadata"]["name"] == "linkerd-config"]
    written = first["metadata"]["annotations"][HASH_ANNOTATION]
    progress = ctl.rollout._of(written)
    assert progress.written_at == 100.0  # written over an installation of no hash of ours

    ctl.configmaps.store.put(merged(install_configmap(), first))
    clock[0] = 200.0
    await ctl.reconcile("edge-19.12.3")
    assert progress.written_at == 100.0  # found there: the wait runs on

    edited = merged(install_configmap(), first)
    edited["data"] = {**edited["data"], "global": '{"tampered": 1}'}
    ctl.configmaps.store.put(edited)  # a manual edit, our hash still on it: reverted
    clock[0] = 250.0
    await ctl.reconcile("edge-19.12.3")
    assert writer.applied[-1]["metadata"]["name"] == "linkerd-config"  # the revert
    assert progress.written_at == 100.0  # the same configuration: the wait runs on

    elsewhere = merged(install_configmap(), first)
    elsewhere["metadata"]["annotations"][HASH_ANNOTATION] = "0123456789abcdef"
    ctl.configmaps.store.put(elsewhere)  # another configuration in it since (a rollback's)
    clock[0] = 300.0
    await ctl.reconcile("edge-19.12.3")
    assert progress.written_at == 300.0


@pytest.mark.parametrize(
    ("padding", "where", "threaded"),
    [
        (0, "", False),
        (8192, "linkerd-config", True),
        (8192, "annotation", True),  # a spec's own size counts: its values render from it
        (8192, "elsewhere", False),  # a ConfigMap of another namespace is not read
        (0, "modern", True),  # the values format: Linkerd's own 8 KB of values
    ],
)
async def test_only_a_reconcile_over_more_than_a_few_kb_decides_in_a_thread(
    monkeypatch: pytest.MonkeyPatch, padding: int, where: str, threaded: bool
) -> None:
    """Both formats. A legacy installation's 1.5 KB and its 1.5 KB spec decide in about
    50 µs: on the event loop, sparing a thread's round trip (a tenth of a revert's CPU).
    Linkerd's own 8 KB of values takes 8 ms, a spec whose values render to 250 KB 80 ms, and
    the bounds admit 256 KiB: those are decided in a thread, off the loop."""
    sent: list[object] = []
    to_thread = asyncio.to_thread

    async def recording(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        sent.append(func)
        return await to_thread(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", recording)
    installed, stated = install_configmap(), config()
    if where == "linkerd-config":
        installed["data"] = {**installed["data"], "unmanaged": "x" * padding}
    if where == "annotation":
        stated["metadata"]["annotations"] = {"example.com/note": "x" * padding}
    name = "edge-19.12.3"
    if where == "modern":
        (installed, roots), stated, name = modern_install(), small(), "modern"
    ctl, writer, _ = controller(stated, configmap=installed)
    if where == "modern":
        ctl.configmaps.store.put(roots)
    if where == "elsewhere":
        ctl.configmaps.store.put(
            {"metadata": {"name": "big", "namespace": "other"}, "data": {"k": "x" * padding}}
        )
    await ctl.reconcile(name)
    assert [a["metadata"]["name"] for a in writer.applied][-1] == "linkerd-config"
    assert any(getattr(f, "__name__", "") == "decide" for f in sent) is threaded
    assert rollback.rendered_target not in sent  # no rollback in force: nothing sent for it


@pytest.mark.parametrize("deleted", ["linkerd/linkerd-config", ROOTS_KEY])
async def test_a_configmap_made_again_by_someone_else_is_not_written_over(deleted: str) -> None:
    """Issue 61, finding 2: the cache showed a deletion, but someone made the ConfigMap again
    before our restore (a reinstall: new Helm values). The restore's create is refused (409):
    nothing of ours is applied on the view from before theirs; the reconcile runs again on
    what is there (before, an apply with no precondition put the old copy's values back)."""
    ctl, writer, _, config_cm = await reconciled_modern()
    preserved, roots_copy, ours = writer.applied
    ctl.configmaps.store.put(merged(config_cm, ours))
    ctl.configmaps.store.put(roots_copy)
    ctl.configmaps.store.put(preserved)
    ctl.configmaps.store.delete(deleted)
    writer.refuse_create = ApiError(
        409, "POST", "/api/v1/namespaces/linkerd/configmaps", {"reason": "AlreadyExists"}, None
    )
    applied = len(writer.applied)
    result = await ctl.reconcile("modern")
    assert result == Result(requeue=True)
    assert writer.applied[applied:] == []  # no apply over theirs
    name = deleted.split("/", 1)[1]
    assert not [s for s in writer.statuses if "failed" in json.dumps(s) and name in json.dumps(s)]


async def test_a_restore_applies_our_keys_on_the_configmap_it_created() -> None:
    """The apply after a restore is made on the object the restore created: a change since
    (someone else's) is refused, not written over."""
    ctl, writer, _, _ = await reconciled_modern()
    preserved, roots_copy, _ = writer.applied
    ctl.configmaps.store.put(roots_copy)
    ctl.configmaps.store.put(preserved)
    ctl.configmaps.store.delete("linkerd/linkerd-config")
    created = len(writer.created)
    await ctl.reconcile("modern")
    assert [c["metadata"]["name"] for c in writer.created[created:]] == ["linkerd-config"]
    assert writer.apply_preconditions[-1] == f"c{len(writer.created)}"  # the create's answer
