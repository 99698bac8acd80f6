"""The controller as its own ServiceAccount, with exactly the RBAC that ``manifests/rbac``
renders, on a control plane of this module's own (KCM, scheduler and kwok included).

1. With all of it, the original README scenario works end to end (ConfigMap written, Ready,
   opted-in Deployments, a StatefulSet and a DaemonSet restarted onto edge-19.12.3 and a bare
   pod evicted; manual edit reverted; deleted ConfigMap recreated), no request is refused,
   and the API server's audit log shows the writes were made as the ServiceAccount.
2. Without any one verb of any rule, the step that needs it fails, named: the API server
   refuses that exact request (403 "cannot <verb> resource <resource>", seen on the
   controller's client and in its ``rest_client_requests_total{code="403"}``), and what the
   step was for does not happen (an informer never syncs or goes stale, no leadership, a
   status or Event not written, a ConfigMap not reverted or recreated, a workload not
   restarted). A completeness test makes sure every verb of every rule has such a case.
3. What it may change is named: as the ServiceAccount, a write to a ConfigMap in ``linkerd``
   other than the ones it manages, or to a Lease other than its own, is refused (403).
4. With ``manifests/restart-namespaces`` (the restart bound per namespace, and the
   controller's --restart-namespace-selector naming the same namespaces), a stale workload
   in a namespace not listed is excluded and not restarted (and the ServiceAccount could not
   patch it: 403), while one in a listed namespace is.

Linkerd's real proxy injector and all setup use the admin client.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.app import COMPONENT, App, build, running
from linkerd_config.kube.client import APPLY_PATCH, MERGE_PATCH, ApiError, KubeClient, token_access
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    LEASES,
    NAMESPACES,
    PODS,
    SERVICE_ACCOUNTS,
    STATEFULSETS,
    ApiResource,
    split_key,
)
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import HASH_ANNOTATION
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS as CONTROLLER_LINKERD_CONFIGS,  # the version the controller reads and patches
)
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario, service_accounts
from tests.support.audit import audit_entries, audited_resource
from tests.support.samples import install_configmap, sample
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
SA_NAMESPACE, SA_NAME = "linkerd", "linkerd-config"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
SA_GROUPS = [
    "system:serviceaccounts",
    f"system:serviceaccounts:{SA_NAMESPACE}",
    "system:authenticated",
]
CONFIG = "edge-19.12.3"
NEW, OLD = "edge-19.12.3", "edge-19.12.1"
LEASE_NAME = "linkerd-config-leader"
LEASE_PATH = LEASES.path("linkerd", LEASE_NAME)
CM_PATH = CONFIGMAPS.path("linkerd", "linkerd-config")
POKE_ANNOTATION = "linkerd-config.test/poke"
HOLD = 1.0
"""How long a refused step's consequence must be seen to last."""
DENIAL_TIMEOUT = 15.0
KUBECTL_TIMEOUT = 60.0

RESTART_ROLE = "linkerd-config-restart"
"""The ClusterRole of the restart (bound cluster-wide, or per namespace)."""
WORKLOAD_EVENTS = "events-on-workloads"
"""How the restart role's Events (in the workloads' namespaces) are told from the
LinkerdConfig's (in "default") in a case's name."""
KINDS_NS = "rbac-kinds"
"""Scenario extras beside emojivoto: a StatefulSet, a DaemonSet and a bare pod, opted in."""
HIDDEN = {
    "Deployment": ("rbac-deploy", "rbac-web"),
    "DaemonSet": ("rbac-ds", "rbac-agent"),
    "StatefulSet": ("rbac-sts", "rbac-db"),
    "Pod": ("rbac-pod", "rbac-bare"),
}
"""One stale workload per kind, each in a namespace labelled admission-webhooks=disabled
(never injected, never a candidate) until a case exposes it by removing the label: then it
is the only stale workload, so the case sees exactly the requests its kind needs."""
WORKLOAD_RESOURCES: dict[str, ApiResource] = {
    "Deployment": DEPLOYMENTS,
    "DaemonSet": DAEMONSETS,
    "StatefulSet": STATEFULSETS,
    "Pod": PODS,
}
RBAC_RESOURCES: dict[str, ApiResource] = {
    "ServiceAccount": SERVICE_ACCOUNTS,
    "ClusterRole": ApiResource(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
    ),
    "ClusterRoleBinding": ApiResource(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        namespaced=False,
    ),
    "Role": ApiResource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": ApiResource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "ValidatingAdmissionPolicy": ApiResource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        namespaced=False,
    ),
    "ValidatingAdmissionPolicyBinding": ApiResource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        namespaced=False,
    ),
}


# -- workloads -------------------------------------------------------------------------------


def _template(name: str) -> Obj:
    return {
        "metadata": {
            "labels": {"app": name, mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
        },
        "spec": {
            "containers": [{"name": name, "image": f"example.invalid/{name}:v1"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def workload(kind: str, name: str) -> Obj:
    template = _template(name)
    selector = {"matchLabels": {"app": name}}
    meta = {"name": name, "labels": {"app": name}}
    if kind == "Pod":
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            **template,
            "metadata": {**meta, **template["metadata"]},
        }
    if kind == "Deployment":
        return scenario.deployment(name, opted_in=True, replicas=1)
    spec: Obj = {"selector": selector, "template": template}
    if kind == "StatefulSet":
        spec.update(replicas=1, serviceName=name, podManagementPolicy="Parallel")
    else:
        spec.update(
            updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
        )
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


async def create_namespace(kube: KubeClient, name: str, hidden: bool) -> None:
    labels = {mesh.WEBHOOKS_LABEL: "disabled"} if hidden else {}
    await scenario.create(
        kube,
        NAMESPACES.path(),
        {
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {"linkerd.io/inject": "enabled"},
            }
        },
    )
    await scenario.wait_admits_pods(kube, name, injected=not hidden)


async def set_hidden(kube: KubeClient, namespace: str, hidden: bool) -> None:
    await kube.request(
        "PATCH",
        NAMESPACES.path(name=namespace),
        body={"metadata": {"labels": {mesh.WEBHOOKS_LABEL: "disabled" if hidden else None}}},
        content_type=MERGE_PATCH,
    )


async def all_pods(kube: KubeClient, namespace: str) -> list[Obj]:
    items: list[Obj] = (await kube.request("GET", PODS.path(namespace)))["items"]
    return items


def uids(pods: list[Obj]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


# -- RBAC: render, apply, revoke one verb ----------------------------------------------------


async def render(cp: LocalControlPlane, directory: Path) -> list[Obj]:
    proc = await asyncio.create_subprocess_exec(
        str(cp.binary("kubectl")),
        "kustomize",
        str(directory),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cp.workdir)},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), KUBECTL_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()
    return [d for d in yaml.safe_load_all(out) if d]


@dataclass(frozen=True)
class Permission:
    """One verb on one resource, granted by one rule of one (Cluster)Role."""

    kind: str
    namespace: str
    role: str
    group: str
    resource: str
    verb: str
    names: tuple[str, ...] = ()
    """The rule's resourceNames: only these objects (none: every object)."""

    @property
    def id(self) -> str:
        if self.resource == "events" and self.role == RESTART_ROLE:
            return f"{self.verb} {WORKLOAD_EVENTS}"  # beside the Role's in "default"
        return f"{self.verb} {self.resource}"

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.role}" if self.namespace else self.role
        return f'{self.kind} {where}: {self.verb} "{self.resource}" (group "{self.group}")'

    @property
    def refusal(self) -> str:
        """How the API server words this permission's absence in a 403."""
        return f'cannot {self.verb} resource "{self.resource}" in API group "{self.group}"'


def roles(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] in ("ClusterRole", "Role")]


def permissions(objs: list[Obj]) -> list[Permission]:
    found = []
    for role in roles(objs):
        meta = role["metadata"]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        found.append(
                            Permission(
                                role["kind"],
                                meta.get("namespace", ""),
                                meta["name"],
                                group,
                                resource,
                                verb,
                                tuple(rule.get("resourceNames") or ()),
                            )
                        )
    return found


