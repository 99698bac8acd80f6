"""The install manifests: every kustomize base and overlay renders with kubectl's built-in
kustomize, the real API server accepts what they render (server-side dry-run), and the
rendered objects say what the controller needs (least-privilege RBAC, a hardened pod whose
flags, ports and paths match the controller's own settings)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import third_party_crds
from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CRDS, NAMESPACES, SERVICE_ACCOUNTS
from linkerd_config.linkerd.configmap.desired import desired_config, preserved_name
from linkerd_config.linkerd.mesh import NAMESPACE_NAME_LABEL, selected_for_restarts
from linkerd_config.linkerd.spec.crd import crd as linkerdconfig_crd
from linkerd_config.settings import Settings, parse
from tests.support import scenario
from tests.support.samples import SAMPLES, install_configmap, modern_install, sample
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
BASES = ("crd", "rbac", "manager", "webhook")
COMPONENTS = ("cert-manager", "prometheus", "secure-metrics")
OVERLAYS = (
    "default",
    "no-monitoring",
    "own-certs",
    "no-webhooks",
    "secure-metrics",
    "network-policy",
)
KUBECTL_TIMEOUT = 60.0
SA_USER = "system:serviceaccount:linkerd:linkerd-config"

Obj = dict[str, Any]


# -- kubectl ---------------------------------------------------------------------------------


async def kubectl(
    cp: LocalControlPlane, *args: str, stdin: bytes | None = None, cache_dir: Path | None = None
) -> str:
    """Run the control plane's kubectl (v1.34, kustomize built in); fail with its stderr."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cp.workdir)}
    argv = [str(cp.binary("kubectl")), *args]
    if cache_dir is not None:
        argv.append(f"--cache-dir={cache_dir}")
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), KUBECTL_TIMEOUT)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise AssertionError(f"kubectl {' '.join(args)}: no answer in {KUBECTL_TIMEOUT}s") from None
    if proc.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} exited {proc.returncode}:\n{err.decode(errors='replace')}"
        )
    return out.decode()


def component_objects(name: str) -> list[Obj]:
    """What a kustomize component adds (components cannot be rendered on their own)."""
    directory = MANIFESTS / "components" / name
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    return [
        doc
        for resource in kustomization.get("resources", [])
        for doc in yaml.safe_load_all((directory / resource).read_text())
        if doc
    ]


def overlay_dirs() -> list[str]:
    return [d for d in (*BASES, *OVERLAYS) if (MANIFESTS / d / "kustomization.yaml").exists()]


@pytest.fixture(scope="module")
async def rendered(control_plane: LocalControlPlane) -> dict[str, str]:
    """``kubectl kustomize`` of every base and overlay, rendered once for the module."""
    outputs = await asyncio.gather(
        *(kubectl(control_plane, "kustomize", str(MANIFESTS / d)) for d in overlay_dirs())
    )
    return dict(zip(overlay_dirs(), outputs, strict=True))


