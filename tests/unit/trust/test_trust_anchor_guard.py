"""The trust-anchor guard's decisions, from tables: which bundle changes drop an anchor, which
meshed pods hold a drop, what the record of known bundles keeps, how bundles are read (bounded,
cached), and what ``plan`` and ``status`` say. Pods as the controller caches them (its
projection); ConfigMaps as Linkerd's own installs wrote them (edge-26.8.3's ``linkerd install``,
edge-19.12.1's ``linkerd-config``)."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from linkerd_config.inspection import render_plan, render_status
from linkerd_config.kube import x509_reader
from linkerd_config.kube.resource import Keyed, object_key
from linkerd_config.linkerd.configmap.desired import desired_config
from linkerd_config.linkerd.formats import FormatError
from linkerd_config.linkerd.formats.helm_values import TRUST_ROOTS_CONFIGMAP, TRUST_ROOTS_KEY
from linkerd_config.linkerd.mesh import TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.status.plan import plan, status
from linkerd_config.linkerd.status.view import ClusterView
from linkerd_config.linkerd.trust import guard
from tests.support.anchors import bundle, trust_anchor
from tests.support.samples import install_configmap, modern_install

Json = dict[str, Any]

A, B, C = (trust_anchor(f"{n}.root.linkerd.cluster.local") for n in "abc")
UNKNOWN = "f" * 64


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def parsed(text: str) -> guard.Bundle:
    return guard.parse_bundle(text, "test")


def fingerprint(pem: str) -> str:
    return x509.load_pem_x509_certificate(pem.encode()).fingerprint(hashes.SHA256()).hex()


def meshed(namespace: str, name: str, digest: str | None, created: str | None = None) -> Keyed:
    """A meshed pod as the API server serves it, through the controller's projection, under
    the key the informer gives it."""
    annotations = {"linkerd.io/proxy-version": "edge-26.8.3"}
    if digest is not None:
        annotations[TRUST_ROOT_ANNOTATION] = digest
    served: Json = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": {guard.MESHED_LABEL: "linkerd", "app": name},
            "annotations": annotations,
        }
    }
    if created is not None:
        served["metadata"]["creationTimestamp"] = created
    return object_key(served), guard.meshed_pod_projection(served)


# -- the decision, from a table ----------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    current: str
    desired: str
    pods: tuple[tuple[str, str | None], ...]
    """(pod name, the bundle text it was injected with, or a raw hash, or None: no hash)."""
    dropped: tuple[str, ...] = ()
    holding: tuple[str, ...] = ()
    unknown: int = 0
    unseen: int = 0
    swap: bool = False
    known: tuple[str, ...] = field(default=())
    """Bundles in the status record, besides the current and the desired ones."""


AB, BA = bundle(A, B), bundle(B, A)
CASES = [
    Case("add only: pods on the old bundle stay fine", bundle(A), AB, (("p1", bundle(A)),)),
    Case(
        "drop, every pod already on the bundle with both",
        AB,
        bundle(B),
        (("p1", AB), ("p2", AB)),
        dropped=(A,),
    ),
    Case(
        "drop, a pod still on the old bundle (recorded) holds it",
        AB,
        bundle(B),
        (("p1", AB), ("old", bundle(A))),
        dropped=(A,),
        holding=("ns/old",),
        known=(bundle(A),),
    ),
    Case(
        "drop, a pod on a bundle never read holds it (counts as lacking)",
        AB,
        bundle(B),
        (("p1", AB), ("stranger", UNKNOWN)),
        dropped=(A,),
        holding=("ns/stranger",),
        unknown=1,
    ),
    Case(
        "drop, the old bundle unrecorded: its pods hold it as unknown",
        AB,
        bundle(B),
        (("old", bundle(A)),),
        dropped=(A,),
        holding=("ns/old",),
        unknown=1,
    ),
    Case(
        "drop, pods without the annotation cannot be seen",
        AB,
        bundle(B),
        (("p1", AB), ("before-2.12.1", None)),
        dropped=(A,),
        unseen=1,
    ),
    Case(
        "re-ordered: the same anchors, nothing dropped",
        AB,
        BA,
        (("stranger", UNKNOWN), ("old", bundle(A))),
    ),
    Case(
        "re-formatted (CRLF, blank lines, text between blocks): nothing dropped",
        AB,
        "# rotated 2026\r\n" + A.replace("\n", "\r\n") + "\r\n\r\nnext:\r\n" + B + "\n\n",
        (("stranger", UNKNOWN),),
    ),
    Case(
        "drop while adding: the anchor kept is what pods need",
        AB,
        bundle(B, C),
        (("p1", AB), ("old", bundle(A))),
        dropped=(A,),
        holding=("ns/old",),
        known=(bundle(A),),
    ),
    Case(
        "a swap is staged as a rotation: held while a pod lacks the new anchor",
        bundle(A),
        bundle(B),
        (("p1", bundle(A)), ("stranger", UNKNOWN)),
        dropped=(A,),
        holding=("ns/p1", "ns/stranger"),
        unknown=1,
        swap=True,
    ),
    Case(
        "a swap with no meshed pod: written (nobody to split from)",
        bundle(A),
        bundle(B),
        (),
        dropped=(A,),
        swap=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_new_bundle_is_held_exactly_while_a_pod_needs_what_it_drops(case: Case) -> None:
    current, desired = parsed(case.current), parsed(case.desired)
    known = {h(text): parsed(text).fingerprints for text in case.known}
    pods = [
        meshed("ns", name, None if on is None else on if len(on) == 64 else h(on))
        for name, on in case.pods
    ]
    decision = guard.decide(current, desired, known, pods, where="ConfigMap linkerd/roots")
    assert [a.sha256 for a in decision.dropped] == [fingerprint(a) for a in case.dropped]
    assert decision.unseen == case.unseen
    assert decision.swap == case.swap
    if not case.holding:
        assert decision.hold is None and not decision.held
        said = decision.message()
        assert ("keeps none of the current anchors" in said) == case.swap
        if case.swap:
            assert "none is left without a common anchor" in said
        assert bool(said) == bool(case.dropped)
        return
    hold = decision.hold
    assert hold is not None and decision.held
    assert hold.pods == case.holding and hold.count == len(case.holding)
    assert hold.unknown == case.unknown
    assert {a.sha256 for a in hold.required} == {fingerprint(B)}  # the anchor kept
    message = decision.message()
    assert message.startswith("ConfigMap linkerd/roots not written")
    assert ("staged as a rotation" in message) == case.swap
    assert all(p in message for p in case.holding)
    assert "b.root.linkerd.cluster.local" in message and "a.root.linkerd.cluster.local" in message


def test_a_hold_names_the_first_pods_and_counts_the_rest() -> None:
    pods = [meshed(f"ns{i % 3}", f"pod-{i:02}", h(bundle(A))) for i in range(25)]
    decision = guard.decide(parsed(AB), parsed(bundle(B)), {}, pods)
    hold = decision.hold
    assert hold is not None
    assert hold.count == 25 and len(hold.pods) == guard.MAX_LISTED_PODS
    assert list(hold.pods) == sorted(f"ns{i % 3}/pod-{i:02}" for i in range(25))[:20]
    assert "and 5 more" in decision.message()
    assert hold.unknown == 25  # [A] was never recorded


def test_the_hash_is_linkerds_sha256_of_the_bundles_exact_bytes() -> None:
    """pkg/inject: hex.EncodeToString(sha256.Sum256([]byte(IdentityTrustAnchorsPEM))), the
    file as mounted: nothing trimmed, lowercase hex."""
    text = A + "\n"
    assert guard.bundle_hash(text) == hashlib.sha256(text.encode()).hexdigest()
    assert guard.bundle_hash(text) != guard.bundle_hash(text.strip())
    assert parsed(text).sha256 == guard.bundle_hash(text)
    roots = {cm["metadata"]["name"]: cm for cm in modern_install()}[TRUST_ROOTS_CONFIGMAP]
    config = linkerdconfig()
    desired = desired_config(config, installed())
    assert desired.proxy.trust_root_sha256 == guard.bundle_hash(roots["data"][TRUST_ROOTS_KEY])


# -- reading bundles: bounded, cached ----------------------------------------------------------

REFUSED = [
    ("x" * (guard.MAX_BUNDLE_CHARS + 1), "longer than"),
    (A * (guard.MAX_CERTIFICATES + 1), f"more than {guard.MAX_CERTIFICATES} certificates"),
    (A.replace("-----END CERTIFICATE-----", ""), "without its -----END"),
    ("-----END CERTIFICATE-----\n" + A, "do not pair up"),
    ("no pem here", "no -----BEGIN CERTIFICATE----- block"),
    (A.replace("MII", "AAA", 1), "does not parse as X.509"),
    ("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "no -----BEGIN"),
]


@pytest.mark.parametrize(("text", "problem"), REFUSED, ids=[p for _, p in REFUSED])
def test_an_unreadable_bundle_is_an_error_naming_where_it_is(text: str, problem: str) -> None:
    where = "ConfigMap linkerd/linkerd-identity-trust-roots, key ca-bundle.crt"
    with pytest.raises(guard.BundleError) as caught:
        guard.parse_bundle(text, where)
    assert str(caught.value).startswith(f"{where}: ")
    assert problem in str(caught.value)
    assert isinstance(caught.value, FormatError)


def test_other_pem_blocks_are_no_anchors_and_are_passed_over() -> None:
    key = "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
    assert parsed(key + A).fingerprints == parsed(A).fingerprints


def test_a_bundle_is_parsed_once_per_text(monkeypatch: pytest.MonkeyPatch) -> None:
    text = bundle(trust_anchor("cached"), B)
    calls: list[x509_reader.PemBlock] = []
    real = x509_reader.read_block

    def counting(block: x509_reader.PemBlock) -> x509_reader.Certificate:
        calls.append(block)
        return real(block)

    monkeypatch.setattr(x509_reader, "read_block", counting)
    first = guard.parse_bundle(text, "here")
    assert len(calls) == 2
    assert guard.parse_bundle(text, "elsewhere") is first
    assert len(calls) == 2
    guard.parse_bundle(text + "\n", "here")  # another text, another hash: parsed
    assert len(calls) == 4


# -- the record of known bundles ---------------------------------------------------------------


def test_the_record_keeps_the_newest_bundles_and_skips_what_is_malformed() -> None:
    bundles = [parsed(bundle(trust_anchor(f"r{i}"))) for i in range(guard.MAX_KNOWN_BUNDLES + 2)]
    record = guard.recorded(None, *bundles)
    assert [e["sha256"] for e in record] == [b.sha256 for b in bundles[2:]]
    again = guard.recorded({"trustBundles": record}, bundles[5])  # already there: no move
    assert again == record
    hostile = {
        "trustBundles": [
            "not an object",
            {"sha256": "XYZ", "anchors": [UNKNOWN]},
            {"sha256": UNKNOWN, "anchors": []},
            {"sha256": UNKNOWN, "anchors": ["short"]},
            {"sha256": UNKNOWN[:-1] + "e", "anchors": [UNKNOWN]},
        ]
    }
    assert guard.known_bundles(hostile) == {UNKNOWN[:-1] + "e": frozenset({UNKNOWN})}
    assert guard.known_bundles({"trustBundles": "nonsense"}) == {}


# -- the guard over what the cluster holds (both formats) ---------------------------------------


def installed(**data: str) -> dict[str, dict[str, str]]:
    """edge-26.8.3's ConfigMaps by name (their data), the trust roots' bundle replaced."""
    found = {cm["metadata"]["name"]: dict(cm["data"]) for cm in modern_install()}
    if "bundle" in data:
        found[TRUST_ROOTS_CONFIGMAP][TRUST_ROOTS_KEY] = data["bundle"]
    return found


def linkerdconfig(anchors: str | None = None, version: str | None = None) -> Json:
    spec: Json = {"proxy": {"proxyVersion": "edge-26.8.3"}}
    if anchors is not None:
        spec["global"] = {"identityContext": {"trustAnchorsPEM": anchors}}
    if version is not None:
        spec.setdefault("global", {})["version"] = version
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "linkerd", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
    }


def evaluate(
    config: Json, current: dict[str, dict[str, str]], status: Json | None, pods: list[Json]
) -> guard.Guard:
    desired = desired_config(config, current)
    return guard.evaluate(desired, current, status, lambda: pods)


def test_an_unchanged_bundle_reads_nothing() -> None:
    def no_pods() -> list[Json]:
        raise AssertionError("the pods were listed")

    current = installed(bundle="not even PEM")  # never parsed: it does not change
    config = linkerdconfig()
    desired = desired_config(config, current)
    found = guard.evaluate(desired, current, None, no_pods)
    assert not found.held and found.decision.dropped == () and found.record == []
    assert found.status_changes(None) == {}


def test_a_rotation_in_three_steps_on_edge_26_8_3s_own_configmaps() -> None:
    """The install's anchor X; then [X, B] (written, recorded); then [B] held by a pod still
    on [X], written once that pod is gone."""
    x = installed()[TRUST_ROOTS_CONFIGMAP][TRUST_ROOTS_KEY]
    both = bundle(x, B)
    on_x = meshed("shop", "vote-bot-1", h(x))
    first = evaluate(linkerdconfig(both), installed(), None, [on_x])
    assert not first.held and first.decision.dropped == ()
    status: Json = first.status_changes(None)
    assert [e["sha256"] for e in status["trustBundles"]] == [h(x), h(both)]
    assert "trustAnchorHold" not in status

    after = installed(bundle=both)
    on_both = meshed("shop", "web-1", h(both))
    second = evaluate(linkerdconfig(bundle(B)), after, status, [on_x, on_both])
    assert second.held
    hold = second.decision.hold
    assert hold is not None and hold.pods == ("shop/vote-bot-1",) and hold.unknown == 0
    changes = second.status_changes(status)
    assert changes["trustAnchorHold"]["pods"] == ["shop/vote-bot-1"]
    assert changes["trustAnchorHold"]["dropped"] == [str(a) for a in second.decision.dropped]
    assert "trustBundles" not in changes  # nothing new known: [B] is not written
    status |= changes
    message = second.decision.message()
    assert message.startswith(
        f"ConfigMap linkerd/{TRUST_ROOTS_CONFIGMAP}, key {TRUST_ROOTS_KEY} not written"
    )

    third = evaluate(linkerdconfig(bundle(B)), after, status, [on_both])
    assert not third.held and third.decision.dropped == second.decision.dropped
    cleared = third.status_changes(status)
    assert cleared["trustAnchorHold"] is None  # removes the hold from status
    assert cleared["trustBundles"][-1]["sha256"] == h(bundle(B))
    assert "every meshed pod" in third.decision.message()


def test_a_changed_bundle_over_an_unreadable_one_names_the_configmap() -> None:
    with pytest.raises(guard.BundleError) as caught:
        evaluate(linkerdconfig(bundle(B)), installed(bundle="garbage"), None, [])
    assert f"ConfigMap linkerd/{TRUST_ROOTS_CONFIGMAP}, key {TRUST_ROOTS_KEY}:" in str(caught.value)


def test_the_legacy_format_is_not_guarded_and_says_so() -> None:
    """Linkerd edge-19.12.1's own linkerd-config: its proxies carry no trust-root hash."""
    cm = install_configmap()
    config = copy.deepcopy(linkerdconfig(B, "edge-19.12.3"))
    config["spec"]["proxy"]["proxyInitImageVersion"] = "v1.2.0"
    current = {"linkerd-config": dict(cm["data"])}
    desired = desired_config(config, current)
    assert desired.config_format == "legacy" and desired.proxy.trust_root_sha256 is None
    pods = [meshed("emojivoto", "web-1", UNKNOWN)]
    found = guard.evaluate(desired, current, None, lambda: pods)
    decision = found.decision
    assert not decision.guarded
    (dropped,) = decision.dropped
    assert dropped.subject == "CN=cluster.local"  # edge-19.12.1's install anchor
    assert "stamps no trust-root hash" in decision.message()
    assert "ConfigMap linkerd/linkerd-config, key global" in decision.message()
    # Issue 58, finding 5: B keeps none of the install's anchors, a swap: held, and said
    # what to apply instead (no pod says which bundle it runs, so no rotation is staged).
    assert decision.swap and decision.held and found.holding is None
    assert "Apply a bundle holding both" in decision.message()