def without(objs: list[Obj], perm: Permission) -> list[Obj]:
    """The roles with exactly one verb on one resource taken away (a rule split if needed)."""
    result = []
    for original in roles(objs):
        role = copy.deepcopy(original)
        meta = role["metadata"]
        if (role["kind"], meta.get("namespace", ""), meta["name"]) == (
            perm.kind,
            perm.namespace,
            perm.role,
        ):
            rules = []
            for rule in role["rules"]:
                if not (
                    perm.group in rule["apiGroups"]
                    and perm.resource in rule["resources"]
                    and perm.verb in rule["verbs"]
                ):
                    rules.append(rule)
                    continue
                others = [r for r in rule["resources"] if r != perm.resource]
                if others:
                    rules.append({**rule, "resources": others})
                groups = [g for g in rule["apiGroups"] if g != perm.group]
                if groups:
                    rules.append({**rule, "apiGroups": groups, "resources": [perm.resource]})
                verbs = [v for v in rule["verbs"] if v != perm.verb]
                if verbs:
                    rules.append(
                        {
                            **rule,
                            "apiGroups": [perm.group],
                            "resources": [perm.resource],
                            "verbs": verbs,
                        }
                    )
            role["rules"] = rules
        result.append(role)
    return result


async def apply(kube: KubeClient, objs: list[Obj]) -> None:
    for obj in objs:
        meta = obj["metadata"]
        path = RBAC_RESOURCES[obj["kind"]].path(meta.get("namespace"), meta["name"])
        await kube.request(
            "PATCH",
            path,
            params={"fieldManager": "rbac-test", "force": True},
            body=obj,
            content_type=APPLY_PATCH,
        )


async def authorized(kube: KubeClient, perm: Permission) -> bool:
    """Would the authorizer allow the ServiceAccount this (SubjectAccessReview)?"""
    resource, _, subresource = perm.resource.partition("/")
    attributes = {"verb": perm.verb, "group": perm.group, "resource": resource}
    if subresource:
        attributes["subresource"] = subresource
    if perm.namespace:
        attributes["namespace"] = perm.namespace
    if perm.names:
        attributes["name"] = perm.names[0]
    review = await kube.review_access(
        {"user": SA_USER, "groups": SA_GROUPS, "resourceAttributes": attributes}
    )
    return bool(review.get("allowed"))


# -- the controller, and what it was refused -------------------------------------------------


@dataclass(frozen=True)
class Denied:
    method: str
    path: str
    message: str


class Denials:
    """Every 403 the controller's client receives, with the request it answered. Observes
    only: the request goes to the API server unchanged and the error is re-raised."""

    def __init__(self, client: KubeClient) -> None:
        self.seen: list[Denied] = []
        # Every request goes through these two (``request``, the informers' ``list_page`` and
        # ``watch``, in protobuf or JSON): tapped here, each 403 is noted once.
        request, stream = client._request, client._stream

        async def tapped_request(method: str, path: str, *args: Any) -> tuple[str, Any]:
            try:
                return await request(method, path, *args)
            except ApiError as exc:
                self._note(exc)
                raise

        @contextlib.asynccontextmanager
        async def tapped_stream(path: str, *args: Any) -> AsyncIterator[Any]:
            try:
                async with stream(path, *args) as answer:
                    yield answer
            except ApiError as exc:
                self._note(exc)
                raise

        client._request = tapped_request  # type: ignore[method-assign]
        client._stream = tapped_stream  # type: ignore[method-assign]

    def _note(self, exc: ApiError) -> None:
        if exc.status == 403:
            self.seen.append(Denied(exc.method, exc.path, exc.message))

    async def wait(self, perm: Permission, path: str | None = None) -> Denied:
        def match() -> Denied | None:
            for denied in self.seen:
                if perm.refusal in denied.message and path in (None, denied.path):
                    return denied
            return None

        async def found() -> Denied | None:
            return match()

        return await eventually(
            found,
            timeout=DENIAL_TIMEOUT,
            interval=0.02,
            what=f"a 403 for {perm}{f' on {path}' if path else ''} (seen: {self.seen})",
        )


def refused_requests(app: App) -> float:
    """The controller's own metric: rest_client_requests_total{code="403"}, all methods."""
    total = 0.0
    for family in app.registry.collect():
        for s in family.samples:
            if s.name == "rest_client_requests_total" and s.labels.get("code") == "403":
                total += s.value
    return total


@dataclass
class World:
    cp: LocalControlPlane
    admin: KubeClient
    rbac: list[Obj]
    kubeconfig: Path
    token: str


@dataclass
class Run:
    app: App
    denials: Denials
    identity: str

    async def refused(self, perm: Permission, path: str | None = None) -> Denied:
        denied = await self.denials.wait(perm, path)
        assert refused_requests(self.app) >= 1
        return denied


@contextlib.asynccontextmanager
async def controller(
    world: World, identity: str, *flags: str, injector_wait: float = 30.0
) -> AsyncIterator[Run]:
    """`linkerd-config run` in-process, as the ServiceAccount (its token's kubeconfig), with
    ``flags`` besides the test's own."""
    settings = scenario.local_settings(
        world.kubeconfig,
        "--leader-elect",
        "true",
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "0.5s",
        "--identity",
        identity,
        # Paged LISTs (the default; said here because with streaming lists the informers'
        # first fill is a watch, and `list` would go unused).
        "--watch-list",
        "false",
        *flags,
    )
    app = await build(
        settings,
        RolloutOptions(
            restart_interval=0.5,
            injector_wait=injector_wait,
            restart_namespaces=settings.restart_namespaces,
        ),
    )
    denials = Denials(app.client)
    async with running(app):
        yield Run(app, denials, identity)


async def holds(check: Callable[[], Awaitable[bool]], what: str, seconds: float = HOLD) -> None:
    """``check`` stays true for ``seconds`` (the refused step really does not happen)."""
    deadline = time.monotonic() + seconds
    while True:
        assert await check(), f"{what}: not (or no longer) true"
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.05)


async def delete_lease(kube: KubeClient) -> None:
    with contextlib.suppress(ApiError):
        await kube.request("DELETE", LEASE_PATH)


async def get_or_none(kube: KubeClient, path: str) -> Obj | None:
    try:
        return await kube.request("GET", path)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise


async def cr_ready(kube: KubeClient, name: str = CONFIG) -> Obj | None:
    obj = await kube.request("GET", LINKERD_CONFIGS.path(name=name))
    status = obj.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    if (
        conditions.get("Ready", {}).get("status") == "True"
        and status.get("observedGeneration") == obj["metadata"]["generation"]
    ):
        return obj
    return None


async def edit_configmap(kube: KubeClient) -> str:
    """A manual edit of a managed key, as in the README; returns the edited value."""
    good: str = (await kube.request("GET", CM_PATH))["data"]["proxy"]
    assert NEW in good
    edited = good.replace(NEW, OLD)
    await kube.request("PATCH", CM_PATH, body={"data": {"proxy": edited}}, content_type=MERGE_PATCH)
    return edited


async def configmap_converged(kube: KubeClient) -> bool:
    cm = await get_or_none(kube, CM_PATH)
    cr = await cr_ready(kube)
    if cm is None or cr is None:
        return False
    annotations = cm["metadata"].get("annotations") or {}
    proxy = cm["data"].get("proxy", "")
    return (
        annotations.get(HASH_ANNOTATION) == cr["status"]["configHash"]
        and f'"proxyVersion":"{NEW}"' in proxy
        and OLD not in proxy
    )


async def full_rbac(world: World) -> None:
    """Every role as rendered again (a case before may have revoked a verb), and in force."""
    await apply(world.admin, roles(world.rbac))

    async def granted() -> bool:
        return all([await authorized(world.admin, p) for p in permissions(world.rbac)])

    await eventually(granted, timeout=10, what="every permission granted again")


async def converge(world: World) -> None:
    """Full RBAC, and the controller until the ConfigMap is as the LinkerdConfig says."""
    await full_rbac(world)
    await delete_lease(world.admin)
    async with controller(world, "rbac-converge"):
        await eventually(
            lambda: configmap_converged(world.admin), timeout=30, what="ConfigMap converged"
        )


def rival(name: str) -> Obj:
    obj = copy.deepcopy(sample("edge_19.12.3.yaml"))
    obj["metadata"]["name"] = name
    return obj


@contextlib.asynccontextmanager
async def rival_created(world: World, name: str) -> AsyncIterator[None]:
    """A second LinkerdConfig for the same ConfigMap (so it gets Conflict), deleted after."""
    await world.admin.request("POST", LINKERD_CONFIGS.path(), body=rival(name))
    try:
        yield
    finally:
        await world.admin.request("DELETE", LINKERD_CONFIGS.path(name=name))


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cp() -> Iterator[LocalControlPlane]:
    """This module's own control plane: the scenario's fixed names cannot collide."""
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as plane:
        yield plane