def objects(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def one(objs: list[Obj], kind: str, name: str, namespace: str | None = None) -> Obj:
    found = [
        o
        for o in objs
        if o["kind"] == kind
        and o["metadata"]["name"] == name
        and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def kinds(objs: list[Obj]) -> set[str]:
    return {o["kind"] for o in objs}


# -- rendering -------------------------------------------------------------------------------


def test_every_base_and_overlay_is_present() -> None:
    missing = [d for d in (*BASES, *OVERLAYS) if d not in overlay_dirs()]
    # manifests/webhook is another engineer's base; everything else is required here.
    assert missing in ([], ["webhook"]), missing


@pytest.mark.parametrize("overlay", [*BASES, *OVERLAYS])
def test_renders(rendered: dict[str, str], overlay: str) -> None:
    if overlay not in rendered:
        pytest.skip(f"manifests/{overlay} does not exist yet")
    objs = objects(rendered[overlay])
    assert objs, f"manifests/{overlay} renders nothing"
    for obj in objs:
        assert obj.get("apiVersion") and obj.get("kind") and obj["metadata"].get("name"), obj


def test_default_is_every_base_and_no_webhooks_drops_the_webhook_parts(
    rendered: dict[str, str],
) -> None:
    if "webhook" not in rendered:
        pytest.skip("manifests/webhook does not exist yet")
    everything = objects(rendered["default"])
    bases = [o for d in BASES for o in objects(rendered[d])]
    ids = sorted((o["kind"], o["metadata"]["name"]) for o in everything)
    in_default = ("cert-manager", "prometheus")
    added = {name: component_objects(name) for name in COMPONENTS}
    want = bases + [o for c in in_default for o in added[c]]
    assert ids == sorted((o["kind"], o["metadata"]["name"]) for o in want)
    secure = sorted((o["kind"], o["metadata"]["name"]) for o in objects(rendered["secure-metrics"]))
    assert secure == sorted(
        (o["kind"], o["metadata"]["name"]) for o in want + added["secure-metrics"]
    )
    # Each narrower overlay is default without what its name says.
    for overlay, without in (("no-monitoring", "prometheus"), ("own-certs", None)):
        dropped = set(in_default) if without is None else {without}
        expected = [o for o in want if all(o not in added[c] for c in dropped)]
        got = sorted((o["kind"], o["metadata"]["name"]) for o in objects(rendered[overlay]))
        assert got == sorted((o["kind"], o["metadata"]["name"]) for o in expected), overlay
    plain = objects(rendered["no-webhooks"])
    assert not kinds(plain) & {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "Issuer",
        "Certificate",
        "PodMonitor",
    }
    assert not any(
        o["kind"] == "Service" and o["metadata"]["name"] == "linkerd-config-webhook" for o in plain
    )


def test_overlays_keep_every_object_in_its_own_namespace(rendered: dict[str, str]) -> None:
    """No overlay may set `namespace:`: the events Role must stay in "default"."""
    for overlay in ("rbac", *(o for o in OVERLAYS if o in rendered)):
        objs = objects(rendered[overlay])
        events_role = one(objs, "Role", "linkerd-config-events")
        assert events_role["metadata"]["namespace"] == "default"
        assert one(objs, "RoleBinding", "linkerd-config-events")["metadata"]["namespace"] == (
            "default"
        )
        cluster_scoped = {
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        }
        # No namespace of our own (the injector is asked in each workload's namespace): a
        # Namespace would fall to the last branch, and fail it.
        for obj in objs:
            if obj["kind"] in cluster_scoped:
                assert "namespace" not in obj["metadata"], obj["metadata"]
            elif obj["metadata"]["name"] != "linkerd-config-events":
                assert obj["metadata"].get("namespace") == "linkerd", obj["metadata"]


# -- static checks: RBAC ---------------------------------------------------------------------


def test_rbac_is_least_privilege(rendered: dict[str, str]) -> None:
    objs = objects(rendered["rbac"])
    roles = [o for o in objs if o["kind"] in ("ClusterRole", "Role")]
    assert {(o["kind"], o["metadata"]["name"]) for o in roles} == {
        ("ClusterRole", "linkerd-config"),
        ("ClusterRole", "linkerd-config-restart"),
        ("Role", "linkerd-config"),
        ("Role", "linkerd-config-events"),
    }
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), (role["metadata"]["name"], rule)
                assert not any("*" in item for item in rule.get(key, [])), rule
            assert not {"secrets", "serviceaccounts/token"} & set(rule["resources"]), rule
            assert not {"escalate", "bind", "impersonate", "delete", "deletecollection"} & set(
                rule["verbs"]
            ), rule
            assert "nonResourceURLs" not in rule
    cluster = one(objs, "ClusterRole", "linkerd-config")
    assert not any("events" in r["resources"] for r in cluster["rules"]), (
        "events are written only in namespace default (a Role there), never cluster-wide"
    )
    # Pods are created (dry runs: the injector's question) in each workload's own namespace,
    # by the restart's ClusterRole (bound where it restarts), in a rule of their own; any
    # create that is not a dry run, least_privilege.yaml's policy refuses.
    creates = [
        (role["metadata"]["name"], rule)
        for role in roles
        for rule in role["rules"]
        if "pods" in rule["resources"] and "create" in rule["verbs"]
    ]
    assert creates == [
        ("linkerd-config-restart", {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]})
    ]
    policy = one(objs, "ValidatingAdmissionPolicy", "linkerd-config-least-privilege")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert {
        "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]
    } in spec["matchConstraints"]["resourceRules"]  # fmt: skip
    # The restart's patches and its Events, narrowed to what it writes (test_rbac.py shows
    # each escalation refused); the workloads' subresources neither matched nor granted.
    assert {
        "apiGroups": ["apps"], "apiVersions": ["v1"],
        "resources": ["deployments", "statefulsets", "daemonsets"], "operations": ["UPDATE"],
    } in spec["matchConstraints"]["resourceRules"]  # fmt: skip
    assert {
        "apiGroups": [""], "apiVersions": ["v1"], "resources": ["events"],
        "operations": ["CREATE", "UPDATE"],
    } in spec["matchConstraints"]["resourceRules"]  # fmt: skip
    assert not [
        r for role in roles for rule in role["rules"] for r in rule["resources"] if "/" in r
        and r.split("/")[0] in ("deployments", "statefulsets", "daemonsets")
    ]  # fmt: skip
    assert "namespaceSelector" not in spec["matchConstraints"]  # every namespace
    assert [c["expression"] for c in spec["matchConditions"]] == [
        f"request.userInfo.username == '{SA_USER}'"
    ]
    assert "request.resource.resource != 'pods' || request.dryRun == true" in [
        v["expression"] for v in spec["validations"]
    ]
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "linkerd-config-least-privilege")
    assert binding["spec"] == {
        "policyName": "linkerd-config-least-privilege",
        "validationActions": ["Deny"],
    }
    assert not kinds(objs) & {"Namespace"}, "no namespace of the controller's own"
    for binding in (o for o in objs if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "linkerd-config", "namespace": "linkerd"}
        ]
        role = one(objs, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        if role["kind"] == "Role":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
    one(objs, "ServiceAccount", "linkerd-config", "linkerd")


def written_configmaps() -> list[str]:
    """What the controller writes for a LinkerdConfig with the default ConfigMap, in either
    format (the target, what it writes beside it, what its injector needs) and the copies
    of each, as reconcile names them."""
    legacy = desired_config(
        sample("edge_19.12.3.yaml"), {"linkerd-config": dict(install_configmap()["data"])}
    )
    modern = desired_config(
        {"metadata": {"name": "modern"}, "spec": {"proxy": {"proxyVersion": "edge-26.8.4"}}},
        {d["metadata"]["name"]: dict(d["data"]) for d in modern_install()},
    )
    names: set[str] = set()
    for desired in (legacy, modern):
        for name in (desired.target.name, *desired.companions, *desired.depends_on):
            names |= {name, preserved_name(name)}
    return sorted(names)


def test_rbac_names_every_object_it_may_change_in_linkerd(rendered: dict[str, str]) -> None:
    """In Linkerd's namespace only create and the informers of ConfigMaps and of identity's
    Events are unnamed (RBAC cannot name a create, and a create never changes an existing
    object; list and watch change nothing); the rest names exactly the ConfigMaps the
    controller writes and its own Lease, as its defaults say."""
    role = one(objects(rendered["rbac"]), "Role", "linkerd-config", "linkerd")
    names: dict[tuple[str, str], list[str] | None] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                names[(resource, verb)] = rule.get("resourceNames")
    unnamed = {k for k, v in names.items() if v is None}
    assert unnamed == {
        ("configmaps", "list"),
        ("configmaps", "watch"),
        ("configmaps", "create"),
        ("leases", "create"),
        ("events", "list"),
        ("events", "watch"),
    }
    assert sorted(names[("configmaps", "patch")] or []) == written_configmaps()
    lease = parse([], {}).lease_name
    for verb in ("get", "list", "watch", "update"):
        assert names[("leases", verb)] == [lease], verb


async def test_restart_namespaces_binds_the_restart_where_the_controller_restarts(
    control_plane: LocalControlPlane, rendered: dict[str, str]
) -> None:
    """components/restart-namespaces: the cluster-wide restart binding replaced by
    RoleBindings, and the controller's --restart-namespace-selector selecting exactly the
    namespaces bound (the two lists the component asks you to keep together agree)."""
    overlay = objects(
        await kubectl(control_plane, "kustomize", str(MANIFESTS / "restart-namespaces"))
    )
    default = objects(rendered["default"])

    def ids(objs: list[Obj]) -> set[tuple[str, str, str]]:
        return {
            (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs
        }

    bindings = [
        o
        for o in overlay
        if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == "linkerd-config-restart"
    ]
    assert bindings
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "linkerd-config", "namespace": "linkerd"}
        ]
    assert ids(overlay) - ids(default) == ids(bindings)
    assert ids(default) - ids(overlay) == {("ClusterRoleBinding", "", "linkerd-config-restart")}

    args = one(overlay, "Deployment", "linkerd-config")["spec"]["template"]["spec"]["containers"][
        0
    ]["args"]
    assert args[0] == "run"
    selector = parse(args[1:], {}).restart_namespaces
    bound = {b["metadata"]["namespace"] for b in bindings}
    (requirement,) = selector.requirements
    assert (requirement.key, requirement.operator) == (NAMESPACE_NAME_LABEL, "in")
    assert set(requirement.values) == bound
    for namespace in (*bound, "kube-system", "linkerd", "default"):
        assert selected_for_restarts(namespace, None, selector) is (namespace in bound)
    assert parse([], {}).restart_namespaces.everything  # without it: every namespace