def test_values_releases_before_the_annotation_are_not_guarded() -> None:
    current = installed(bundle=bundle(A, B))
    desired = desired_config(linkerdconfig(bundle(B), "edge-22.8.1"), current)
    assert desired.proxy.trust_root_sha256 is None
    found = guard.evaluate(desired, current, None, lambda: [meshed("a", "b", UNKNOWN)])
    assert not found.decision.guarded and not found.held and found.decision.dropped
    assert "stamps no trust-root hash" in found.decision.message()
    swapped = installed(bundle=bundle(A))
    desired = desired_config(linkerdconfig(bundle(B), "edge-22.8.1"), swapped)
    found = guard.evaluate(desired, swapped, None, lambda: [meshed("a", "b", UNKNOWN)])
    assert not found.decision.guarded and found.held and found.decision.swap
    assert found.decision.message().endswith("restart every meshed pod onto it, then this one")


# -- the meshed pods' cache --------------------------------------------------------------------


def test_a_pod_is_its_key_and_one_record_per_hash_shared_between_pods() -> None:
    (first_key, first), (second_key, second) = (
        meshed("shop", "a", UNKNOWN),
        meshed("b", "b", UNKNOWN),
    )
    assert (first_key, second_key) == ("shop/a", "b/b")
    assert first == {"metadata": {"annotations": {TRUST_ROOT_ANNOTATION: UNKNOWN}}}
    assert first is second
    assert meshed("shop", "c", None)[1] == {"metadata": {"annotations": {}}}
    assert meshed("shop", "c", "e" * 64)[1] != first


