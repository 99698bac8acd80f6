"""The original project's README scenario, set up on a real control plane.

Linkerd edge-19.12.1 installed (its real linkerd-config ConfigMap) with Linkerd's real proxy
injector, a kube-system-like namespace labelled admission-webhooks=disabled, and
emojivoto-like Deployments in a namespace annotated ``linkerd.io/inject: enabled``, some opted
in to automatic restarts. Shared by the integration tests and ``make demo``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_install import LinkerdInstall
from devcluster.proxy_injector import ProxyInjector
from linkerd_config.app import App, build, running
from linkerd_config.kube import rollout_status
from linkerd_config.kube.client import APPLY_PATCH, ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, CRDS, DEPLOYMENTS, NAMESPACES, PODS
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS as STORED
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from linkerd_config.linkerd.spec.crd import crd
from linkerd_config.settings import Settings, parse
from tests.support.conversion_server import conversion_server
from tests.support.samples import install_configmap
from tests.support.waiting import eventually

Json = dict[str, Any]
EMOJIVOTO = "emojivoto"
DISABLED_NS = "kube-system-like"
OPTED_IN = ("web", "emoji", "voting")
NOT_OPTED_IN = "vote-bot"
OLD_PROXY_IMAGE = "gcr.io/linkerd-io/proxy:edge-19.12.1"
"""What Linkerd's injector injects from edge-19.12.1's linkerd-config."""
NEW_PROXY_IMAGE = "gcr.io/linkerd-io/proxy:edge-19.12.3"
"""... and from the one the edge-19.12.3 LinkerdConfig writes."""


def readme_check(pod: Json) -> str:
    """The original README's check, ``{.spec.containers[1].image}``: the injected proxy."""
    containers = pod["spec"]["containers"]
    return str(containers[1]["image"]) if len(containers) > 1 else "<not injected>"


async def create(kube: KubeClient, path: str, body: dict[str, Any]) -> None:
    try:
        await kube.request("POST", path, body=body, fenced=False)
    except ApiError as exc:
        if not exc.conflict:
            raise


async def install_crd(kube: KubeClient) -> None:
    """The CRD, converting through this process's conversion webhook (both versions are
    served; tests write v1alpha1 and the controller reads v1alpha2)."""
    await create(kube, CRDS.path(), crd(conversion_server().conversion()))

    async def serving() -> bool:
        await kube.request("GET", LINKERD_CONFIGS.path())
        return True

    await eventually(serving, timeout=60, what="LinkerdConfig API served")


async def install_crd_as_manifests_have_it(kube: KubeClient, *, local: bool = False) -> None:
    """The CRD as manifests/crd has it (its conversion webhook the in-cluster Service, which
    nothing serves here), or with ``local`` as manifests/crd-local has it (``make install``
    and the no-webhooks overlay: a local controller's URL, v1alpha1 refused until one
    registers)."""
    await kube.request("POST", CRDS.path(), body=crd(local=local), fenced=False)

    async def served() -> bool:
        await kube.request("GET", STORED.path())  # v1alpha2: listing it needs no converter
        return True

    await eventually(served, timeout=60, what="the CRD served")


async def condition(kube: KubeClient, name: str, type_: str) -> Json:
    """A LinkerdConfig's condition of ``type_`` ({} if absent), with the object's current
    ``generation`` beside it, so a caller can tell whether it is about the current spec."""
    obj = await kube.request("GET", LINKERD_CONFIGS.path(name=name))
    conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    return {**conditions.get(type_, {}), "generation": obj["metadata"]["generation"]}


async def ready(kube: KubeClient, name: str) -> Json | None:
    """The LinkerdConfig's Ready condition once it is True about the current spec, else None."""
    cond = await condition(kube, name, "Ready")
    current = cond.get("status") == "True" and cond.get("observedGeneration") == cond["generation"]
    return cond if current else None


async def install_linkerd_edge_19_12_1(kube: KubeClient) -> dict[str, Any]:
    await create(kube, NAMESPACES.path(), {"metadata": {"name": "linkerd"}})
    cm = install_configmap()
    await create(kube, CONFIGMAPS.path("linkerd"), cm)
    return cm