# -- static checks: the Deployment -----------------------------------------------------------


def test_deployment_is_hardened_and_matches_the_settings(rendered: dict[str, str]) -> None:
    objs = objects(rendered["manager"])
    dep = one(objs, "Deployment", "linkerd-config", "linkerd")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["linkerd.io/inject"] == "enabled"
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8080"
    assert annotations["prometheus.io/path"] == "/metrics"
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "linkerd-config"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    assert container["image"] == "linkerd-config:latest"
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["requests"] and container["resources"]["limits"]

    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"webhook": 9443, "metrics": 8080, "health": 8081}
    probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    for probe in probes.values():
        assert ports.get(probe["port"], probe["port"]) == 8081

    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # Installed beside Linkerd's control plane, it manages that namespace's ConfigMaps.
    assert env["LINKERD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert "ENABLE_WEBHOOKS" not in env

    # The args and environment are what the controller's own settings parser accepts, and
    # the ports and paths are the ones it serves on by default.
    assert container["args"][0] == "run"
    plain_env = {n: e["value"] for n, e in env.items() if "value" in e}
    plain_env.update(
        POD_NAME="linkerd-config-abc", POD_NAMESPACE="linkerd", LINKERD_NAMESPACE="linkerd"
    )
    settings = parse(container["args"][1:], env=plain_env)
    assert settings.leader_elect is True
    assert settings.namespace == "linkerd"
    assert settings.identity == "linkerd-config-abc"
    assert settings.enable_webhooks is True
    assert settings.webhook_address[1] == ports["webhook"]
    assert settings.metrics_address[1] == ports["metrics"]
    assert settings.health_address[1] == ports["health"]

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    certs = mounts["webhook-certs"]
    assert (
        certs["mountPath"]
        == Settings.__dataclass_fields__["webhook_cert_dir"].metadata["opt"].default
    )
    assert certs["readOnly"] is True
    secret = volumes["webhook-certs"]["secret"]
    assert secret["secretName"] == "linkerd-config-webhook-cert"
    assert secret["optional"] is True
    assert volumes[mounts["tmp"]["name"]]["emptyDir"] is not None
    assert mounts["tmp"]["mountPath"] == "/tmp"

    affinity = spec["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert affinity[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    pdb = one(objs, "PodDisruptionBudget", "linkerd-config", "linkerd")
    assert pdb["spec"]["minAvailable"] == 1
    labels = pod["metadata"]["labels"]
    for selector in (
        dep["spec"]["selector"]["matchLabels"],
        pdb["spec"]["selector"]["matchLabels"],
        one(objs, "Service", "linkerd-config-webhook")["spec"]["selector"],
        one(objs, "Service", "linkerd-config-metrics")["spec"]["selector"],
    ):
        assert selector.items() <= labels.items(), selector

    webhook_svc = one(objs, "Service", "linkerd-config-webhook")["spec"]["ports"]
    assert [(p["port"], ports[p["targetPort"]]) for p in webhook_svc] == [(443, 9443)]
    metrics_svc = one(objs, "Service", "linkerd-config-metrics")["spec"]["ports"]
    assert [(p["port"], ports[p["targetPort"]]) for p in metrics_svc] == [(8080, 8080)]


def test_no_webhooks_overlay_turns_the_webhooks_off(rendered: dict[str, str]) -> None:
    objs = objects(rendered["no-webhooks"])
    (container,) = one(objs, "Deployment", "linkerd-config")["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ENABLE_WEBHOOKS"] == "false"
    settings = parse(container["args"][1:], env={k: v for k, v in env.items() if v is not None})
    assert settings.enable_webhooks is False
    # Its CRD is make install's: the one whose v1alpha1 says in one line what to do while no
    # controller converts (a pod registers no conversion of its own: SERVE_CONVERSION auto).
    assert settings.serve_conversion == "auto"
    crd_obj = one(objs, "CustomResourceDefinition", "linkerdconfigs.config.linkerd.io")
    assert crd_obj == linkerdconfig_crd(local=True)
    default_crd = one(
        objects(rendered["default"]), "CustomResourceDefinition", "linkerdconfigs.config.linkerd.io"
    )
    assert default_crd == linkerdconfig_crd()


def test_webhook_and_prometheus_point_at_the_controller(rendered: dict[str, str]) -> None:
    if "webhook" not in rendered:
        pytest.skip("manifests/webhook does not exist yet")
    objs = objects(rendered["default"])
    pod = one(objs, "Deployment", "linkerd-config")["spec"]["template"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in (o for o in objs if o["kind"] == kind):
            for webhook in hook["webhooks"]:
                service = webhook["clientConfig"]["service"]
                assert (service["namespace"], service["name"]) == (
                    "linkerd",
                    "linkerd-config-webhook",
                )
                assert service.get("port", 443) == 443
    certificate = one(objs, "Certificate", "linkerd-config-serving-cert", "linkerd")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert certificate["spec"]["secretName"] == volumes["webhook-certs"]["secret"]["secretName"]
    assert "linkerd-config-webhook.linkerd.svc" in certificate["spec"]["dnsNames"]

    monitor = one(objs, "PodMonitor", "linkerd-config", "linkerd")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports


def test_samples_are_the_tested_fixtures() -> None:
    for name in ("edge_19.12.3.yaml", "edge_19.12.3_use_webhook_defaults.yaml"):
        assert (MANIFESTS / "samples" / name).read_bytes() == (SAMPLES / name).read_bytes()


def test_dockerfile_matches_the_deployment(rendered: dict[str, str]) -> None:
    text = (REPO / "Dockerfile").read_text()
    pod = one(objects(rendered["manager"]), "Deployment", "linkerd-config")["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] == str(container["securityContext"]["runAsUser"])
    assert re.search(r'^ENTRYPOINT \["linkerd-config"\]$', text, re.MULTILINE)
    assert re.search(r'^CMD \["run"\]$', text, re.MULTILINE)
    assert 'linkerd-config = "linkerd_config.cli:main"' in (REPO / "pyproject.toml").read_text()
    for base in re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE):
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base)


# -- the API server accepts them (server-side dry-run) ---------------------------------------


def real_third_party_crds() -> list[Obj]:
    """The real CRDs of the kinds our manifests use from other projects (the Prometheus
    Operator's PodMonitor, cert-manager's Issuer and Certificate), from their Go modules."""
    files = [
        third_party_crds.crd_path("podmonitors", third_party_crds.PROMETHEUS_OPERATOR),
        third_party_crds.crd_path("issuers", third_party_crds.CERT_MANAGER),
        third_party_crds.crd_path("certificates", third_party_crds.CERT_MANAGER),
    ]
    return [yaml.safe_load(path.read_text()) for path in files]


@pytest.fixture(scope="module")
async def dry_run_ready(kube: KubeClient) -> AsyncIterator[None]:
    """Namespace linkerd (Linkerd's, so not in our manifests) and the third-party CRDs, the
    real ones."""
    with contextlib.suppress(ApiError):
        await kube.request(
            "POST", NAMESPACES.path(), body={"metadata": {"name": "linkerd"}}, fenced=False
        )
    await kube.request("GET", NAMESPACES.path(name="linkerd"))
    created: list[str] = []
    crds = await asyncio.to_thread(real_third_party_crds)
    for crd in crds:
        try:
            await kube.request("POST", CRDS.path(), body=crd, fenced=False)
            created.append(crd["metadata"]["name"])
        except ApiError as exc:
            if not exc.conflict:
                raise
    for crd in crds:
        spec = crd["spec"]
        path = f"/apis/{spec['group']}/v1/namespaces/linkerd/{spec['names']['plural']}"

        async def served(path: str = path) -> bool:
            await kube.request("GET", path)
            return True

        await eventually(served, timeout=30, what=f"{crd['metadata']['name']} served")
    yield
    for name in created:
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", CRDS.path(name=name), fenced=False)


@pytest.mark.parametrize("overlay", [*BASES, *OVERLAYS])
async def test_api_server_accepts_a_dry_run(
    control_plane: LocalControlPlane,
    rendered: dict[str, str],
    dry_run_ready: None,
    tmp_path: Path,
    overlay: str,
    kube: KubeClient,
) -> None:
    if overlay not in rendered:
        pytest.skip(f"manifests/{overlay} does not exist yet")
    objs = objects(rendered[overlay])
    # The shared control plane's CRD converts through the tests' own webhook (a URL): apply's
    # merge would keep that URL beside the manifest's Service, which the API server refuses.
    # A cluster's CRD of the previous release has no webhook to merge with; here the CRD is
    # replaced (dry run), the rest applied.
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    rest = [o for o in objs if o["kind"] != "CustomResourceDefinition"]
    try:
        await kube.request("GET", CRDS.path(name="linkerdconfigs.config.linkerd.io"))
        crd_verb = "replace"
    except ApiError as exc:
        if not exc.not_found:
            raise
        crd_verb = "apply"
    out = ""
    for verb, docs in ((crd_verb, crds), ("apply", rest)):
        if docs:
            out += await kubectl(
                control_plane,
                verb,
                "--dry-run=server",
                f"--kubeconfig={control_plane.kubeconfig}",
                "-f",
                "-",
                stdin=yaml.safe_dump_all(docs).encode(),
                cache_dir=tmp_path / "kubectl-cache",
            )
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(objs), out
    assert all(line.endswith("(server dry run)") for line in lines), out
    for obj in objs:
        name = obj["metadata"]["name"]
        assert any(f"/{name} " in line for line in lines), (name, out)


async def test_pod_meets_the_restricted_pod_security_standard(
    rendered: dict[str, str], kube: KubeClient
) -> None:
    """The API server's own PodSecurity admission, enforcing "restricted", admits a pod made
    from the Deployment's template (dry-run). The namespace opts out of injectors, whose
    sidecar is theirs to harden, not ours."""
    namespace = "manifests-restricted-pss"
    with contextlib.suppress(ApiError):
        await kube.request(
            "POST",
            NAMESPACES.path(),
            body={
                "metadata": {
                    "name": namespace,
                    "labels": {
                        "pod-security.kubernetes.io/enforce": "restricted",
                        "pod-security.kubernetes.io/enforce-version": "latest",
                        "config.linkerd.io/admission-webhooks": "disabled",
                    },
                }
            },
            fenced=False,
        )
    try:
        # The pod runs as the manifests' ServiceAccount, which admission requires to exist.
        await scenario.create(
            kube, SERVICE_ACCOUNTS.path(namespace), {"metadata": {"name": "linkerd-config"}}
        )
        template = one(objects(rendered["manager"]), "Deployment", "linkerd-config")["spec"][
            "template"
        ]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **template["metadata"],
                "name": "linkerd-config-pss",
                "namespace": namespace,
            },
            "spec": template["spec"],
        }
        await kube.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", params={"dryRun": "All"}, body=pod
        )
        # And the check is real: the same pod without its hardening is refused.
        (container,) = pod["spec"]["containers"]
        weakened = {
            **pod,
            "spec": {
                **pod["spec"],
                "containers": [
                    {**container, "securityContext": {"allowPrivilegeEscalation": True}}
                ],
            },
        }
        with pytest.raises(ApiError) as refused:
            await kube.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/pods",
                params={"dryRun": "All"},
                body=weakened,
            )
        assert refused.value.status == 403
        assert "violates PodSecurity" in refused.value.message
    finally:
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", NAMESPACES.path(name=namespace))