def test_the_shared_records_stay_bounded_under_churn() -> None:
    for i in range(2 * guard.MESHED_RECORDS):  # a hostile churn of hashes
        _, record = meshed("shop", "a", f"{i:064x}")
        assert record["metadata"]["annotations"][TRUST_ROOT_ANNOTATION] == f"{i:064x}"
        assert len(guard._RECORDS) <= guard.MESHED_RECORDS


def test_a_pods_record_keeps_the_minute_it_was_created_shared_within_it() -> None:
    _, first = meshed("shop", "a", UNKNOWN, "2026-12-03T17:05:59Z")
    _, second = meshed("shop", "b", UNKNOWN, "2026-12-03T17:05:01Z")
    _, later = meshed("shop", "c", UNKNOWN, "2026-12-03T17:06:00Z")
    assert first is second  # rounded down: never taken for newer than it is
    assert first["metadata"]["creationTimestamp"] == "2026-12-03T17:05:00Z"
    assert later["metadata"]["creationTimestamp"] == "2026-12-03T17:06:00Z"


# -- the issuer's update: the rotation's last step ----------------------------------------------

UPDATED = "2026-12-03T17:00:00Z"
AT = 1_796_317_200.0  # UPDATED
HOUR = 3600.0


def _issuer_world() -> tuple[str, Json, Keyed, Keyed]:
    """[X, B] written and rolled out; Linkerd's identity took up an issuer from B at
    ``UPDATED``: one pod created before it, one after."""
    x = installed()[TRUST_ROOTS_CONFIGMAP][TRUST_ROOTS_KEY]
    both = bundle(x, B)
    first = evaluate(linkerdconfig(both), installed(), None, [])
    status: Json = first.status_changes(None)
    before = meshed("shop", "web-1", h(both), "2026-12-03T16:30:00Z")
    after = meshed("shop", "web-2", h(both), "2026-12-03T17:10:00Z")
    return both, status, before, after


