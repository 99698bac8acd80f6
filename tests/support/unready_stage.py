"""Pods that run but never become Ready, through kwok's Stage API on the local control plane.

The local kwok plays the Stage objects in the API server (``devcluster/kwok_stages.py``):
kwok's default ``pod-ready`` makes every new pod Running and Ready at once. The Stage made
here matches the same new pods (no ``status.podIP`` yet, not being deleted) when they also
carry the given annotations, with a higher weight: kwok picks among the matching Stages at
random by weight, and a Stage of weight 0 is never picked while one of positive weight
matches (kwok v0.7.0 ``pkg/utils/lifecycle/lifecycle.go``, ``Lifecycle.Match``). Its pods are
Pending for one probe period, then Running with ``Ready=False``, as a kubelet reports a pod
whose readiness probe fails (no reason or message: kwok's ``pod-ready`` would leave them on
the pod once it is Ready).

Like such a probe it is played again every second (each play stamps ``lastProbeTime``, which
brings the pod back to kwok). It sets no ``podIP``, so once the Stage is deleted the next play
finds kwok's ``pod-ready`` matching instead: the pods become Ready by themselves, as they
would once the cause of the failing probe is gone.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from devcluster.kwok_stages import STAGES
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import PODS
from tests.support.waiting import eventually

Json = dict[str, Any]

WEIGHT = 1
"""Above kwok's default ``pod-ready`` (weight 0)."""
PROBE_PERIOD_MS = 1000

_NOT_READY = """\
{{ $now := Now }}
{{ $since := or .status.startTime $now }}
conditions:
- lastTransitionTime: {{ $since | Quote }}
  status: "True"
  type: Initialized
- lastProbeTime: {{ $now | Quote }}
  lastTransitionTime: {{ $since | Quote }}
  status: "False"
  type: Ready
- lastProbeTime: {{ $now | Quote }}
  lastTransitionTime: {{ $since | Quote }}
  status: "False"
  type: ContainersReady

containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $since | Quote }}
{{ end }}

initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  restartCount: 0
  {{ if eq .restartPolicy "Always" }}
  ready: false
  started: true
  state:
    running:
      startedAt: {{ $since | Quote }}
  {{ else }}
  ready: true
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $since | Quote }}
      reason: Completed
      startedAt: {{ $since | Quote }}
  {{ end }}
{{ end }}

hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
phase: Running
startTime: {{ $since | Quote }}
"""


def never_ready_stage(name: str, annotations: Mapping[str, str]) -> Json:
    """A kwok Stage keeping new pods with all of ``annotations`` Running but not Ready."""
    return {
        "apiVersion": STAGES.api_version,
        "kind": STAGES.kind,
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchAnnotations": dict(annotations),
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.podIP", "operator": "DoesNotExist"},
                ],
            },
            "weight": WEIGHT,
            "delay": {"durationMilliseconds": PROBE_PERIOD_MS},
            "next": {"statusTemplate": _NOT_READY},
        },
    }


def is_ready(pod: Json) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def kept_unready(pod: Json) -> bool:
    """Running and not Ready: what the Stage makes of a pod."""
    return (pod.get("status") or {}).get("phase") == "Running" and not is_ready(pod)


async def _probe_pod(kube: KubeClient, namespace: str, annotations: Mapping[str, str]) -> str:
    """A bare pod with ``annotations`` (Linkerd's injector told to leave it alone, so they
    stay as given); returns its name."""
    name = f"kwok-stage-probe-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {**annotations, "linkerd.io/inject": "disabled"},
        },
        "spec": {
            "containers": [{"name": "app", "image": "app"}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    await kube.request("POST", PODS.path(namespace), body=pod, fenced=False)
    return name


async def _first_state(kube: KubeClient, namespace: str, annotations: Mapping[str, str]) -> Json:
    """A new pod with ``annotations`` as kwok leaves it once it runs (the pod deleted after)."""
    name = await _probe_pod(kube, namespace, annotations)
    try:

        async def running() -> Json | None:
            pod: Json = await kube.request("GET", PODS.path(namespace, name))
            return pod if (pod.get("status") or {}).get("phase") == "Running" else None

        return await eventually(running, timeout=60, what=f"probe pod {name} running")
    finally:
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", PODS.path(namespace, name), fenced=False)


async def delete_stage(kube: KubeClient, name: str) -> None:
    with contextlib.suppress(ApiError):
        await kube.request("DELETE", STAGES.path(name=name), fenced=False)


@contextlib.asynccontextmanager
async def pods_never_ready(
    kube: KubeClient, name: str, annotations: Mapping[str, str], namespace: str
) -> AsyncIterator[Json]:
    """The Stage ``never_ready_stage(name, annotations)`` while the block runs (deleted after,
    or earlier with ``delete_stage``). It is in force on entry: a pod created in
    ``namespace`` with ``annotations`` was seen Running and not Ready."""
    stage: Json = await kube.request(
        "POST", STAGES.path(), body=never_ready_stage(name, annotations), fenced=False
    )
    try:

        async def in_force() -> bool:
            return kept_unready(await _first_state(kube, namespace, annotations))

        await eventually(in_force, timeout=60, what=f"kwok playing Stage {name}")
        yield stage
    finally:
        await delete_stage(kube, name)
