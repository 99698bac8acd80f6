"""The Trust rule as a property of the trust-anchor guard's decision, whatever it learns of the
current bundle (the ConfigMap as it is, deleted with or without the copy of what was written,
edited by someone else to anything) and whatever bundles the meshed pods run (issue 37,
finding 1):

* a bundle written while meshed pods run others shares an anchor with every pod on a known
  bundle (a swap included: it is staged as a rotation, issue 58), and when it drops an
  anchor, every anchor it keeps is one each pod trusts;
* the bundle a held removal writes instead holds every anchor a meshed pod trusts.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.kube.resource import Keyed
from linkerd_config.linkerd.configmap.desired import desired_config
from linkerd_config.linkerd.formats.helm_values import TRUST_ROOTS_CONFIGMAP, TRUST_ROOTS_KEY
from linkerd_config.linkerd.mesh import TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.spec.crd import TRUST_BUNDLES_FIELD, TRUST_HOLD_FIELD
from linkerd_config.linkerd.trust import guard
from tests.support.anchors import bundle, trust_anchor
from tests.support.samples import modern_install

Json = dict[str, Any]
ANCHORS = tuple(trust_anchor(f"{n}.root.linkerd.cluster.local") for n in "abc")
SUBSETS = st.lists(st.sampled_from(range(3)), min_size=1, max_size=3, unique=True)


def text(indices: list[int]) -> str:
    return bundle(*(ANCHORS[i] for i in indices))


def anchors_of(value: str) -> frozenset[str]:
    return guard.parse_bundle(value, "test").fingerprints


def pod(name: str, value: str) -> Keyed:
    annotations = {TRUST_ROOT_ANNOTATION: guard.bundle_hash(value)}
    return f"ns/{name}", {"metadata": {"name": name, "namespace": "ns", "annotations": annotations}}


@settings(
    max_examples=int(os.environ.get("ROLLOUT_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    derandomize="ROLLOUT_PROPERTY_EXAMPLES" not in os.environ,
)
@given(
    live=st.none() | SUBSETS,
    written=st.none() | SUBSETS,
    wanted=SUBSETS,
    pods=st.lists(SUBSETS, max_size=4),
    hold_in_status=st.booleans(),
)
def test_no_write_leaves_a_pod_without_an_anchor_it_shares(
    live: list[int] | None,
    written: list[int] | None,
    wanted: list[int],
    pods: list[list[int]],
    hold_in_status: bool,
) -> None:
    current = {cm["metadata"]["name"]: dict(cm["data"]) for cm in modern_install()}
    if live is None:
        del current[TRUST_ROOTS_CONFIGMAP]
    else:
        current[TRUST_ROOTS_CONFIGMAP][TRUST_ROOTS_KEY] = text(live)
    if written is not None:
        current[f"{TRUST_ROOTS_CONFIGMAP}-preserved"] = {TRUST_ROOTS_KEY: text(written)}
    running = [text(p) for p in pods]
    known = [guard.parse_bundle(t, "test") for t in {*running, text(wanted)}]
    status: Json = {TRUST_BUNDLES_FIELD: guard.recorded(None, *known)}
    if hold_in_status:
        status[TRUST_HOLD_FIELD] = {"pods": ["ns/p"]}
    config = {
        "metadata": {"name": "linkerd", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "global": {"identityContext": {"trustAnchorsPEM": text(wanted)}},
            "proxy": {"proxyVersion": "edge-26.8.3"},
        },
    }
    desired = desired_config(config, current)
    meshed = [pod(f"p{i}", t) for i, t in enumerate(running)]
    found = guard.evaluate(desired, current, status, lambda: meshed)
    d = anchors_of(text(wanted))
    in_use = frozenset().union(*(anchors_of(t) for t in running))
    if found.held:
        if found.holding is not None:
            assert in_use <= anchors_of(found.holding), "the held-on bundle drops an anchor"
        return
    seen = live if live is not None else written
    if seen == wanted and written in (None, seen) and not hold_in_status:
        return  # the injector hands out this very bundle already: this write changes nothing
    base = anchors_of(text(live)) if live is not None else frozenset()
    trusted = base | in_use
    drops = not trusted <= d
    for t in running:
        p = anchors_of(t)
        assert p & d, f"written {wanted}: a pod on {t!r} shares no anchor with it"
        if drops:
            assert d & trusted <= p, f"written {wanted}: a pod on {t!r} lacks a kept anchor"