def test_a_removal_waits_for_the_pods_created_before_the_issuers_update() -> None:
    """Issue 60, item 4.2: every pod on [X, B], the issuer re-issued from B. A proxy that
    started before still presents a certificate chained to X until it renews it; written at
    once, [B] would have pods restarted onto it reject it. Held until the certificates
    issued before have aged out (their lifetime, from the values: 24h by default), then
    written by itself; a pod created after never holds it."""
    both, status, before, after = _issuer_world()
    desired = desired_config(linkerdconfig(bundle(B)), installed(bundle=both))
    current = installed(bundle=both)
    held = guard.evaluate(desired, current, status, lambda: [before, after], AT, AT + HOUR)
    assert held.held and held.holding == both
    hold = held.decision.hold
    assert hold is not None and hold.count == 0 and hold.issuer is not None
    assert hold.issuer.pods == ("shop/web-1",) and hold.issuer.count == 1
    assert hold.issuer.update.until == AT + 24 * HOUR + guard.ISSUER_MARGIN
    message = held.decision.message()
    assert "started before Linkerd's identity took up its current issuer" in message
    assert "shop/web-1" in message and "shop/web-2" not in message
    assert held.recheck_after == pytest.approx(23 * HOUR + guard.ISSUER_MARGIN)
    changes = held.status_changes(status)
    assert changes["identityIssuerUpdated"] == UPDATED
    assert changes["trustAnchorHold"]["issuer"]["pods"] == ["shop/web-1"]
    status |= changes

    # The Event expired (an hour on): status still holds the update.
    still = guard.evaluate(desired, current, status, lambda: [before, after], None, AT + 2 * HOUR)
    assert still.held and still.issuer_updated == AT
    # Restarted since (a pod made after the update): nothing left to wait for.
    again = meshed("shop", "web-1", h(both), "2026-12-03T17:20:00Z")
    done = guard.evaluate(desired, current, status, lambda: [again, after], None, AT + 2 * HOUR)
    assert not done.held
    # Or the lifetime passed: every certificate from before has expired.
    aged = AT + 24 * HOUR + guard.ISSUER_MARGIN + 1
    assert not guard.evaluate(desired, current, status, lambda: [before], None, aged).held