async def install_linkerd(kube: KubeClient, install: LinkerdInstall) -> None:
    """What a modern Linkerd's injector reads, as its own ``linkerd install`` rendered it:
    namespace linkerd, linkerd-config (Helm values) and the trust roots."""
    await create(kube, NAMESPACES.path(), install.namespace)
    for configmap in install.configmaps:
        await create(kube, CONFIGMAPS.path("linkerd"), configmap)


def deployment(name: str, opted_in: bool, replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    pod_labels = dict(labels)
    if opted_in:
        pod_labels[mesh.RECONCILE_LABEL] = mesh.RECONCILE_AUTO
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "containers": [{"name": name, "image": f"buoyantio/emojivoto-{name}:v8"}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


@contextlib.asynccontextmanager
async def linkerd_injector(
    cp: LocalControlPlane, tag: str = "edge-19.12.3", **options: Any
) -> AsyncIterator[ProxyInjector]:
    """Linkerd's real proxy injector of release ``tag`` while the block runs.

    Its configuration (linkerd-config, and for modern releases the trust roots) must already
    be installed: the injector reads it from files the kubelet-like projection fills.
    """
    injector = ProxyInjector(cp, tag, **options)
    await asyncio.to_thread(injector.start)
    try:
        yield injector
    finally:
        await asyncio.to_thread(injector.stop)


@contextlib.asynccontextmanager
async def readme_starting_point(
    cp: LocalControlPlane, kube: KubeClient, **injector_options: Any
) -> AsyncIterator[ProxyInjector]:
    """The CRD, Linkerd edge-19.12.1's linkerd-config, Linkerd's real edge-19.12.3 injector
    (while the block runs) and the README's workloads, injected by it."""
    await install_crd(kube)
    await install_linkerd_edge_19_12_1(kube)
    async with linkerd_injector(cp, **injector_options) as injector:
        await install_workloads(kube)
        yield injector


async def dry_run_pod(
    kube: KubeClient, namespace: str, annotations: dict[str, str], *, dry_run: bool = True
) -> Json:
    """What admission (the injector included) makes of a minimal pod, without creating it
    (``dry_run=False``: created, and deleted again at once when admitted)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "admission-probe", "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "app"}]},
    }
    params = {"dryRun": "All"} if dry_run else {}
    if not dry_run:
        pod["metadata"] = {"generateName": "admission-probe-", "annotations": annotations}
    created: Json = await kube.request(
        "POST", PODS.path(namespace), params=params, body=pod, fenced=False
    )
    if not dry_run:
        name = created["metadata"]["name"]
        await kube.request(
            "DELETE", PODS.path(namespace, name), params={"gracePeriodSeconds": "0"}, fenced=False
        )
    return created


def proxy_container(pod: Json) -> Json | None:
    """Linkerd's proxy, wherever the injector put it (a native sidecar is an init container)."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if container.get("name") == mesh.PROXY_CONTAINER:
            found: Json = container
            return found
    return None


async def wait_admits_pods(kube: KubeClient, namespace: str, injected: bool) -> None:
    """Until pods in a new namespace are admitted (its ServiceAccount exists) and, when
    ``injected``, the injector has seen the namespace (else it would skip injection)."""

    async def ready() -> bool:
        try:
            pod = await dry_run_pod(kube, namespace, {})
        except ApiError as exc:
            if exc.status == 403:  # "serviceaccount default not found" until KCM made it
                return False
            raise
        return (proxy_container(pod) is not None) == injected

    await eventually(ready, timeout=60, what=f"pods admitted in namespace {namespace}")


async def meshed_namespace(
    kube: KubeClient,
    namespace: str,
    opted_in: Sequence[str],
    not_opted_in: Sequence[str] = (),
    replicas: int = 2,
) -> list[dict[str, Any]]:
    """A namespace annotated for injection, once the injector admits pods there, with a
    Deployment of ``replicas`` pods for each name; returns the pods once they all run."""
    meshed = {"metadata": {"name": namespace, "annotations": {"linkerd.io/inject": "enabled"}}}
    await create(kube, NAMESPACES.path(), meshed)
    await wait_admits_pods(kube, namespace, injected=True)
    for name, opted in [*((n, True) for n in opted_in), *((n, False) for n in not_opted_in)]:
        await create(kube, DEPLOYMENTS.path(namespace), deployment(name, opted, replicas))
    expected = replicas * (len(opted_in) + len(not_opted_in))
    return await wait_settled(kube, namespace, expected=expected)


async def install_workloads(kube: KubeClient) -> None:
    await create(
        kube,
        NAMESPACES.path(),
        {"metadata": {"name": EMOJIVOTO, "annotations": {"linkerd.io/inject": "enabled"}}},
    )
    await create(
        kube,
        NAMESPACES.path(),
        {
            "metadata": {
                "name": DISABLED_NS,
                "labels": {mesh.WEBHOOKS_LABEL: "disabled"},
                "annotations": {"linkerd.io/inject": "enabled"},
            }
        },
    )
    await wait_admits_pods(kube, EMOJIVOTO, injected=True)
    await wait_admits_pods(kube, DISABLED_NS, injected=False)
    for name in OPTED_IN:
        await create(kube, DEPLOYMENTS.path(EMOJIVOTO), deployment(name, opted_in=True))
    await create(kube, DEPLOYMENTS.path(EMOJIVOTO), deployment(NOT_OPTED_IN, opted_in=False))
    await create(kube, DEPLOYMENTS.path(DISABLED_NS), deployment("coredns-like", opted_in=True))


def up_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Those of ``pods`` that run and are not being deleted."""
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


async def running_pods(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    return up_pods((await kube.request("GET", PODS.path(namespace)))["items"])


def proxy_versions(pods: list[dict[str, Any]]) -> dict[str, str | None]:
    return {p["metadata"]["name"]: mesh.proxy_version(p) for p in pods}


async def wait_settled(
    kube: KubeClient, namespace: str, expected: int, timeout: float = 120
) -> list[dict[str, Any]]:
    """Until exactly ``expected`` pods run (old ones of a rollout are gone); past the timeout,
    the failure says which pods there were and in what phase."""

    async def settled() -> list[dict[str, Any]]:
        all_pods = (await kube.request("GET", PODS.path(namespace)))["items"]
        up = up_pods(all_pods)
        if len(up) == expected == len(all_pods):
            return up
        seen = {
            p["metadata"]["name"]: (
                p["status"].get("phase"),
                "deleting" if p["metadata"].get("deletionTimestamp") else "",
                p["spec"].get("nodeName"),
            )
            for p in all_pods
        }
        raise AssertionError(f"{len(up)} of {len(all_pods)} pods running: {seen}")

    return await eventually(
        settled, timeout=timeout, what=f"{expected} pods settled in {namespace}"
    )


async def wait_steady(kube: KubeClient, namespace: str, timeout: float = 120) -> None:
    """Until every Deployment in ``namespace`` is steady as the rollout reads it
    (``rollout_status.unsteady``: its controller caught up, every replica available): the
    controller restarts only steady workloads, so a test that counts a pass's restarts
    starts from there (under load the Deployment controller lags its pods)."""

    async def steady() -> bool:
        listed = (await kube.request("GET", DEPLOYMENTS.path(namespace)))["items"]
        unsteady = {
            d["metadata"]["name"]: str(why)
            for d in listed
            if (why := rollout_status.unsteady("Deployment", d)) is not None
        }
        if unsteady:
            raise AssertionError(f"not steady: {unsteady}")
        return True

    await eventually(steady, timeout=timeout, what=f"every Deployment in {namespace} steady")


def local_settings(kubeconfig: Path, *extra: str) -> Settings:
    """``linkerd-config run`` settings for an in-process controller on loopback.

    Metrics and probes on free ports, webhooks and the local conversion off unless ``extra``
    says otherwise (a later flag wins), and no environment read, so a developer's shell
    cannot change a test.
    """
    return parse(
        [
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--enable-webhooks",
            "false",
            # The tests' CRDs convert through this process's server (conversion_server):
            # an in-process controller registers none of its own unless a test says so.
            "--serve-conversion",
            "false",
            *extra,
        ],
        env={},
    )


VAPS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAP_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


def refusal(version: str) -> str:
    """The message of ``proxy_refused``'s policy for ``version``."""
    return f"pods with proxy {version} are refused here"


@contextlib.asynccontextmanager
async def proxy_refused(
    kube: KubeClient, namespace: str, version: str, *, dry_runs: bool = True
) -> AsyncIterator[None]:
    """A ValidatingAdmissionPolicy that refuses, in ``namespace``, every pod that Linkerd's
    injector gave proxy ``version`` (it runs after the injector's mutation). ``dry_runs``
    False: only real creates are refused (the controller's dry-run question is admitted, as
    a quota at its limit, a webhook timing out under load or a policy reading state admits
    one pod and refuses the next), so the pods a restart makes are refused."""
    async with annotated_pods_refused(
        kube,
        namespace,
        mesh.PROXY_VERSION_ANNOTATION,
        version,
        refusal(version),
        f"refuse-{version.replace('.', '-')}-in-{namespace}",
        dry_runs=dry_runs,
    ):
        yield


@contextlib.asynccontextmanager
async def annotated_pods_refused(
    kube: KubeClient,
    namespace: str,
    annotation: str,
    value: str,
    message: str,
    name: str,
    *,
    dry_runs: bool = True,
) -> AsyncIterator[None]:
    """A ValidatingAdmissionPolicy ``name`` that refuses, in ``namespace``, every pod whose
    ``annotation`` is ``value`` (after the mutating webhooks), with ``message``; in force
    (such a pod refused) when the block starts, removed when it ends. ``dry_runs`` False:
    dry runs are admitted, real creates refused."""
    admits_dry_runs = "" if dry_runs else "request.dryRun == true || "
    policy = {
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {mesh.NAMESPACE_NAME_LABEL: namespace}},
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            },
            "validations": [
                {
                    "expression": f"{admits_dry_runs}!has(object.metadata.annotations) || "
                    f"!('{annotation}' in "
                    f"object.metadata.annotations) || object.metadata.annotations['{annotation}']"
                    f" != '{value}'",
                    "message": message,
                }
            ],
        },
    }
    binding = {
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    await kube.request("POST", VAPS, body=policy)
    await kube.request("POST", VAP_BINDINGS, body=binding)
    try:

        async def enforced() -> bool:
            annotations = {"linkerd.io/inject": "disabled", annotation: value}
            try:
                await dry_run_pod(kube, namespace, annotations, dry_run=dry_runs)
            except ApiError as exc:
                return message in exc.message
            return False

        await eventually(enforced, timeout=30, what=f"the policy {name} enforced")
        yield
    finally:
        await kube.request("DELETE", f"{VAP_BINDINGS}/{name}")
        await kube.request("DELETE", f"{VAPS}/{name}")


async def apply_linkerdconfig(kube: KubeClient, name: str, spec: Json) -> Json:
    """``kubectl apply --server-side --force-conflicts`` of a LinkerdConfig, as a user (field
    manager ``user``) would: the object as stored."""
    obj = {
        "apiVersion": LINKERD_CONFIGS.api_version,
        "kind": LINKERD_CONFIGS.kind,
        "metadata": {"name": name},
        "spec": spec,
    }
    applied: Json = await kube.request(
        "PATCH",
        LINKERD_CONFIGS.path(name=name),
        body=obj,
        content_type=APPLY_PATCH,
        params={"fieldManager": "user", "force": "true"},
    )
    return applied


@contextlib.asynccontextmanager
async def controller(
    cp: LocalControlPlane, identity: str, *flags: str, **options: Any
) -> AsyncIterator[App]:
    """The controller in this process (``local_settings`` plus ``flags``), with the rollout
    ``options`` (restarts 0.5 s apart, the injector's fallback wait 600 s, unless given),
    running while the block runs."""
    settings = local_settings(cp.kubeconfig, "--identity", identity, *flags)
    rollout_options = RolloutOptions(**{"restart_interval": 0.5, "injector_wait": 600.0, **options})
    app = await build(settings, rollout_options)
    async with running(app):
        yield app
