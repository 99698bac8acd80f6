"""A Deployment's revisions, as the Deployment controller keeps them: each of its ReplicaSets
(controller reference to the Deployment's uid) numbered by ``deployment.kubernetes.io/revision``,
the newest being the one its current pod template made (``kubectl rollout history`` and
``undo`` read them so). Pure functions over listed objects; nothing here knows who restarted
what or why."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from linkerd_config.kube.json_merge_patch import merge_patch
from linkerd_config.kube.resource import Json

REVISION_ANNOTATION: Final = "deployment.kubernetes.io/revision"
TEMPLATE_HASH_LABEL: Final = "pod-template-hash"
"""The Deployment controller's label on a ReplicaSet's pod template (not the Deployment's)."""


def controller_ref(obj: Json) -> Json | None:
    """``obj``'s controller: its ownerReference with ``controller: true`` (a copy), if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return dict(ref)
    return None


def controller_uid(obj: Json) -> str | None:
    """The uid of ``obj``'s controller."""
    ref = controller_ref(obj)
    return None if ref is None else str(ref.get("uid"))


def revision(replicaset: Json) -> int:
    """A ReplicaSet's revision number (-1 when it carries none readable)."""
    annotations = (replicaset.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(REVISION_ANNOTATION, "")
    return int(value) if isinstance(value, str) and value.isdigit() else -1


def owned(deployment: Json, replicasets: Iterable[Json]) -> list[Json]:
    """The ReplicaSets ``deployment`` controls (by its uid), among those listed."""
    uid = str((deployment.get("metadata") or {}).get("uid"))
    return [rs for rs in replicasets if controller_uid(rs) == uid]


def newest(deployment: Json, replicasets: Iterable[Json]) -> Json | None:
    """The ReplicaSet of ``deployment``'s newest revision, None when none is listed."""
    found = owned(deployment, replicasets)
    return max(found, key=revision) if found else None


def revision_of(
    deployment: Json, replicasets: Iterable[Json], keep: Callable[[Json], bool]
) -> Json | None:
    """The ReplicaSet of the newest of ``deployment``'s revisions whose pod template ``keep``
    accepts (the one ``kubectl rollout undo`` would go back to); None when it kept none such."""
    candidates = [
        rs
        for rs in owned(deployment, replicasets)
        if keep((rs.get("spec") or {}).get("template") or {})
    ]
    return max(candidates, key=revision) if candidates else None


def revision_template(
    deployment: Json, replicasets: Iterable[Json], keep: Callable[[Json], bool]
) -> Json | None:
    """The pod template of ``revision_of``'s ReplicaSet, a copy without the ReplicaSet's own
    ``pod-template-hash`` label; None when the Deployment kept none such."""
    found = revision_of(deployment, replicasets, keep)
    if found is None:
        return None
    template = copy.deepcopy((found.get("spec") or {}).get("template") or {})
    labels = (template.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(TEMPLATE_HASH_LABEL, None)
    return template


def short_of(deployment: Json, replicaset: Json) -> int:
    """How many pods ``replicaset`` would have to make were ``deployment`` brought back to
    its template: the Deployment's replicas (1 when unset, as the API server defaults it)
    beyond the fewer of what the ReplicaSet is told to keep and what it has. Only what its
    status says it has: a pod being deleted may still be counted."""
    wanted = (deployment.get("spec") or {}).get("replicas")
    told = (replicaset.get("spec") or {}).get("replicas")
    has = (replicaset.get("status") or {}).get("replicas")
    keeps = min(v if isinstance(v, int) else 0 for v in (told, has))
    return max(0, (wanted if isinstance(wanted, int) else 1) - keeps)


def replica_failure(obj: Json) -> str | None:
    """The message of a ``ReplicaFailure=True`` condition in ``obj``'s status (a ReplicaSet's
    own, or the Deployment's copy of one), None when there is none."""
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "ReplicaFailure"
            and condition.get("status") == "True"
        ):
            return str(condition.get("message") or "no reason")
    return None


def undo_patch(deployment: Json, template: Json) -> Json:
    """A merge patch bringing ``deployment``'s pod template back to ``template`` (a previous
    revision's, as ``kubectl rollout undo`` does), on the condition that the Deployment has not
    changed since it was read."""
    current = (deployment.get("spec") or {}).get("template") or {}
    return {
        "metadata": {"resourceVersion": deployment["metadata"]["resourceVersion"]},
        "spec": {"template": merge_patch(current, template)},
    }