def test_the_wait_is_the_certificates_lifetime_as_the_values_say() -> None:
    both, status, before, _ = _issuer_world()
    current = installed(bundle=both)
    values = current["linkerd-config"]["values"]
    assert "issuanceLifetime: 24h0m0s" in values
    current["linkerd-config"]["values"] = values.replace(
        "issuanceLifetime: 24h0m0s", "issuanceLifetime: 90s"
    )
    desired = desired_config(linkerdconfig(bundle(B)), current)
    held = guard.evaluate(desired, current, status, lambda: [before], AT, AT + 60)
    assert held.held and held.decision.hold is not None
    issuer = held.decision.hold.issuer
    assert issuer is not None and issuer.update.lifetime == 90
    assert not guard.evaluate(desired, current, status, lambda: [before], AT, AT + 151).held


def test_an_issuer_update_holds_nothing_that_drops_no_anchor() -> None:
    both, status, before, _ = _issuer_world()
    current = installed(bundle=both)
    desired = desired_config(linkerdconfig(bundle(both, C)), current)
    found = guard.evaluate(desired, current, status, lambda: [before], AT, AT + HOUR)
    assert not found.held and found.decision.dropped == ()
    assert found.status_changes(status)["identityIssuerUpdated"] == UPDATED


def test_an_issuer_update_is_recorded_while_nothing_changes_and_the_latest_kept() -> None:
    current = installed()
    desired = desired_config(linkerdconfig(), current)
    found = guard.evaluate(desired, current, None, lambda: [], AT, AT + 1)
    assert found.status_changes(None) == {"identityIssuerUpdated": UPDATED}
    kept = {"identityIssuerUpdated": UPDATED}
    older = guard.evaluate(desired, current, kept, lambda: [], AT - HOUR, AT + 1)
    assert older.status_changes(kept) == {}  # an older Event does not move it back
    assert guard.issuer_updated({"identityIssuerUpdated": "garbage"}, None) is None