@pytest.fixture(scope="module")
async def world(
    cp: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="rbac-tests") as admin:
        rbac = await render(cp, REPO / "manifests" / "rbac")
        await scenario.install_crd(admin)
        await scenario.install_linkerd_edge_19_12_1(admin)
        await apply(admin, rbac)
        async with scenario.linkerd_injector(cp):
            await scenario.install_workloads(admin)
            await create_namespace(admin, KINDS_NS, hidden=False)
            for kind in ("StatefulSet", "DaemonSet", "Pod"):
                path = WORKLOAD_RESOURCES[kind].path(KINDS_NS)
                await scenario.create(admin, path, workload(kind, f"kinds-{kind.lower()}"))
            for kind, (namespace, name) in HIDDEN.items():
                await create_namespace(admin, namespace, hidden=True)
                path = WORKLOAD_RESOURCES[kind].path(namespace)
                await scenario.create(admin, path, workload(kind, name))
            await scenario.wait_settled(admin, scenario.EMOJIVOTO, expected=8)
            await scenario.wait_settled(admin, scenario.DISABLED_NS, expected=2)
            await scenario.wait_settled(admin, KINDS_NS, expected=3)
            for namespace, _ in HIDDEN.values():
                await scenario.wait_settled(admin, namespace, expected=1)

            token = await service_accounts.token(admin, SA_NAMESPACE, SA_NAME)
            kubeconfig = service_accounts.kubeconfig(
                tmp_path_factory.mktemp("sa") / "linkerd-config.kubeconfig",
                cp,
                SA_NAME,
                token,
                namespace=SA_NAMESPACE,
            )
            yield World(cp, admin, rbac, kubeconfig, token)


# -- 1. everything it needs ------------------------------------------------------------------


async def test_readme_scenario_as_the_service_account(world: World) -> None:
    admin = world.admin
    await apply(admin, roles(world.rbac))
    for perm in permissions(world.rbac):
        assert await authorized(admin, perm), perm
    for verb in ("get", "list", "watch"):
        for namespace in ("linkerd", "default", ""):
            secrets = Permission("Role", namespace, "-", "", "secrets", verb)
            assert not await authorized(admin, secrets), f"{verb} secrets in {namespace!r}"
    async with KubeClient(token_access(world.cp.server, world.cp.ca_pem, world.token)) as sa:
        review = await sa.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    assert review["status"]["userInfo"]["username"] == SA_USER

    before = await scenario.running_pods(admin, scenario.EMOJIVOTO)
    assert set(scenario.proxy_versions(before).values()) == {OLD}
    bot_before = uids(
        [p for p in before if p["metadata"]["labels"]["app"] == scenario.NOT_OPTED_IN]
    )
    disabled_before = uids(await all_pods(admin, scenario.DISABLED_NS))
    hidden_before = {ns: uids(await all_pods(admin, ns)) for ns, _ in HIDDEN.values()}
    kinds_before = await all_pods(admin, KINDS_NS)
    assert {mesh.proxy_version(p) for p in kinds_before} == {OLD}

    await delete_lease(admin)
    started = time.monotonic()
    async with controller(world, "rbac-full") as run:
        await admin.request("POST", LINKERD_CONFIGS.path(), body=sample("edge_19.12.3.yaml"))

        async def written() -> Obj | None:
            cm = await admin.request("GET", CM_PATH)
            return cm if f'"proxyVersion":"{NEW}"' in cm["data"]["proxy"] else None

        cm = await eventually(written, timeout=30, what="ConfigMap written")
        assert cm["data"]["install"] == install_configmap()["data"]["install"]
        ready = await eventually(lambda: cr_ready(admin), timeout=90, what="Ready")
        print(f"\nas the ServiceAccount: apply → Ready {time.monotonic() - started:.2f}s")
        # 3 Deployments, the StatefulSet, the DaemonSet, and the bare pod (evicted).
        assert ready["status"]["restartedWorkloads"] == 6
        assert ready["status"]["outdatedWorkloads"] == 0

        after = await scenario.wait_settled(admin, scenario.EMOJIVOTO, expected=8)
        versions = {p["metadata"]["labels"]["app"]: mesh.proxy_version(p) for p in after}
        for name in scenario.OPTED_IN:
            assert versions[name] == NEW, versions
        assert versions[scenario.NOT_OPTED_IN] == OLD
        bot_after = [p for p in after if p["metadata"]["labels"]["app"] == scenario.NOT_OPTED_IN]
        assert uids(bot_after) == bot_before
        kinds_after = await scenario.wait_settled(admin, KINDS_NS, expected=2)
        assert {p["metadata"]["labels"]["app"] for p in kinds_after} == {
            "kinds-statefulset",
            "kinds-daemonset",
        }  # the bare pod was evicted; the owned ones came back on the new proxy
        assert {mesh.proxy_version(p) for p in kinds_after} == {NEW}
        assert not uids(kinds_after) & uids(kinds_before)
        assert uids(await all_pods(admin, scenario.DISABLED_NS)) == disabled_before
        for namespace, _ in HIDDEN.values():
            assert uids(await all_pods(admin, namespace)) == hidden_before[namespace]

        # Drift: a manual edit is reverted, a deleted ConfigMap recreated (an apply-create).
        await edit_configmap(admin)
        await eventually(lambda: configmap_converged(admin), timeout=10, what="edit reverted")
        original = await admin.request("GET", CM_PATH)
        await admin.request("DELETE", CM_PATH)

        async def recreated() -> Obj | None:
            cm = await get_or_none(admin, CM_PATH)
            return cm if cm and cm["metadata"]["uid"] != original["metadata"]["uid"] else None

        cm = await eventually(recreated, timeout=15, what="ConfigMap recreated")
        assert (cm["data"]["global"], cm["data"]["proxy"]) == (
            original["data"]["global"],
            original["data"]["proxy"],
        )
        await admin.request(  # put back what Linkerd's install wrote, for the next tests
            "PATCH",
            CM_PATH,
            body={"data": {"install": original["data"]["install"]}},
            content_type=MERGE_PATCH,
        )

        async def reasons() -> set[str] | None:
            events = (await admin.request("GET", EVENTS.path("default")))["items"]
            found = {e["reason"] for e in events if e["involvedObject"]["name"] == CONFIG}
            wanted = {
                "ConfigMapUpdated",
                "WorkloadsRestarted",
                "ConfigMapReverted",
                "ConfigMapCreated",
            }
            return found if wanted <= found else None

        await eventually(reasons, timeout=10, what="Events in namespace default")

        async def on_workloads() -> set[str] | None:  # each restart, on its workload
            events = (await admin.request("GET", EVENTS.path(scenario.EMOJIVOTO)))["items"]
            found = {
                e["involvedObject"]["name"]
                for e in events
                if e["reason"] == "WorkloadRestarted"
                and e["involvedObject"]["kind"] == "Deployment"
            }
            return found if set(scenario.OPTED_IN) <= found else None

        await eventually(on_workloads, timeout=10, what="WorkloadRestarted on each Deployment")
        assert run.denials.seen == []
        assert refused_requests(run.app) == 0

    # Who wrote: the audit log has every write, with the user who made it.
    entries = [e for e in audit_entries(world.cp) if e["user"]["username"] == SA_USER]
    done = {(e["verb"], audited_resource(e)) for e in entries if e["responseStatus"]["code"] < 300}
    assert {
        ("create", "leases"),
        ("update", "leases"),
        ("patch", "configmaps"),
        ("patch", "linkerdconfigs/status"),
        ("create", "pods"),  # the injector dry-run
        ("create", "pods/eviction"),
        ("patch", "deployments"),
        ("patch", "statefulsets"),
        ("patch", "daemonsets"),
        ("create", "events"),
    } <= done, done
    assert not [e for e in entries if e["responseStatus"]["code"] == 403]

    # A successor leader reconciles everything once, restarts nothing, and keeps the count.
    settled = uids(await all_pods(admin, scenario.EMOJIVOTO))
    async with controller(world, "rbac-successor") as run:

        async def reconciled_once() -> bool:
            value = run.app.registry.get_sample_value(
                "controller_runtime_reconcile_total",
                {"controller": "linkerdconfig", "result": "success"},
            )
            return value is not None and value > 0

        await eventually(reconciled_once, timeout=30, what="the successor reconciled")
        status = (await admin.request("GET", LINKERD_CONFIGS.path(name=CONFIG)))["status"]
        assert status["restartedWorkloads"] == 6, status
        assert status["outdatedWorkloads"] == 0, status
    assert uids(await all_pods(admin, scenario.EMOJIVOTO)) == settled


