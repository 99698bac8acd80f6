"""Which API resource, and the URL paths that address it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

Json = dict[str, Any]
"""A decoded JSON object, as the API server sends and takes it: never a generated model."""

Keyed = tuple[str, Json]
"""An object's key (``namespace/name``, taken from it as served) and what is cached under it."""

Prepare = Callable[[Json, str, str], Any]
"""What is kept of a listed item, given the item and its list's kind and apiVersion (the
server leaves both off a list's items), in the item's place: an informer's typing and
transform, with the item's key. The client reads none of it."""


def rfc3339(when: datetime | float | None = None, *, micro: bool = False) -> str:
    """A Kubernetes timestamp in UTC: whole seconds (metav1.Time) or, with ``micro``,
    microseconds (metav1.MicroTime). ``when`` is a datetime, a Unix time, or now."""
    if when is None:
        moment = datetime.now(UTC)
    elif isinstance(when, datetime):
        moment = when.astimezone(UTC)
    else:
        moment = datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def unix_time(stamp: object) -> float | None:
    """A Kubernetes timestamp (``rfc3339``'s, whole seconds or microseconds) as a Unix time;
    None when it is none: not a string, or not RFC 3339. Lenient, as for what anyone who may
    write an object's status or annotations may have put there."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def go_duration(nanos: int) -> str:
    """A duration as Go prints it (``time.Duration.String``: 1h0m0s, 1.5s, 250ms), as
    metav1.Duration is written."""
    if nanos == 0:
        return "0s"
    sign, n = ("-", -nanos) if nanos < 0 else ("", nanos)
    if n < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if n >= size:
                text = f"{n / size:.9f}".rstrip("0").rstrip(".")
                return f"{sign}{text}{unit}"
    hours, rest = divmod(n, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = f"{rest / 1e9:.9f}".rstrip("0").rstrip(".")
    out = f"{hours}h{minutes}m" if hours else (f"{minutes}m" if minutes else "")
    return f"{sign}{out}{seconds}s"


def go_seconds(seconds: float) -> str:
    """A duration in whole seconds (truncated), as Go prints it: 10m0s, 1h0m0s, 30s."""
    return go_duration(int(seconds) * 1_000_000_000)


@dataclass(frozen=True)
class ApiResource:
    """A resource type as the REST API sees it (group/version/plural), no client models."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS = ApiResource("", "v1", "pods", "Pod")
NAMESPACES = ApiResource("", "v1", "namespaces", "Namespace", namespaced=False)
CONFIGMAPS = ApiResource("", "v1", "configmaps", "ConfigMap")
EVENTS = ApiResource("", "v1", "events", "Event")
SERVICE_ACCOUNTS = ApiResource("", "v1", "serviceaccounts", "ServiceAccount")
DEPLOYMENTS = ApiResource("apps", "v1", "deployments", "Deployment")
REPLICASETS = ApiResource("apps", "v1", "replicasets", "ReplicaSet")
STATEFULSETS = ApiResource("apps", "v1", "statefulsets", "StatefulSet")
DAEMONSETS = ApiResource("apps", "v1", "daemonsets", "DaemonSet")
WORKLOAD_RESOURCES: dict[str, ApiResource] = {
    r.kind: r for r in (DEPLOYMENTS, STATEFULSETS, DAEMONSETS)
}
"""The owners that roll their pods when their pod template changes, by kind."""
LEASES = ApiResource("coordination.k8s.io", "v1", "leases", "Lease")
TOKEN_REVIEWS = ApiResource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
SUBJECT_ACCESS_REVIEWS = ApiResource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
CRDS = ApiResource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
MUTATING_WEBHOOK_CONFIGURATIONS = ApiResource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
VALIDATING_WEBHOOK_CONFIGURATIONS = ApiResource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)


def object_key(obj: dict[str, Any]) -> str:
    """``namespace/name`` or ``name``: the key caches and work queues use, as client-go does."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = str(meta.get("name", ""))
    return f"{ns}/{name}" if ns else name


def resource_version(obj: dict[str, Any] | None) -> str | None:
    """An object's ``metadata.resourceVersion`` (None: no object, or none in it): what a
    write based on a read passes as its precondition."""
    version = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    return version if isinstance(version, str) else None


def split_key(key: str) -> tuple[str | None, str]:
    ns, sep, name = key.partition("/")
    return (ns, name) if sep else (None, ns)


def stored_json(value: Any) -> Any:
    """A custom resource's JSON as the API server stores it and sends it to webhooks: null
    members of objects dropped (its schema declares nothing nullable, so they are pruned)
    and whole-number floats written as integers (``80.0`` is ``80`` once Go re-encodes it).
    For what was read from a file rather than from the API server (``plan -f``)."""
    if isinstance(value, dict):
        return {key: stored_json(child) for key, child in value.items() if child is not None}
    if isinstance(value, list):
        return [stored_json(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value