def test_an_issuer_events_time_is_its_last() -> None:
    event = {
        "firstTimestamp": "2026-12-03T16:00:00Z",
        "lastTimestamp": UPDATED,
        "count": 3,
    }
    assert guard.issuer_event_time(event) == AT
    new_api = {"eventTime": "2026-12-03T16:59:00.000000Z", "series": {"lastObservedTime": UPDATED}}
    assert guard.issuer_event_time(new_api) == AT
    assert guard.issuer_event_time({}) is None


# -- plan and status ---------------------------------------------------------------------------


def cluster(bundle_text: str, pods: list[Keyed], stored: Json | None) -> ClusterView:
    configmaps = {}
    for cm in copy.deepcopy(modern_install()):
        if cm["metadata"]["name"] == TRUST_ROOTS_CONFIGMAP:
            cm["data"][TRUST_ROOTS_KEY] = bundle_text
        configmaps[f"linkerd/{cm['metadata']['name']}"] = cm
    return ClusterView(
        configs=[stored] if stored else [],
        configmaps=configmaps,
        pods=[],
        namespaces={},
        replicasets={},
        workloads={},
        config_namespace="linkerd",
        meshed=pods,
    )


DEFAULTS = RolloutOptions(max_restarts_per_pass=2, restart_interval=5.0)