# -- 2. without each verb of each rule -------------------------------------------------------

Case = Callable[[World, Permission], Awaitable[None]]
CASES: dict[str, Case] = {}


def case(*ids: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        for rule_id in ids:
            CASES[rule_id] = fn
        return fn

    return register


def identity(perm: Permission) -> str:
    return "rbac-without-" + perm.id.replace(" ", "-").replace("/", "-")


INFORMERS = {
    "linkerdconfigs": "configs",
    "configmaps": "configmaps",
    "pods": "pods",
    "namespaces": "namespaces",
    "replicasets": "replicasets",
    "deployments": "Deployment",
    "statefulsets": "StatefulSet",
    "daemonsets": "DaemonSet",
    "leases": "watch_health",
    "events": "issuer_events",
}
ISSUER_EVENT: Obj = {
    "metadata": {"name": "linkerd-identity.rbac-case", "namespace": "linkerd"},
    "involvedObject": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "namespace": "linkerd",
        "name": "linkerd-identity",
    },
    "reason": "IssuerUpdated",
    "message": "Updated identity issuer",
    "type": "Normal",
    "source": {"component": "linkerd-identity"},
    "lastTimestamp": "2026-12-03T17:00:00Z",
}
"""Linkerd identity's Event, which the guard's issuer informer lists and watches."""


def informer_of(app: App, resource: str) -> Informer:
    name = INFORMERS[resource]
    if name == "watch_health":
        assert app.watch_health is not None
        return app.watch_health.informer
    if name in app.controller.workloads:
        return app.controller.workloads[name]
    informer: Informer = getattr(app.controller.caches, name)
    return informer


@case(*(f"list {r}" for r in INFORMERS))
async def informer_never_syncs(world: World, perm: Permission) -> None:
    async with controller(world, identity(perm)) as run:
        informer = informer_of(run.app, perm.resource)
        await run.refused(perm, informer.resource.path(informer.namespace))

        async def stuck() -> bool:
            manager = run.app.manager
            return not informer.has_synced and not manager.synced.is_set() and not manager.leading

        await holds(stuck, f"{informer.name} informer unsynced, so nothing starts")


@case(*(f"watch {r}" for r in INFORMERS))
async def informer_goes_stale(world: World, perm: Permission) -> None:
    if perm.resource == "leases":  # the Lease must be there for the LIST to cache it
        with contextlib.suppress(ApiError):
            await world.admin.request(
                "POST", LEASES.path("linkerd"), body={"metadata": {"name": LEASE_NAME}}
            )
    if perm.resource == "events":  # so must an IssuerUpdated Event
        with contextlib.suppress(ApiError):
            await world.admin.request("POST", EVENTS.path("linkerd"), body=ISSUER_EVENT)
    async with controller(world, identity(perm)) as run:
        informer = informer_of(run.app, perm.resource)
        await run.refused(perm, informer.resource.path(informer.namespace))
        assert informer.has_synced  # the LIST was allowed; only the WATCH is refused
        key = next(k for k in sorted(informer.store.keys()) if "kube-" not in k)
        # Where the informer stands: the resourceVersion its LIST ended at, which any event
        # it saw would move (its pod projections keep no resourceVersion of their own).
        listed_at = informer.resource_version
        cached = informer.store.get(key)
        namespace, name = split_key(key)
        poked = await world.admin.request(
            "PATCH",
            informer.resource.path(namespace, name),
            body={"metadata": {"annotations": {POKE_ANNOTATION: str(time.time_ns())}}},
            content_type=MERGE_PATCH,
        )
        assert int(poked["metadata"]["resourceVersion"]) > int(listed_at)

        async def stale() -> bool:
            return informer.resource_version == listed_at and informer.store.get(key) == cached

        await holds(stale, f"{informer.name} cache misses the change to {key}", seconds=2 * HOLD)


@case("get leases", "create leases")
async def never_leads(world: World, perm: Permission) -> None:
    async with controller(world, identity(perm)) as run:
        path = LEASE_PATH if perm.verb == "get" else LEASES.path("linkerd")
        await run.refused(perm, path)
        assert run.app.manager.synced.is_set()  # caches are fine; only the election fails

        async def follower() -> bool:
            lease = await get_or_none(world.admin, LEASE_PATH)
            return not run.app.manager.leading and lease is None

        await holds(follower, "never leads, no Lease")


@case("update leases")
async def cannot_renew(world: World, perm: Permission) -> None:
    async with controller(world, identity(perm)) as run:
        await run.refused(perm, LEASE_PATH)
        lease = await world.admin.request("GET", LEASE_PATH)
        assert lease["spec"]["holderIdentity"] == run.identity  # won by create, once

        async def lost() -> bool:
            leadership = run.app.manager.leadership
            return leadership.leadership_lost.is_set() and not run.app.manager.leading

        await eventually(lost, timeout=10, what="leadership lost: the Lease cannot be renewed")
        await holds(lost, "stays a follower")


@case("patch linkerdconfigs/status")
async def status_not_reported(world: World, perm: Permission) -> None:
    name = "rbac-rival-status"
    async with controller(world, identity(perm)) as run, rival_created(world, name):
        await run.refused(perm, CONTROLLER_LINKERD_CONFIGS.path(name=name, subresource="status"))

        async def no_status() -> bool:
            obj = await world.admin.request("GET", LINKERD_CONFIGS.path(name=name))
            return not (obj.get("status") or {}).get("conditions")

        await holds(no_status, "the rival LinkerdConfig never gets its Conflict status")