# -- make render / deploy: the image a user names ----------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize(
    "image",
    ["registry.example:5000/team/linkerd-config:v0.2.0", "linkerd-config@sha256:" + "a" * 64],
)
async def test_make_render_sets_the_image_and_changes_nothing_else(
    control_plane: LocalControlPlane, rendered: dict[str, str], overlay: str, image: str
) -> None:
    """What `make deploy IMG=...` applies: the overlay, with only the controller's image set
    (kubebuilder's `make deploy IMG=`), without editing any checked-in file."""
    root = MANIFESTS.parent
    before = sorted(p.name for p in MANIFESTS.iterdir())
    done = await asyncio.to_thread(
        subprocess.run,
        ["make", "-s", "render", f"IMG={image}", f"OVERLAY={overlay}",
         f"KUBECTL={control_plane.binary('kubectl')}"],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ours, plain = objects(done.stdout), objects(rendered[overlay])
    deployment = one(ours, "Deployment", "linkerd-config")
    assert [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]] == [image]
    one(plain, "Deployment", "linkerd-config")["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] = image
    assert ours == plain
    assert sorted(p.name for p in MANIFESTS.iterdir()) == before  # the temporary overlay is gone


def test_one_scrape_path_per_overlay(rendered: dict[str, str]) -> None:
    """A PodMonitor, or the prometheus.io annotations: never both (scraped twice)."""
    for overlay in OVERLAYS:
        objs = objects(rendered[overlay])
        monitored = any(o["kind"] == "PodMonitor" for o in objs)
        template = one(objs, "Deployment", "linkerd-config")["spec"]["template"]["metadata"]
        annotated = "prometheus.io/scrape" in (template.get("annotations") or {})
        assert monitored != annotated, (overlay, monitored, annotated)


def test_secure_metrics_overlay_serves_https_where_everything_points(
    rendered: dict[str, str],
) -> None:
    """components/secure-metrics: the flags the controller parses, its port, the Service and
    the PodMonitor agree; the scraper's token comes from a ServiceAccount RBAC lets read."""
    objs = objects(rendered["secure-metrics"])
    dep = one(objs, "Deployment", "linkerd-config", "linkerd")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    settings = parse(container["args"][1:], env={"POD_NAME": "x", "POD_NAMESPACE": "linkerd"})
    assert settings.metrics_secure is True
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert settings.metrics_address[1] == ports["metrics"] == 8443
    (svc_port,) = one(objs, "Service", "linkerd-config-metrics")["spec"]["ports"]
    assert (svc_port["port"], svc_port["targetPort"]) == (8443, "metrics")
    (endpoint,) = one(objs, "PodMonitor", "linkerd-config")["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["scheme"]) == ("metrics", "https")
    secret = one(objs, "Secret", endpoint["bearerTokenSecret"]["name"], "linkerd")
    assert secret["type"] == "kubernetes.io/service-account-token"
    scraper = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    binding = one(objs, "ClusterRoleBinding", "linkerd-config-metrics-reader")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": scraper, "namespace": "linkerd"}
    ]
    reader = one(objs, "ClusterRole", binding["roleRef"]["name"])
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    auth = one(objs, "ClusterRoleBinding", "linkerd-config-metrics-auth")
    assert auth["subjects"] == [
        {"kind": "ServiceAccount", "name": "linkerd-config", "namespace": "linkerd"}
    ]
