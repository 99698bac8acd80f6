"""Which LinkerdConfigs a cache's change wakes, and in what order (issue 61, finding 8): with
a thousand other LinkerdConfigs present, the drift of a managed ConfigMap is the first thing
its owner's queue hands out; a rival is woken by its object and by its target's owner
changing, never by a pod's or a ConfigMap's change (its reconcile is its Conflict)."""

from __future__ import annotations

import copy
from typing import Any

from linkerd_config.kube.resource import Json
from linkerd_config.kube.watch import WatchEvent
from linkerd_config.kube.workqueue import QueueEmpty
from tests.support.controller_fakes import controller
from tests.support.linkerdconfigs import small
from tests.support.samples import modern_install

HOSTILE = "x" * 200


def lc(i: int, target: str = "linkerd-config") -> Json:
    """The ``i``th LinkerdConfig, created a second after the one before, a 200-character
    name, hostile labels and annotations, managing ``target`` in ``linkerd``."""
    obj = small()
    obj["metadata"] = {
        "name": f"{i:04d}-{HOSTILE}"[:200],
        "creationTimestamp": f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
        "generation": 1,
        "resourceVersion": str(i + 1),
        "labels": {"a" * 63: "b" * 63},
        "annotations": {f"evil.example/{j}": "\u202e" * 100 for j in range(10)},
    }
    obj["spec"]["global"] = {"linkerdNamespace": "linkerd", "configMap": target}
    return obj


def handed_out(queue: Any) -> list[str]:
    """What the queue hands out, in order, each finished at once."""
    out = []
    while True:
        try:
            key = queue.get_nowait()
        except QueueEmpty:
            return out
        queue.done(key)
        out.append(key)


def world(*configs: Json) -> Any:
    """The controller's caches holding ``configs`` (each delivered as the informer delivers
    a listed object) and edge-26.8.3's ConfigMaps; its queue emptied."""
    config_cm, roots = modern_install()
    ctl, _writer, _recorder = controller(configmap=config_cm)
    ctl.configmaps.store.put(roots)
    for config in configs:
        ctl.configs._apply(WatchEvent("ADDED", config))
    handed_out(ctl.controller.queue)
    return ctl


def drifted(ctl: Any) -> None:
    """A watch event of ``linkerd-config`` changed by someone else."""
    cm = copy.deepcopy(ctl.configmaps.store.get("linkerd/linkerd-config"))
    cm["metadata"]["resourceVersion"] = "drift"
    cm["data"] = {**cm.get("data", {}), "values": "tampered: true\n"}
    ctl.configmaps._apply(WatchEvent("MODIFIED", cm))


def pod_changed(ctl: Any) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "app", "resourceVersion": "p1",
                     "labels": {"config.linkerd.io/reconcile": "auto"}},
    }  # fmt: skip
    ctl.pods._apply(WatchEvent("ADDED", pod))


def test_a_drift_wakes_its_owner_alone_not_a_thousand_rivals() -> None:
    configs = [lc(i) for i in range(1000)]
    ctl = world(*configs)
    owner = configs[0]["metadata"]["name"]
    drifted(ctl)
    pod_changed(ctl)
    assert handed_out(ctl.controller.queue) == [owner]


def test_a_drift_goes_ahead_of_a_thousand_owners_woken_by_a_pod() -> None:
    """A thousand LinkerdConfigs each managing a ConfigMap of its own in ``linkerd``: a
    pod's change wakes every one of them; the drift of ``linkerd-config``, which comes after,
    is handed out first, the others (woken again by it: their namespace's) after it."""
    ours = lc(1000)  # its name sorts last
    others = [lc(i, target=f"other-{i}") for i in range(1000)]
    ctl = world(ours, *others)
    pod_changed(ctl)
    drifted(ctl)
    out = handed_out(ctl.controller.queue)
    assert out[0] == ours["metadata"]["name"]
    assert sorted(out[1:]) == sorted(o["metadata"]["name"] for o in others)


def test_the_rival_next_in_line_is_woken_when_the_owner_goes() -> None:
    owner, next_in_line, third = lc(0), lc(1), lc(2)
    ctl = world(owner, next_in_line, third)
    ctl.configs._apply(WatchEvent("DELETED", owner))
    assert handed_out(ctl.controller.queue) == [
        owner["metadata"]["name"],  # its own deletion first
        next_in_line["metadata"]["name"],  # the target's owner now: its Conflict is over
    ]


def test_a_rival_moved_to_another_target_wakes_the_old_targets_owner_and_itself_first() -> None:
    owner, rival = lc(0), lc(1)
    ctl = world(owner, rival)
    moved = copy.deepcopy(rival)
    moved["metadata"]["resourceVersion"] = "moved"
    moved["spec"]["global"]["configMap"] = "elsewhere"
    ctl.configs._apply(WatchEvent("MODIFIED", moved))
    # Its own change first; the owners of both targets (itself, now, of "elsewhere") after.
    assert handed_out(ctl.controller.queue) == [
        rival["metadata"]["name"],
        owner["metadata"]["name"],
    ]


def test_a_resync_of_a_thousand_objects_does_not_go_ahead_of_a_drift() -> None:
    configs = [*(lc(i, target=f"other-{i}") for i in range(1000)), lc(1000)]
    ctl = world(*configs)
    for config in configs:  # a resync: each object delivered again, unchanged
        key = config["metadata"]["name"]
        ctl.configs._notify_update(key, ctl.configs.store.get(key), ctl.configs.store.get(key))
    drifted(ctl)
    assert handed_out(ctl.controller.queue)[0] == configs[-1]["metadata"]["name"]