def test_plan_shows_the_hold_before_anything_is_applied_and_status_too() -> None:
    both = bundle(A, B)
    stored = linkerdconfig(both)
    stored["status"] = {"trustBundles": guard.recorded(None, parsed(bundle(A)), parsed(both))}
    pods = [meshed("shop", "web-1", h(both)), meshed("shop", "vote-bot-1", h(bundle(A)))]
    view = cluster(both, pods, stored)

    result = plan(linkerdconfig(bundle(B)), view, DEFAULTS)
    assert result.problem is None and result.anchor_hold and result.changes
    shown = result.as_json()["trustAnchors"]
    assert shown["held"] and shown["hold"]["pods"] == ["shop/vote-bot-1"]
    text = render_plan(result)
    assert "Trust anchors: removal HELD (trust-anchor guard)" in text
    assert "shop/vote-bot-1" in text
    assert "once the trust-anchor guard lets them (HELD now)" in text

    # The pod restarted (on [A, B] now): the same plan proceeds, and says it checked.
    view = cluster(both, [*pods[:1], meshed("shop", "vote-bot-2", h(both))], stored)
    result = plan(linkerdconfig(bundle(B)), view, DEFAULTS)
    assert not result.anchor_hold and result.anchors is not None
    assert "removal checked against every meshed pod" in render_plan(result)
    assert plan(stored, view, DEFAULTS).anchors is None  # the bundle does not change

    stored["spec"] = linkerdconfig(bundle(B))["spec"]  # applied; the controller holds it
    (report,) = status(cluster(both, pods, stored), DEFAULTS)
    assert report.anchors is not None and report.anchors.held
    assert any(f.startswith("trust-anchor removal held:") for f in report.failing)
    assert report.as_json()["trustAnchors"]["hold"]["podCount"] == 1
    assert "Trust anchors: removal HELD" in render_status(report)


def test_plan_and_status_show_a_removal_waiting_for_the_issuers_update() -> None:
    """The rotation's last step as ``plan`` and ``status`` see it (the same guard): every
    pod on [A, B], but one created before identity took up the issuer from B, its Event
    seen now (``ClusterView.issuer_updated``). A day on, nothing waits any more."""
    both = bundle(A, B)
    stored = linkerdconfig(both)
    stored["status"] = {"trustBundles": guard.recorded(None, parsed(bundle(A)), parsed(both))}
    pods = [
        meshed("shop", "web-1", h(both), "2026-12-03T16:30:00Z"),
        meshed("shop", "web-2", h(both), "2026-12-03T17:30:00Z"),
    ]
    seen = replace(cluster(both, pods, stored), issuer_updated=AT)
    result = plan(linkerdconfig(bundle(B)), seen, DEFAULTS, now=AT + HOUR)
    assert result.problem is None and result.anchor_hold
    assert not plan(linkerdconfig(bundle(B)), seen, DEFAULTS, now=AT + 25 * HOUR).anchor_hold
    text = render_plan(result)
    assert "Trust anchors: removal HELD" in text and "shop/web-1" in text
    assert "took up its current issuer" in text and "shop/web-2" not in text

    stored["spec"] = linkerdconfig(bundle(B))["spec"]  # applied; the controller holds it
    (report,) = status(replace(seen, configs=[stored]), DEFAULTS, now=AT + HOUR)
    assert report.anchors is not None and report.anchors.held
    (later,) = status(replace(seen, configs=[stored]), DEFAULTS, now=AT + 25 * HOUR)
    assert later.anchors is None or not later.anchors.held


def test_plan_says_a_swap_is_staged_as_a_rotation() -> None:
    # Issue 58, finding 5: [A] -> [B] was written at once, pods on [A] and [B] side by side
    # with no common anchor for 9.4 s (linkerd2 #4287). Now the guard stages it: held while a
    # meshed pod lacks B, the bundle [A, B] written and rolled out meanwhile.
    pods = [meshed("shop", "web-1", h(bundle(A)))]
    result = plan(linkerdconfig(bundle(B)), cluster(bundle(A), pods, None), DEFAULTS)
    assert result.anchors is not None and result.anchors.swap and result.anchor_hold
    assert "Trust anchors: every anchor replaced: STAGED as a rotation" in render_plan(result)
    nobody = plan(linkerdconfig(bundle(B)), cluster(bundle(A), [], None), DEFAULTS)
    assert nobody.anchors is not None and nobody.anchors.swap and not nobody.anchor_hold


def test_a_swap_holds_on_to_the_bundle_with_both_and_records_it() -> None:
    current = {cm["metadata"]["name"]: dict(cm["data"]) for cm in modern_install()}
    current[TRUST_ROOTS_CONFIGMAP][TRUST_ROOTS_KEY] = bundle(A)
    config = linkerdconfig(bundle(B))
    desired = desired_config(config, current)
    found = guard.evaluate(desired, current, {}, lambda: [meshed("shop", "web-1", h(bundle(A)))])
    assert found.held and found.decision.swap and found.holding is not None
    both = guard.parse_bundle(found.holding, "test")
    assert both.fingerprints == parsed(bundle(A, B)).fingerprints
    assert [a.sha256 for a in both.anchors] == [fingerprint(A), fingerprint(B)]  # old first
    assert guard.bundle_hash(found.holding) in {r["sha256"] for r in found.record}