async def events_about(kube: KubeClient, name: str) -> list[Obj]:
    items: list[Obj] = (await kube.request("GET", EVENTS.path("default")))["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


@case("create events")
async def event_not_recorded(world: World, perm: Permission) -> None:
    name = "rbac-rival-events"
    async with controller(world, identity(perm)) as run, rival_created(world, name):
        await run.refused(perm, EVENTS.path("default"))

        async def conflicted() -> bool:
            obj = await world.admin.request("GET", LINKERD_CONFIGS.path(name=name))
            conditions = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
            return bool(conditions.get("Conflict", {}).get("status") == "True")

        # The reconcile itself went through; only its Event is missing.
        await eventually(conflicted, timeout=10, what="rival reported Conflict")

        async def no_event() -> bool:
            return not await events_about(world.admin, name)

        await holds(no_event, "no Conflict Event about the rival")


@case("patch events")
async def repeat_not_counted(world: World, perm: Permission) -> None:
    async with controller(world, identity(perm)) as run:
        for _ in range(2):  # the same manual edit twice: the same Event twice, so a PATCH
            await edit_configmap(world.admin)
            await eventually(
                lambda: configmap_converged(world.admin), timeout=10, what="edit reverted"
            )
        denied = await run.refused(perm)
        assert denied.path.startswith(EVENTS.path("default") + "/")

        async def counted_once() -> bool:
            mine = [
                e
                for e in await events_about(world.admin, CONFIG)
                if e["reason"] == "ConfigMapReverted" and e.get("reportingInstance") == run.identity
            ]
            return len(mine) == 1 and mine[0]["count"] == 1

        await holds(counted_once, "the repeated Event stays at count 1")


@case("patch configmaps")
async def edit_not_reverted(world: World, perm: Permission) -> None:
    try:
        async with controller(world, identity(perm)) as run:
            edited = await edit_configmap(world.admin)
            await run.refused(perm, CM_PATH)

            async def still_edited() -> bool:
                return bool((await world.admin.request("GET", CM_PATH))["data"]["proxy"] == edited)

            await holds(still_edited, "the manual edit is not reverted")
    finally:
        await converge(world)


@case("create configmaps")
async def configmap_not_recreated(world: World, perm: Permission) -> None:
    saved = await world.admin.request("GET", CM_PATH)
    # The copy of what the controller did not write (``install``, ...) that it restores from.
    await world.admin.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config-preserved"))
    await world.admin.request("DELETE", CM_PATH)
    try:
        async with controller(world, identity(perm)) as run:
            # Recreating is a create of the ConfigMap as it was, our keys included.
            denied = await run.refused(perm, CONFIGMAPS.path("linkerd"))
            assert denied.method == "POST"

            async def absent() -> bool:
                return await get_or_none(world.admin, CM_PATH) is None

            await holds(absent, "the deleted ConfigMap is not recreated")
    finally:
        meta = {k: saved["metadata"][k] for k in ("name", "namespace", "labels", "annotations")}
        with contextlib.suppress(ApiError):
            await world.admin.request(
                "POST", CONFIGMAPS.path("linkerd"), body={"metadata": meta, "data": saved["data"]}
            )
        await converge(world)


@contextlib.asynccontextmanager
async def exposed(world: World, kind: str) -> AsyncIterator[tuple[str, str]]:
    """The hidden workload of ``kind`` made a candidate: the only stale one (no proxy)."""
    namespace, name = HIDDEN[kind]
    await set_hidden(world.admin, namespace, False)
    try:
        yield namespace, name
    finally:
        await set_hidden(world.admin, namespace, True)


async def restart_refused(
    world: World, perm: Permission, kind: str, path: Callable[[str, str], str]
) -> Run:
    """Run with ``kind`` exposed until ``perm`` is refused on ``path``; then show the
    workload is not restarted."""
    async with exposed(world, kind) as (namespace, name):
        before = uids(await all_pods(world.admin, namespace))
        async with controller(world, identity(perm), injector_wait=600) as run:
            await run.refused(perm, path(namespace, name))

            async def not_restarted() -> bool:
                pods = await all_pods(world.admin, namespace)
                if uids(pods) != before or any(
                    p["metadata"].get("deletionTimestamp") for p in pods
                ):
                    return False
                if kind == "Pod":
                    return True
                obj = await world.admin.request(
                    "GET", WORKLOAD_RESOURCES[kind].path(namespace, name)
                )
                annotations = obj["spec"]["template"]["metadata"].get("annotations") or {}
                return mesh.RESTARTED_FOR_ANNOTATION not in annotations

            await holds(not_restarted, f"{kind.lower()}/{namespace}/{name} is not restarted")
            return run


def workload_path(kind: str) -> Callable[[str, str], str]:
    return WORKLOAD_RESOURCES[kind].path


KIND_OF = {"deployments": "Deployment", "statefulsets": "StatefulSet", "daemonsets": "DaemonSet"}


@case(*(f"{verb} {resource}" for resource in KIND_OF for verb in ("get", "patch")))
async def workload_not_restarted(world: World, perm: Permission) -> None:
    kind = KIND_OF[perm.resource]
    await restart_refused(world, perm, kind, workload_path(kind))


@case("create pods")
async def injector_not_asked(world: World, perm: Permission) -> None:
    """The question to the injector (a dry-run create of the workload's pod, in the
    workload's own namespace) refused by RBAC there: the injector cannot be asked, so the
    restart waits for the fallback wait, saying why, and nothing is restarted meanwhile."""
    async with exposed(world, "Deployment") as (namespace, name):

        async def waiting_for_injector() -> bool:
            obj = await world.admin.request("GET", LINKERD_CONFIGS.path(name=CONFIG))
            conditions = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
            up_to_date = conditions.get("DataPlaneUpToDate", {})
            said = up_to_date.get("message", "")
            return (
                up_to_date.get("status") == "False"
                and up_to_date.get("reason") == "WaitingForInjector"
                and "cannot confirm the injector's version by dry-run" in said
                and f"deployment/{namespace}/{name}'s pod was refused" in said
                and perm.refusal in said
            )

        before = uids(await all_pods(world.admin, namespace))
        async with controller(world, identity(perm), injector_wait=600) as run:
            await run.refused(perm, PODS.path(namespace))  # POST ...?dryRun=All
            await eventually(waiting_for_injector, timeout=10, what="status WaitingForInjector")

            async def not_restarted() -> bool:
                return uids(await all_pods(world.admin, namespace)) == before

            await holds(not_restarted, f"deployment/{namespace}/{name} is not restarted")


@case("get pods")
async def bare_pod_not_inspected(world: World, perm: Permission) -> None:
    await restart_refused(world, perm, "Pod", PODS.path)


@case("create pods/eviction")
async def bare_pod_not_evicted(world: World, perm: Permission) -> None:
    await restart_refused(world, perm, "Pod", lambda ns, name: PODS.path(ns, name, "eviction"))


@contextlib.asynccontextmanager
async def stale_alone(world: World, namespace: str, name: str) -> AsyncIterator[str]:
    """A Deployment of a namespace of its own, its pod without a proxy (made while hidden),
    then shown: the only stale workload. Hidden again after (restarted or not). Yields its
    path."""
    admin = world.admin
    await create_namespace(admin, namespace, hidden=True)
    await scenario.create(admin, DEPLOYMENTS.path(namespace), workload("Deployment", name))
    await scenario.wait_settled(admin, namespace, expected=1)
    await set_hidden(admin, namespace, False)
    try:
        yield DEPLOYMENTS.path(namespace, name)
    finally:
        await set_hidden(admin, namespace, True)


async def workload_events(kube: KubeClient, namespace: str, name: str, reason: str) -> list[Obj]:
    items: list[Obj] = (await kube.request("GET", EVENTS.path(namespace)))["items"]
    return [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]


@case(f"create {WORKLOAD_EVENTS}")
async def restart_not_told_on_its_workload(world: World, perm: Permission) -> None:
    namespace, name = "rbac-events-create", "rbac-told"
    async with (
        stale_alone(world, namespace, name) as path,
        controller(world, identity(perm), injector_wait=600) as run,
    ):
        await run.refused(perm, EVENTS.path(namespace))

        async def restarted() -> bool:  # the restart went through; only its Event did not
            obj = await world.admin.request("GET", path)
            return mesh.RESTARTED_FOR_ANNOTATION in template_annotations(obj)

        await eventually(restarted, timeout=10, what=f"{path} restarted")

        async def untold() -> bool:
            return not await workload_events(world.admin, namespace, name, "WorkloadRestarted")

        await holds(untold, f"no WorkloadRestarted Event on {path}")


@case(f"patch {WORKLOAD_EVENTS}")
async def refusal_not_counted_on_its_workload(world: World, perm: Permission) -> None:
    """A restart refused every pass (its patch revoked too) is one Warning on the workload,
    repeated: a PATCH of its count, refused, so the count stays 1."""
    namespace, name = "rbac-events-patch", "rbac-refused"
    (restart,) = [p for p in permissions(world.rbac) if p.id == "patch deployments"]
    await apply(world.admin, without(without(world.rbac, perm), restart))

    async def both_revoked() -> bool:
        return not await authorized(world.admin, restart)

    await eventually(both_revoked, timeout=10, what=f"{restart} revoked too")
    async with (
        stale_alone(world, namespace, name),
        controller(world, identity(perm), injector_wait=600) as run,
    ):
        denied = await run.refused(perm)
        assert denied.path.startswith(EVENTS.path(namespace) + "/"), denied

        async def counted_once() -> bool:
            found = await workload_events(world.admin, namespace, name, "RestartFailed")
            return len(found) == 1 and found[0]["count"] == 1

        await holds(counted_once, "the repeated RestartFailed Event stays at count 1")


@pytest.fixture(scope="module")
async def baseline(world: World) -> None:
    """The LinkerdConfig applied and the ConfigMap converged (test 1 normally did both)."""
    with contextlib.suppress(ApiError):
        await world.admin.request("POST", LINKERD_CONFIGS.path(), body=sample("edge_19.12.3.yaml"))
    await converge(world)


def test_every_verb_of_every_rule_has_a_case(world: World) -> None:
    granted = {p.id for p in permissions(world.rbac)}
    assert len(granted) == len(permissions(world.rbac)), "a verb granted twice"
    assert granted == set(CASES), (
        f"without a case: {sorted(granted - set(CASES))}; "
        f"cases for verbs not granted: {sorted(set(CASES) - granted)}"
    )


def covering(objs: list[Obj], perm: Permission) -> list[Permission]:
    """Other grants of what a namespaced ``perm`` grants: the restart ClusterRole's Events,
    when bound cluster-wide, reach namespace "default" too. They go with it, as in the
    per-namespace mode (components/restart-namespaces), where the Role is the only grant."""
    if not perm.namespace:
        return []
    return [
        p
        for p in permissions(objs)
        if p != perm
        and not p.namespace
        and not p.names
        and (p.group, p.resource, p.verb) == (perm.group, perm.resource, perm.verb)
    ]


@pytest.mark.parametrize("rule", list(CASES), ids=lambda r: r.replace(" ", "-").replace("/", "-"))
async def test_without_it_the_step_that_needs_it_fails(
    world: World, baseline: None, rule: str
) -> None:
    (perm,) = [p for p in permissions(world.rbac) if p.id == rule]
    await delete_lease(world.admin)
    revoked_roles = without(world.rbac, perm)
    for wider in covering(world.rbac, perm):
        revoked_roles = without(revoked_roles, wider)
    await apply(world.admin, revoked_roles)

    async def revoked() -> bool:
        return not await authorized(world.admin, perm)

    await eventually(revoked, timeout=10, what=f"{perm} revoked")
    started = time.monotonic()
    await CASES[rule](world, perm)
    print(f"\nwithout {perm}: refused and shown in {time.monotonic() - started:.2f}s")


# -- 3. only what it manages, by name --------------------------------------------------------

OTHER_CONFIGMAP = "linkerd-other-config"
"""Another ConfigMap of Linkerd's namespace (as Linkerd's own, e.g. its Prometheus config)."""
OTHER_LEASE = "other-controller-leader"
"""Another controller's Lease in the same namespace."""
POKE: Obj = {"metadata": {"annotations": {POKE_ANNOTATION: "rbac"}}}
DRY_RUN = {"dryRun": "All"}
"""Authorized exactly as the real request, and persists nothing."""


@contextlib.asynccontextmanager
async def as_service_account(world: World) -> AsyncIterator[KubeClient]:
    access = token_access(world.cp.server, world.cp.ca_pem, world.token)
    async with KubeClient(access, user_agent="rbac-tests-as-sa") as sa:
        yield sa


async def forbidden(request: Awaitable[Obj]) -> ApiError:
    """The API server's 403 for ``request``; fails if it was allowed."""
    try:
        await request
    except ApiError as exc:
        assert exc.status == 403, exc
        return exc
    raise AssertionError("allowed, but should have been refused (403)")


async def test_it_may_change_no_other_configmap_and_no_other_lease(
    world: World, baseline: None
) -> None:
    admin = world.admin
    await scenario.create(
        admin,
        CONFIGMAPS.path("linkerd"),
        {"metadata": {"name": OTHER_CONFIGMAP}, "data": {"a": "b"}},
    )
    await scenario.create(
        admin,
        LEASES.path("linkerd"),
        {"metadata": {"name": OTHER_LEASE}, "spec": {"holderIdentity": "another-controller"}},
    )
    await scenario.create(admin, LEASES.path("linkerd"), {"metadata": {"name": LEASE_NAME}})
    try:
        async with as_service_account(world) as sa:
            # The ConfigMaps it manages (the preserved copy was written by the baseline's run).
            for name in ("linkerd-config", "linkerd-config-preserved"):
                await sa.request(
                    "PATCH",
                    CONFIGMAPS.path("linkerd", name),
                    params=DRY_RUN,
                    body=POKE,
                    content_type=MERGE_PATCH,
                )
            denied = await forbidden(
                sa.request(
                    "PATCH",
                    CONFIGMAPS.path("linkerd", OTHER_CONFIGMAP),
                    params=DRY_RUN,
                    body=POKE,
                    content_type=MERGE_PATCH,
                )
            )
            assert 'cannot patch resource "configmaps"' in denied.message, denied.message
            # A create is not named, but it cannot change one that exists: 409, not a write.
            with pytest.raises(ApiError) as exists:
                await sa.request(
                    "POST",
                    CONFIGMAPS.path("linkerd"),
                    params=DRY_RUN,
                    body={"metadata": {"name": OTHER_CONFIGMAP}, "data": {"a": "changed"}},
                )
            assert exists.value.conflict, exists.value

            own = await sa.request("GET", LEASE_PATH)
            await sa.request("PUT", LEASE_PATH, params=DRY_RUN, body=own)
            other = await admin.request("GET", LEASES.path("linkerd", OTHER_LEASE))
            denied = await forbidden(
                sa.request("PUT", LEASES.path("linkerd", OTHER_LEASE), params=DRY_RUN, body=other)
            )
            assert 'cannot update resource "leases"' in denied.message, denied.message
            denied = await forbidden(sa.request("GET", LEASES.path("linkerd", OTHER_LEASE)))
            assert 'cannot get resource "leases"' in denied.message, denied.message
        after = await admin.request("GET", CONFIGMAPS.path("linkerd", OTHER_CONFIGMAP))
        assert after["data"] == {"a": "b"} and not after["metadata"].get("annotations")
    finally:
        await admin.request("DELETE", CONFIGMAPS.path("linkerd", OTHER_CONFIGMAP))
        await admin.request("DELETE", LEASES.path("linkerd", OTHER_LEASE))
        await delete_lease(admin)


# -- 4. restarts only where it is bound ------------------------------------------------------

RBAC_KINDS = frozenset(
    {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"}
)
UNLISTED_NS = "rbac-unlisted"
LISTED_APP, UNLISTED_APP = "rbac-listed", "rbac-unlisted"


def identities(objs: list[Obj]) -> set[tuple[str, str, str]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs}


async def delete_bindings(kube: KubeClient, objs: list[Obj], keep: list[Obj]) -> None:
    """Delete the (Cluster)RoleBindings of ``objs`` that ``keep`` has not."""
    kept = identities(keep)
    for obj in objs:
        meta = obj["metadata"]
        if obj["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if (obj["kind"], meta.get("namespace", ""), meta["name"]) not in kept:
            path = RBAC_RESOURCES[obj["kind"]].path(meta.get("namespace"), meta["name"])
            await kube.request("DELETE", path)


async def app_pods(kube: KubeClient, namespace: str, app: str) -> list[Obj]:
    return [
        p
        for p in await scenario.running_pods(kube, namespace)
        if p["metadata"]["labels"].get("app") == app
    ]


async def stale_deployment(kube: KubeClient, namespace: str, name: str) -> set[str]:
    """A Deployment whose pod runs no proxy (made while the namespace was hidden from the
    injector), the namespace then shown again: stale, with an injectable template."""
    await set_hidden(kube, namespace, True)
    try:
        await scenario.wait_admits_pods(kube, namespace, injected=False)
        await scenario.create(
            kube, DEPLOYMENTS.path(namespace), scenario.deployment(name, opted_in=True, replicas=1)
        )

        async def running() -> list[Obj] | None:
            pods = await app_pods(kube, namespace, name)
            return pods if len(pods) == 1 else None

        (pod,) = await eventually(running, timeout=60, what=f"{namespace}/{name} running")
        assert mesh.proxy_version(pod) is None
    finally:
        await set_hidden(kube, namespace, False)
    await scenario.wait_admits_pods(kube, namespace, injected=True)
    return {pod["metadata"]["uid"]}


def template_annotations(obj: Obj) -> dict[str, str]:
    return obj["spec"]["template"]["metadata"].get("annotations") or {}


POD_NAMESPACES = (scenario.EMOJIVOTO, KINDS_NS, "default")
"""Workloads' namespaces, where the injector is asked, and one with none."""


async def test_what_rbac_cannot_name_the_admission_policy_refuses(
    world: World, baseline: None
) -> None:
    """Issue 39, finding 5, with manifests/rbac/least_privilege.yaml: as the ServiceAccount,
    a real pod in any namespace (RBAC allows, cluster-wide, the create that the injector's
    question, a dry run in each workload's own namespace, needs; and so a privileged pod with
    the host's filesystem) is refused, its dry run is not; a Lease of another name cannot be
    created; an Event not its own cannot be patched."""
    admin = world.admin
    pod: Obj = {
        "metadata": {"name": "rbac-probe"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    foreign: Obj = {
        "metadata": {"name": "rbac-foreign-event"},
        "involvedObject": {"kind": "Namespace", "name": "kube-system", "apiVersion": "v1"},
        "reason": "Other", "message": "not ours", "type": "Warning",
        "source": {"component": "someone-else"},
    }  # fmt: skip
    await scenario.create(admin, EVENTS.path("default"), foreign)
    try:
        async with as_service_account(world) as sa:

            async def refused(request: Callable[[], Awaitable[Obj]], said: str) -> None:
                async def attempt() -> str | None:  # the policy takes a moment to be in force
                    try:
                        await request()
                    except ApiError as exc:
                        return exc.message if said in exc.message else None
                    return None

                await eventually(attempt, timeout=30, what=said)

            for namespace in POD_NAMESPACES:
                create = Permission("ClusterRole", namespace, RESTART_ROLE, "", "pods", "create")
                assert await authorized(admin, create), create  # RBAC allows it: not the 403

                def real(namespace: str = namespace) -> Awaitable[Obj]:
                    return sa.request("POST", PODS.path(namespace), body=pod)

                await refused(real, "may only dry-run pods")
                await sa.request("POST", PODS.path(namespace), params=DRY_RUN, body=pod)
            await refused(
                lambda: sa.request(
                    "POST", LEASES.path("linkerd"), params=DRY_RUN,
                    body={"metadata": {"name": "rbac-not-its-own"}},
                ),
                "may create no Lease but its own",
            )  # fmt: skip
            await refused(
                lambda: sa.request(
                    "PATCH", EVENTS.path("default", "rbac-foreign-event"), params=DRY_RUN,
                    body={"message": "rewritten"}, content_type=MERGE_PATCH,
                ),
                "may change no Event but its own",
            )  # fmt: skip
        for namespace in POD_NAMESPACES:
            assert await get_or_none(admin, PODS.path(namespace, "rbac-probe")) is None
        event = await admin.request("GET", EVENTS.path("default", "rbac-foreign-event"))
        assert event["message"] == "not ours"
    finally:
        await admin.request("DELETE", EVENTS.path("default", "rbac-foreign-event"))


# -- what the restart may change, and what its Events may say --------------------------------

TEMPLATE_ONLY = "may change a workload's pod template only in its restart annotations"
SPEC_ONLY = "may change no field of a workload's spec but its pod template"
METADATA_ONLY = "may change a workload's metadata only in"
OWN_EVENTS = "may write only its own Events"
TARGETS = {
    "Deployment": (scenario.EMOJIVOTO, scenario.OPTED_IN[0]),
    "StatefulSet": (KINDS_NS, "kinds-statefulset"),
    "DaemonSet": (KINDS_NS, "kinds-daemonset"),
}
"""One real workload of each kind the restart patches (the world's)."""


def _pod_spec(patch: Obj) -> Obj:
    return {"spec": {"template": {"spec": patch}}}


def _containers(live: Obj) -> list[Obj]:
    containers: list[Obj] = copy.deepcopy(live["spec"]["template"]["spec"]["containers"])
    return containers


def _privileged(live: Obj) -> Obj:
    first, *rest = _containers(live)
    return _pod_spec({"containers": [{**first, "securityContext": {"privileged": True}}, *rest]})


def _image(live: Obj) -> Obj:
    first, *rest = _containers(live)
    return _pod_spec({"containers": [{**first, "image": "example.invalid/other:v1"}, *rest]})


def _extra_container(live: Obj) -> Obj:
    extra = {"name": "rbac-extra", "image": "example.invalid/extra:v1"}
    return _pod_spec({"containers": [*_containers(live), extra]})


def _restart_and(annotations: dict[str, str]) -> Callable[[Obj], Obj]:
    """The controller's own restart, with something else riding along in the template."""

    def patch(live: Obj) -> Obj:
        restart = mesh.restart_patch("rbac", live["metadata"]["resourceVersion"], time.time())
        restart["spec"]["template"]["metadata"]["annotations"].update(annotations)
        return restart

    return patch


ESCALATIONS: dict[str, tuple[Callable[[Obj], Obj], str]] = {
    "a privileged container": (_privileged, TEMPLATE_ONLY),
    "hostPID": (lambda _: _pod_spec({"hostPID": True}), TEMPLATE_ONLY),
    "the host's / mounted": (
        lambda _: _pod_spec({"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}),
        TEMPLATE_ONLY,
    ),
    "an admin's ServiceAccount": (
        lambda _: _pod_spec({"serviceAccountName": "some-admin"}),
        TEMPLATE_ONLY,
    ),
    "another image": (_image, TEMPLATE_ONLY),
    "an extra container": (_extra_container, TEMPLATE_ONLY),
    "a template label": (
        lambda _: {"spec": {"template": {"metadata": {"labels": {"rbac": "extra"}}}}},
        TEMPLATE_ONLY,
    ),
    "another template annotation, with a restart": (
        _restart_and({"linkerd.io/inject": "disabled"}),
        TEMPLATE_ONLY,
    ),
    "minReadySeconds": (lambda _: {"spec": {"minReadySeconds": 7}}, SPEC_ONLY),
    "an owner": (
        lambda _: {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "rbac-owner",
                        "uid": "00000000-0000-0000-0000-000000000001",
                    }
                ]
            }
        },
        METADATA_ONLY,
    ),
    "a label": (lambda _: {"metadata": {"labels": {"rbac": "extra"}}}, METADATA_ONLY),
    "another annotation": (
        lambda _: {"metadata": {"annotations": {"rbac.test/other": "x"}}},
        METADATA_ONLY,
    ),
    "a finalizer": (
        lambda _: {"metadata": {"finalizers": ["rbac.test/keep"]}},
        METADATA_ONLY,
    ),
}
"""What an attacker holding the ServiceAccount would patch (each kind), and the policy's
message that refuses it."""
SCALED: dict[str, tuple[Callable[[Obj], Obj], str]] = {
    "replicas": (lambda live: {"spec": {"replicas": live["spec"]["replicas"] + 1}}, SPEC_ONLY),
}
"""For the kinds that have replicas (a DaemonSet's patch would drop the unknown field)."""


def _undo_of(live: Obj) -> Obj:
    """What ``mesh.restore_patch`` sends: the previous ReplicaSet's template, which differs
    from the live one in the restart's annotations only (``rollback.only_restarted_since``)."""
    previous = copy.deepcopy(live["spec"]["template"])
    annotations = previous.setdefault("metadata", {}).setdefault("annotations", {})
    for key in (mesh.RESTARTED_FOR_ANNOTATION, mesh.RESTARTED_AT_ANNOTATION):
        annotations.pop(key, None)
    annotations[mesh.RESTARTED_FOR_ANNOTATION] = "rbac-previous"
    return mesh.restore_patch(live, previous, time.time())


async def policy_refusal(request: Awaitable[Obj]) -> str | None:
    """The admission policy's message refusing ``request``; None if it was allowed (or
    refused for another reason: then it is raised)."""
    try:
        await request
    except ApiError as exc:
        if "ValidatingAdmissionPolicy 'linkerd-config-least-privilege'" in exc.message:
            return exc.message
        raise
    return None


async def test_the_restart_may_change_its_annotations_only_and_its_events_say_only_its_own(
    world: World, baseline: None
) -> None:
    """Issue 61, finding 4, with manifests/rbac/least_privilege.yaml: as the ServiceAccount
    (server dry runs), a patch of a Deployment, a StatefulSet or a DaemonSet that would make
    it privileged, give it the host, another ServiceAccount, image or container, scale it,
    or change its labels, other annotations, owners or finalizers is refused, while the
    controller's own restart (``mesh.restart_patch``) and undo (``mesh.restore_patch``) are
    admitted; the scale and status subresources are not granted at all. A kubelet's Warning
    Event, an Event of its own in another namespace than its object's or about what it does
    not act on is refused; the Events ``kube/events.py`` writes (created, then counted) are
    admitted."""
    admin = world.admin
    await full_rbac(world)  # what RBAC grants, so that each refusal below is the policy's
    async with as_service_account(world) as sa:
        # The policy is in force (its oldest rule refuses), so each answer below is its own.
        probe: Obj = {
            "metadata": {"name": "rbac-probe"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }

        async def in_force() -> str | None:
            return await policy_refusal(sa.request("POST", PODS.path(KINDS_NS), body=probe))

        await eventually(in_force, timeout=30, what="the admission policy in force")

        async def patched(kind: str, patch_of: Callable[[Obj], Obj]) -> str | None:
            """The policy's refusal of ``patch_of(live)`` as a dry run, or None if admitted
            (a conflict, the workload's status written since it was read: read again)."""
            namespace, name = TARGETS[kind]
            path = WORKLOAD_RESOURCES[kind].path(namespace, name)

            async def attempt() -> tuple[str | None] | None:
                live = await admin.request("GET", path)
                request = sa.request(
                    "PATCH", path, params=DRY_RUN, body=patch_of(live), content_type=MERGE_PATCH
                )
                try:
                    return (await policy_refusal(request),)
                except ApiError as exc:
                    if exc.conflict:
                        return None
                    raise

            (said,) = await eventually(attempt, timeout=30, what=f"a patch of {kind} {name}")
            return said

        wrong: list[str] = []
        for kind, (namespace, name) in TARGETS.items():
            cases = {**ESCALATIONS, **(SCALED if kind != "DaemonSet" else {})}
            for what, (patch_of, message) in cases.items():
                said = await patched(kind, patch_of)
                if said is None or message not in said:
                    wrong.append(f"{kind}, {what}: {said or 'admitted'}")
            restart = await patched(
                kind,
                lambda live: mesh.restart_patch(
                    "rbac", live["metadata"]["resourceVersion"], time.time()
                ),
            )
            if restart is not None:
                wrong.append(f"{kind}, the controller's restart: {restart}")
            for subresource in ("scale", "status"):
                resource = WORKLOAD_RESOURCES[kind]
                path = resource.path(namespace, name, subresource)
                exc = await forbidden(
                    sa.request("PATCH", path, params=DRY_RUN, body={}, content_type=MERGE_PATCH)
                )
                assert f'cannot patch resource "{resource.plural}/{subresource}"' in exc.message
        undo = await patched("Deployment", _undo_of)
        if undo is not None:
            wrong.append(f"Deployment, the controller's undo: {undo}")

        pod_ref = {"kind": "Pod", "apiVersion": "v1", "name": "kube-proxy-x"}
        pod_ref["namespace"] = "kube-system"
        secret_ref = {**pod_ref, "kind": "Secret"}
        own = {"component": COMPONENT, "host": "rbac"}
        forged: dict[str, tuple[str, Obj]] = {
            "a kubelet's Warning about a kube-system pod": ("kube-system", {
                "involvedObject": pod_ref, "source": {"component": "kubelet", "host": "node"},
                "reportingComponent": "kubelet",
            }),
            "its own, about a LinkerdConfig, in kube-system": ("kube-system", {
                "involvedObject": {
                    "kind": "LinkerdConfig", "apiVersion": CONTROLLER_LINKERD_CONFIGS.api_version,
                    "name": CONFIG, "namespace": "kube-system",
                },
                "source": own, "reportingComponent": COMPONENT,
            }),
            "its own, about what it does not act on": ("kube-system", {
                "involvedObject": secret_ref,
                "source": own, "reportingComponent": COMPONENT,
            }),
            "its own, reported as another's": ("kube-system", {
                "involvedObject": pod_ref, "source": own, "reportingComponent": "kubelet",
            }),
        }  # fmt: skip
        for what, (namespace, fields) in forged.items():
            body = {
                "metadata": {"generateName": "rbac-forged-"},
                "type": "Warning", "reason": "Failed", "message": "forged",
                **fields,
            }  # fmt: skip
            said = await policy_refusal(
                sa.request("POST", EVENTS.path(namespace), params=DRY_RUN, body=body)
            )
            if said is None or OWN_EVENTS not in said:
                wrong.append(f"Event, {what}: {said or 'admitted'}")
        # In another namespace than its namespaced object's: the API server's own validation
        # refuses it before admission (the policy's rule stands behind it).
        elsewhere = {
            "metadata": {"generateName": "rbac-forged-"},
            "type": "Warning", "reason": "Failed", "message": "forged",
            "involvedObject": pod_ref, "source": own, "reportingComponent": COMPONENT,
        }  # fmt: skip
        with pytest.raises(ApiError, match=r"does not match event\.namespace"):
            await sa.request("POST", EVENTS.path("default"), params=DRY_RUN, body=elsewhere)

        # The Events the controller writes, by its own recorder: one on a workload (in its
        # namespace), one on the LinkerdConfig (cluster-scoped: in "default"), each repeated
        # once (a PATCH of its count).
        recorder = EventRecorder(sa, COMPONENT, instance="rbac-tests", series_interval=0.0)
        ds_namespace, ds_name = TARGETS["DaemonSet"]
        involved = [
            await admin.request("GET", DAEMONSETS.path(ds_namespace, ds_name)),
            await admin.request("GET", CONTROLLER_LINKERD_CONFIGS.path(name=CONFIG)),
        ]
        writer = asyncio.create_task(recorder.run())
        try:
            for _ in range(2):
                for obj in involved:
                    recorder.record(obj, "Normal", "RbacPolicyTest", "admitted")
                assert await recorder.flush(30.0)
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        if dict(recorder.stats) != {"created": 2, "patched": 2}:
            wrong.append(f"Events of kube/events.py: {dict(recorder.stats)}")
        for namespace, obj in zip((ds_namespace, "default"), involved, strict=True):
            written = [
                e
                for e in (await admin.request("GET", EVENTS.path(namespace)))["items"]
                if e["reason"] == "RbacPolicyTest"
                and e["involvedObject"]["name"] == obj["metadata"]["name"]
            ]
            assert [e["count"] for e in written] == [2], written
            for event in written:
                await admin.request("DELETE", EVENTS.path(namespace, event["metadata"]["name"]))
    assert wrong == [], "\n".join(wrong)


async def test_it_restarts_only_in_the_namespaces_restart_namespaces_lists(
    world: World, baseline: None
) -> None:
    admin = world.admin
    overlay = await render(world.cp, REPO / "manifests" / "restart-namespaces")
    rbac = [o for o in overlay if o["kind"] in RBAC_KINDS]
    (deployment,) = [o for o in overlay if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (flag,) = [a for a in args if a.startswith("--restart-namespace-selector=")]
    listed = {
        o["metadata"]["namespace"]
        for o in rbac
        if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == RESTART_ROLE
    }
    assert listed == {scenario.EMOJIVOTO}  # the shipped example: the README scenario's
    await create_namespace(admin, UNLISTED_NS, hidden=True)
    listed_before = await stale_deployment(admin, scenario.EMOJIVOTO, LISTED_APP)
    unlisted_before = await stale_deployment(admin, UNLISTED_NS, UNLISTED_APP)
    unlisted_path = DEPLOYMENTS.path(UNLISTED_NS, UNLISTED_APP)
    listed_path = DEPLOYMENTS.path(scenario.EMOJIVOTO, LISTED_APP)

    await delete_bindings(admin, world.rbac, keep=rbac)  # the cluster-wide restart binding
    await apply(admin, rbac)
    patch = Permission("ClusterRole", UNLISTED_NS, RESTART_ROLE, "apps", "deployments", "patch")

    async def bound_per_namespace() -> bool:
        here = Permission(
            "ClusterRole", scenario.EMOJIVOTO, RESTART_ROLE, "apps", "deployments", "patch"
        )
        return await authorized(admin, here) and not await authorized(admin, patch)

    await eventually(bound_per_namespace, timeout=10, what="the restart bound in emojivoto only")
    # What a restart sends (least_privilege.yaml admits no other change of a workload), with
    # no resourceVersion precondition: the workload's status may move meanwhile.
    restart = {"spec": mesh.restart_patch("rbac", "", time.time())["spec"]}
    try:
        async with as_service_account(world) as sa:
            denied = await forbidden(
                sa.request(
                    "PATCH", unlisted_path, params=DRY_RUN, body=restart, content_type=MERGE_PATCH
                )
            )
            assert patch.refusal in denied.message, denied.message
            await sa.request(
                "PATCH", listed_path, params=DRY_RUN, body=restart, content_type=MERGE_PATCH
            )

        await delete_lease(admin)
        async with controller(world, "rbac-restart-namespaces", flag, injector_wait=600) as run:

            async def listed_restarted() -> bool:
                obj = await admin.request("GET", listed_path)
                pods = await app_pods(admin, scenario.EMOJIVOTO, LISTED_APP)
                return (
                    mesh.RESTARTED_FOR_ANNOTATION in template_annotations(obj)
                    and len(pods) == 1
                    and not uids(pods) & listed_before
                    and mesh.proxy_version(pods[0]) == NEW
                )

            await eventually(listed_restarted, timeout=60, what=f"{listed_path} restarted")

            async def unlisted_untouched() -> bool:
                obj = await admin.request("GET", unlisted_path)
                pods = await app_pods(admin, UNLISTED_NS, UNLISTED_APP)
                return (
                    mesh.RESTARTED_FOR_ANNOTATION not in template_annotations(obj)
                    and uids(pods) == unlisted_before
                    and mesh.proxy_version(pods[0]) is None  # stale, and left so
                )

            await holds(unlisted_untouched, f"{unlisted_path} is not restarted", seconds=2 * HOLD)

            async def up_to_date() -> Obj | None:
                obj = await admin.request("GET", LINKERD_CONFIGS.path(name=CONFIG))
                status = obj.get("status") or {}
                return status if status.get("outdatedWorkloads") == 0 else None

            # Excluded, not outdated: nothing left to do for this controller.
            await eventually(up_to_date, timeout=30, what="no outdated workload in status")
            assert run.denials.seen == []  # it never asked where it may not
    finally:
        await delete_bindings(admin, rbac, keep=world.rbac)  # the RoleBinding in emojivoto
        await apply(admin, world.rbac)

        async def granted() -> bool:
            return await authorized(admin, patch)

        await eventually(granted, timeout=10, what="the restart bound cluster-wide again")
        await set_hidden(admin, UNLISTED_NS, True)
        await admin.request("DELETE", listed_path)