def test_plan_names_an_unreadable_current_bundle() -> None:
    result = plan(linkerdconfig(bundle(B)), cluster("garbage", [], None), DEFAULTS)
    assert result.problem is not None
    assert result.problem.reason == "InstalledConfigUnreadable"
    assert f"linkerd/{TRUST_ROOTS_CONFIGMAP}, key {TRUST_ROOTS_KEY}" in result.problem.message


# -- the current bundle however it is learned (issue 37, findings 1 and 2) ------------------


def _held_on(status: Json | None = None) -> tuple[str, Json, Json, Json]:
    """[A, B] written over [A] (recorded), a bystander still on [A], web on [A, B]; the
    status once [B] was held."""
    both = bundle(A, B)
    on_a, on_both = meshed("shop", "bystander-1", h(bundle(A))), meshed("shop", "web-1", h(both))
    first = evaluate(linkerdconfig(both), installed(bundle=bundle(A)), status, [on_a])
    status = first.status_changes(status)
    second = evaluate(linkerdconfig(bundle(B)), installed(bundle=both), status, [on_a, on_both])
    assert second.held and second.holding == both
    return both, status | second.status_changes(status), on_a, on_both


def copy_of(current: dict[str, dict[str, str]], text: str) -> dict[str, dict[str, str]]:
    """``current`` with the preserved copy of the trust roots holding ``text`` as written."""
    return {**current, f"{TRUST_ROOTS_CONFIGMAP}-preserved": {TRUST_ROOTS_KEY: text}}


def test_a_deleted_trust_roots_configmap_keeps_the_removal_held() -> None:
    """Deleted: the reconcile reads the copy kept of what was written ([A, B]). Before, the
    copy kept no bundle, the guard saw none, and [B] was written with a pod on [A]."""
    both, status, on_a, on_both = _held_on()
    gone = {k: v for k, v in installed().items() if k != TRUST_ROOTS_CONFIGMAP}
    found = evaluate(linkerdconfig(bundle(B)), copy_of(gone, both), status, [on_a, on_both])
    assert found.held and found.holding == both


def test_with_no_bundle_left_anywhere_the_pods_anchors_still_hold_it() -> None:
    """Neither the ConfigMap nor a copy: the anchors the meshed pods run are the mesh's."""
    _, status, on_a, on_both = _held_on()
    gone = {k: v for k, v in installed().items() if k != TRUST_ROOTS_CONFIGMAP}
    found = evaluate(linkerdconfig(bundle(B)), gone, status, [on_a, on_both])
    assert found.held and found.holding is None  # nothing holds both: nothing is written
    assert found.decision.hold is not None and found.decision.hold.pods == ("shop/bystander-1",)


def test_an_edit_to_the_new_bundle_by_someone_else_keeps_the_removal_held() -> None:
    """Edited to [B] (a helm upgrade): the ConfigMap already says what the spec asks. Before,
    "unchanged" lifted the hold and the rollout restarted pods onto [B]."""
    both, status, on_a, on_both = _held_on()
    edited = copy_of(installed(bundle=bundle(B)), both)
    found = evaluate(linkerdconfig(bundle(B)), edited, status, [on_a, on_both])
    assert found.held and found.holding == both  # the edit is put back to [A, B]


def test_a_held_removal_holds_on_to_the_bundle_with_both_anchors_mid_rotation() -> None:
    """[B] applied while [A, B] is half rolled out: the guard holds [B] and names [A, B] to
    keep rolling out (before, it named nothing: the rollout stopped, and the hold with it)."""
    both, status, on_a, _ = _held_on()
    found = evaluate(linkerdconfig(bundle(B)), installed(bundle=both), status, [on_a])
    assert found.held and found.holding == both
    spec = guard.holding_config(linkerdconfig(bundle(B)), both)["spec"]
    assert spec["global"]["identityContext"]["trustAnchorsPEM"] == both
    done = evaluate(linkerdconfig(bundle(B)), installed(bundle=both), status, [])
    assert not done.held  # the holder came onto [A, B] (or left): the removal proceeds
