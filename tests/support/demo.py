"""``make demo``: the original project's README scenario, then today's Linkerd, then its real
data plane rolled under live traffic, each on a local control plane.

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok; installs the
starting point (Linkerd edge-19.12.1's linkerd-config, Linkerd's real proxy injector built
from source, a kube-system-like namespace with webhooks disabled, emojivoto-like Deployments
injected by it); runs the controller with its webhooks registered on the API server; shows an
invalid object refused, the edge-19.12.3 LinkerdConfig applied, the controller waiting until
the injector really serves the new configuration (ConfigMap files reach it
``PROJECTION_DELAY`` seconds late, as the kubelet's do), the data plane rolled, the original
README's check, a manual edit reverted. Then the same story on a second control plane with
today's Linkerd (edge-26.8.3, installed from its own ``linkerd install`` output): a small
LinkerdConfig changes two Helm values, the rest of ``values`` kept, and the opted-in pods come
back with the new native-sidecar proxy; then the injector goes down while a pod is replaced
(it runs without the proxy), and once it is back the workload is re-meshed; then a broken
proxy (an admission policy refuses its
pods) is rolled out canary first with ``onFailure: Rollback``: the injector is asked about the
canary with its own pod in its own namespace, the answer is a refusal, so nothing is restarted;
refused new pods are no progress, and after ``progressDeadline`` the rollout fails and rolls
back: the ConfigMap goes back (the namespace's new pods are admitted again), and ``status``
says so. Then Linkerd's real data plane, on a third control plane with a real node (kubelet,
containerd): edge-26.8.3's own control plane (identity, destination, policy, the injector)
meshed on it, three opted-in server Deployments (two replicas, a PodDisruptionBudget each)
and a client (not opted in, the witness) sending to all three and counting every request. A
LinkerdConfig moves the proxy to edge-26.8.4 (the same binary under a second tag), one
workload a pass; every second the client's counter is printed beside the passes so far, each
server's pods on the old and the new proxy, and the rollout's ``DataPlaneUpToDate``. After:
every server pod on the new proxy, serving the client over mutual TLS (its proxy's own
metrics), and the client's count over the rollout, "N requests, 0 failed"; if any request
failed, the failures are printed and the demo fails. Stops everything.
Every step says what it does, and kubectl shows the results.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import yaml

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane, free_port
from devcluster.linkerd_install import render_install
from devcluster.proxy_injector import ProxyInjector
from linkerd_config.app import build, running
from linkerd_config.kube.certs import TinyCA, write_serving_pair
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.conditions import condition
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    PODS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from linkerd_config.linkerd.admission.webhooks import webhook_configurations
from linkerd_config.linkerd.formats.config_diff import diff
from linkerd_config.linkerd.mesh import PROXY_VERSION_ANNOTATION, RESTARTED_AT_ANNOTATION
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS
from linkerd_config.logs import configure_logging
from tests.support import mesh_traffic as mesh
from tests.support import scenario, unready_stage
from tests.support.audit import received_at, successful_writes
from tests.support.samples import INVALID, SAMPLES, why_invalid
from tests.support.waiting import eventually

PROJECTION_DELAY = 6.0
INTERVAL = 1.0
"""The demo controller's seconds between rollout passes (the default is 5) ..."""
PACE = ("--restart-interval", f"{INTERVAL:g}s")
"""... which plan and status are told, as a user gives them the controller's settings."""
"""Seconds before a ConfigMap change reaches the injector's files (a kubelet takes up to ~60)."""
ORIGINAL_README_CHECK = 'jsonpath={range .items[*]}{.spec.containers[1].image}{"\\n"}{end}'

BOLD, DIM, RESET = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")


def step(text: str) -> None:
    print(f"\n{BOLD}==> {text}{RESET}", flush=True)


class Shown:
    """A command shown to the reader as they would type it, then its output (and its exit
    status when not 0)."""

    def __init__(self, name: str, argv: list[str], kubeconfig: Path) -> None:
        self.name = name
        self.argv = argv
        self.kubeconfig = kubeconfig

    async def __call__(
        self, *args: str, check: bool = True, exits: tuple[int, ...] = (), within: float = 60.0
    ) -> str:
        """``check``: fail unless it exits 0 (or with one of ``exits``) within ``within``
        seconds."""
        print(f"{DIM}$ {self.name} {' '.join(args)}{RESET}", flush=True)
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        out, _ = await asyncio.wait_for(proc.communicate(), within)
        text = out.decode()
        print(text.rstrip(), flush=True)
        if proc.returncode:
            print(f"{DIM}# exit status {proc.returncode}{RESET}", flush=True)
        if check and proc.returncode not in (0, *exits):
            raise RuntimeError(f"{self.name} {' '.join(args)} failed ({proc.returncode})")
        return text


def kubectl_of(cp: LocalControlPlane) -> Shown:
    return Shown("kubectl", [str(cp.binary("kubectl"))], cp.kubeconfig)


def linkerd_config_of(cp: LocalControlPlane) -> Shown:
    """This project's command, as installed (``linkerd-config`` is ``python -m linkerd_config``)."""
    return Shown("linkerd-config", [sys.executable, "-m", "linkerd_config"], cp.kubeconfig)


PROXY_COLUMNS = (
    "custom-columns=NAMESPACE:.metadata.namespace,POD:.metadata.name,"
    "RECONCILE:.metadata.labels.config\\.linkerd\\.io/reconcile,"
    "PROXY:.metadata.annotations.linkerd\\.io/proxy-version"
)


@contextlib.asynccontextmanager
async def clients(cp: LocalControlPlane) -> AsyncIterator[tuple[Shown, Shown, KubeClient]]:
    """kubectl and linkerd-config (shown to the reader), and an API client (for waiting)."""
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="demo") as kube:
        yield kubectl_of(cp), linkerd_config_of(cp), kube


async def demo(cp: LocalControlPlane, workdir: Path) -> None:
    async with clients(cp) as (kubectl, linkerd_config, kube):
        step("The local control plane is serving")
        await kubectl("version")
        await kubectl("get", "nodes", "-o", "wide")

        step(
            "Starting point: Linkerd edge-19.12.1's linkerd-config, and Linkerd's real proxy "
            "injector (edge-19.12.3, built from source on first run)"
        )
        await scenario.install_crd(kube)
        await scenario.install_linkerd_edge_19_12_1(kube)
        ca = TinyCA("linkerd-config-demo-ca")
        async with scenario.linkerd_injector(
            cp, "edge-19.12.3", projection_delay=PROJECTION_DELAY
        ) as injector:
            print(
                f"proxy-injector on {injector.url}; its /var/run/linkerd/config is "
                f"{injector.config_dir}, updated {PROJECTION_DELAY:.0f}s after each change"
            )
            await kubectl(
                "get", "mutatingwebhookconfiguration", "linkerd-proxy-injector-webhook-config"
            )
            step(
                "emojivoto-like workloads (3 opted in with config.linkerd.io/reconcile=auto), "
                "and a kube-system-like namespace labelled admission-webhooks=disabled"
            )
            await scenario.install_workloads(kube)
            await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
            await scenario.wait_settled(kube, scenario.DISABLED_NS, expected=2)
            await kubectl("get", "pods", "-A", "-l", "app", "-o", PROXY_COLUMNS)
            print(f"{DIM}# the original README's check: each pod's proxy image{RESET}")
            await kubectl("-n", scenario.EMOJIVOTO, "get", "po", "-o", ORIGINAL_README_CHECK)

            step("Run the controller (leader election on, webhooks registered on the API server)")
            webhook_port = free_port()
            cert_dir = workdir / "webhook"
            webhook_ca = write_serving_pair(cert_dir, ["localhost"], ["127.0.0.1"], ca)
            settings = scenario.local_settings(
                cp.kubeconfig,
                "--enable-webhooks",
                "true",
                "--webhook-bind-address",
                f"127.0.0.1:{webhook_port}",
                "--webhook-cert-dir",
                str(cert_dir),
                "--identity",
                "demo-controller",
            )
            app = await build(settings, RolloutOptions(restart_interval=INTERVAL))
            async with running(app):
                assert app.admission is not None
                await asyncio.wait_for(app.admission.started.wait(), 30)
                for config in webhook_configurations(
                    webhook_ca, f"https://127.0.0.1:{webhook_port}", None
                ):
                    await scenario.create(kube, _collection(config), config)
                await eventually(
                    lambda: asyncio.sleep(0, result=app.manager.leading),
                    timeout=60,
                    what="controller leading",
                )

                step("Invalid LinkerdConfigs are refused: by the CRD schema, then by our webhook")
                for name in ("bad_ports.yaml", "expired_trust_anchor.yaml"):
                    bad = next(p for p in INVALID if p.name == name)
                    print(f"{DIM}# {why_invalid(bad)}{RESET}")
                    await kubectl("apply", "-f", str(bad), check=False)

                sample_path = str(SAMPLES / "edge_19.12.3.yaml")
                step(
                    "Look before applying: what the edge-19.12.3 LinkerdConfig would change and "
                    "restart (exit 2: changes)"
                )
                await linkerd_config("plan", "-f", sample_path, *PACE, exits=(2,))

                step("Apply the edge-19.12.3 LinkerdConfig (the original README's sample)")
                started = time.monotonic()
                await kubectl("apply", "-f", sample_path)
                print(
                    f"{DIM}# the injector sees the new config only {PROJECTION_DELAY:.0f}s "
                    f"later; until then the controller restarts nothing:{RESET}"
                )
                await asyncio.sleep(PROJECTION_DELAY / 2)
                await kubectl(
                    "get",
                    "linkerdconfig",
                    "edge-19.12.3",
                    "-o",
                    'jsonpath={range .status.conditions[?(@.type=="DataPlaneUpToDate")]}'
                    '{.reason}: {.message}{"\\n"}{end}',
                )
                await kubectl(
                    "wait", "linkerdconfig/edge-19.12.3", "--for=condition=Ready", "--timeout=180s"
                )
                print(f"Ready after {time.monotonic() - started:.1f}s")
                await kubectl("get", "linkerdconfig")
                await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)

                step("The data plane against the configuration (exit 0: all up to date)")
                await linkerd_config("status", *PACE)
                print(f"{DIM}# and the same plan again: nothing left to do{RESET}")
                await linkerd_config("plan", "-f", sample_path, *PACE)

                step("The ConfigMap now says edge-19.12.3; its install key is untouched")
                await kubectl(
                    "get",
                    "configmap",
                    "linkerd-config",
                    "-n",
                    "linkerd",
                    "-o",
                    "go-template={{range $k, $v := .data}}{{$k}}: {{$v}}{{end}}",
                )

                step("Opted-in pods were restarted onto proxy edge-19.12.3; the others were not")
                await kubectl("get", "pods", "-A", "-l", "app", "-o", PROXY_COLUMNS)
                print(f"{DIM}# the original README's check (vote-bot is not opted in){RESET}")
                await kubectl("-n", scenario.EMOJIVOTO, "get", "po", "-o", ORIGINAL_README_CHECK)
                print(timeline(cp, injector))

                step("Events")
                await kubectl(
                    "get",
                    "events",
                    "-n",
                    "default",
                    "--field-selector",
                    "involvedObject.kind=LinkerdConfig",
                )

                step("A manual edit of the proxy config is reverted")
                await kubectl(
                    "patch",
                    "configmap",
                    "linkerd-config",
                    "-n",
                    "linkerd",
                    "--type=merge",
                    "-p",
                    '{"data":{"proxy":"{}"}}',
                )
                await asyncio.sleep(1)
                await kubectl(
                    "get",
                    "configmap",
                    "linkerd-config",
                    "-n",
                    "linkerd",
                    "-o",
                    "jsonpath={.data.proxy}",
                )
                print()
                await kubectl(
                    "get",
                    "linkerdconfig",
                    "edge-19.12.3",
                    "-o",
                    "jsonpath={range .status.conditions[*]}{.type}={.status} "
                    '({.reason}){"\\n"}{end}',
                )

                step("Stopping the controller and the control plane")
            for config in webhook_configurations(webhook_ca, "https://127.0.0.1", None):
                await kube.request("DELETE", f"{_collection(config)}/{config['metadata']['name']}")


MODERN_TAG = "edge-26.8.3"
MODERN_CONFIG = {
    "apiVersion": "config.linkerd.io/v1alpha1",
    "kind": "LinkerdConfig",
    "metadata": {"name": "linkerd"},
    "spec": {"proxy": {"proxyVersion": "edge-26.8.4", "logLevel": "debug"}},
}
NATIVE_SIDECAR_COLUMNS = (
    "custom-columns=POD:.metadata.name,"
    "RECONCILE:.metadata.labels.config\\.linkerd\\.io/reconcile,"
    'PROXY:.spec.initContainers[?(@.name=="linkerd-proxy")].image'
)


async def demo_modern(cp: LocalControlPlane, workdir: Path) -> None:
    """The same story with today's Linkerd: the Helm ``values`` key, a native sidecar."""
    async with clients(cp) as (kubectl, linkerd_config, kube):
        step(
            f"Starting point: Linkerd {MODERN_TAG}'s own `linkerd install --ignore-cluster` "
            "(linkerd-config with its Helm values, the trust roots) and its real proxy injector"
        )
        install = await asyncio.to_thread(render_install, MODERN_TAG)
        await scenario.install_crd(kube)
        await scenario.install_linkerd(kube, install)
        installed = yaml.safe_load(install.get("ConfigMap", "linkerd-config")["data"]["values"])
        async with scenario.linkerd_injector(
            cp,
            MODERN_TAG,
            projection_delay=PROJECTION_DELAY,
            webhook_template=install.injector_webhook,
        ) as injector:
            await scenario.install_workloads(kube)
            await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
            print(f"{DIM}# a native sidecar: the proxy is an init container{RESET}")
            await kubectl("-n", scenario.EMOJIVOTO, "get", "po", "-o", NATIVE_SIDECAR_COLUMNS)

            step("Run the controller; apply a LinkerdConfig as small as a user would write")
            settings = scenario.local_settings(cp.kubeconfig, "--identity", "demo-modern")
            app = await build(settings, RolloutOptions(restart_interval=INTERVAL))
            async with running(app):
                path = workdir / "modern.yaml"
                path.write_text(yaml.safe_dump(MODERN_CONFIG, sort_keys=False))
                print(path.read_text(), end="")
                await linkerd_config("plan", "-f", str(path), *PACE, exits=(2,))
                started = time.monotonic()
                await kubectl("apply", "-f", str(path))
                await kubectl(
                    "wait", "linkerdconfig/linkerd", "--for=condition=Ready", "--timeout=180s"
                )
                print(f"Ready after {time.monotonic() - started:.1f}s")
                await kubectl("get", "linkerdconfig")
                await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)

                await linkerd_config("status", *PACE)

                step("Two Helm values changed; every other value and key kept")
                cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
                values = yaml.safe_load(cm["data"]["values"])
                for change in diff(installed, values):
                    print(f"{change.path}: {change.before!r} → {change.after!r}")
                kept = sum(values.get(key) == value for key, value in installed.items())
                print(f"top-level values identical to the install: {kept} of {len(installed)}")
                other_keys = sorted(k for k in cm["data"] if k != "values")
                same = all(cm["data"][k] == install.configmaps[0]["data"][k] for k in other_keys)
                print(f"other keys ({', '.join(other_keys)}) byte for byte: {same}")

                step("Opted-in pods restarted onto the new proxy; vote-bot was not")
                await kubectl("-n", scenario.EMOJIVOTO, "get", "po", "-o", NATIVE_SIDECAR_COLUMNS)
                print(timeline(cp, injector))
                await re_mesh_act(kubectl, linkerd_config, kube, injector)
                await broken_proxy_act(kubectl, linkerd_config, kube, workdir)
                step("Stopping the controller and the control plane")


async def re_mesh_act(
    kubectl: Shown, linkerd_config: Shown, kube: KubeClient, injector: ProxyInjector
) -> None:
    """Linkerd's injector down while a pod is created (an upgrade of it, a crash; its webhook
    is ``failurePolicy: Ignore``, as Linkerd renders it): the pod runs without the proxy, as in
    linkerd2 #5070. Nothing restarts while the injector is down (asked, in the pod's own
    namespace, it injects nothing); once it injects there again, the workload is re-meshed."""
    step(
        "Linkerd's injector goes down (its webhook fails open, as Linkerd renders it), and a "
        "pod of emoji is replaced meanwhile (a node drained): it comes back without the proxy"
    )
    await asyncio.to_thread(injector.down)
    pods = await scenario.running_pods(kube, scenario.EMOJIVOTO)
    emoji = sorted(n for p in pods if (n := p["metadata"]["name"]).startswith("emoji-"))
    await kubectl("-n", scenario.EMOJIVOTO, "delete", "pod", emoji[0], "--wait=false")

    async def unmeshed() -> bool:
        running = await scenario.running_pods(kube, scenario.EMOJIVOTO)
        return len(running) == 8 and any(scenario.proxy_container(p) is None for p in running)

    await eventually(unmeshed, timeout=60, what="a pod of emoji running without the proxy")
    await kubectl("-n", scenario.EMOJIVOTO, "get", "po", "-o", NATIVE_SIDECAR_COLUMNS)
    print(
        f"{DIM}# the controller asks the injector about emoji's own pod in emojivoto: no "
        f"proxy comes back, so nothing is restarted while it is down{RESET}"
    )
    await asyncio.sleep(3 * INTERVAL)
    await kubectl("get", "linkerdconfig", "linkerd", "-o", UP_TO_DATE_MESSAGE)

    step("The injector is back: emoji is re-meshed (restarted once more, under the same gate)")
    await asyncio.to_thread(injector.up)

    async def meshed() -> bool:
        running = await scenario.running_pods(kube, scenario.EMOJIVOTO)
        all_pods = (await kube.request("GET", PODS.path(scenario.EMOJIVOTO)))["items"]
        return len(running) == 8 == len(all_pods) and all(
            scenario.proxy_container(p) is not None for p in running
        )

    await eventually(meshed, timeout=120, what="every emojivoto pod meshed again")
    await kubectl(
        "wait", "linkerdconfig/linkerd", "--for=condition=Ready", "--timeout=120s", within=130
    )
    await kubectl("-n", scenario.EMOJIVOTO, "get", "po", "-o", NATIVE_SIDECAR_COLUMNS)
    await kubectl(
        "get", "events", "-n", scenario.EMOJIVOTO, "--field-selector=reason=WorkloadRestarted",
        "--sort-by=.lastTimestamp", "-o",
        "custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message",
    )  # fmt: skip
    await linkerd_config("status", *PACE)


BROKEN_PROXY = "edge-26.8.9"
BROKEN_CONFIG = {
    **MODERN_CONFIG,
    "spec": {
        "proxy": {"proxyVersion": BROKEN_PROXY, "logLevel": "debug"},
        "rollout": {
            "onFailure": "Rollback",
            "canary": {"count": 1, "stableFor": "30s"},
            "progressDeadline": "1m",
        },
    },
}
ROLLED_BACK = (
    '--for=jsonpath={.status.conditions[?(@.type=="DataPlaneUpToDate")].reason}=RolledBack'
)
UP_TO_DATE_MESSAGE = (
    'jsonpath={range .status.conditions[?(@.type=="DataPlaneUpToDate")]}'
    '{.reason}: {.message}{"\\n"}{end}'
)


async def broken_proxy_act(
    kubectl: Shown, linkerd_config: Shown, kube: KubeClient, workdir: Path
) -> None:
    """A proxy whose pods cannot be admitted (an admission policy stands in for one that
    cannot start): the canary's own pod, asked about in its own namespace, is refused, so
    nothing is restarted; refused for ``progressDeadline``, the rollout fails and goes back."""
    step(
        f"A broken proxy ({BROKEN_PROXY}: a ValidatingAdmissionPolicy refuses its pods in "
        "emojivoto), rolled out canary first, with onFailure: Rollback and progressDeadline: 1m"
    )
    async with scenario.proxy_refused(kube, scenario.EMOJIVOTO, BROKEN_PROXY):
        path = workdir / "broken.yaml"
        path.write_text(yaml.safe_dump(BROKEN_CONFIG, sort_keys=False))
        print(path.read_text(), end="")
        started = time.monotonic()
        await kubectl("apply", "-f", str(path))
        print(
            f"{DIM}# before restarting the canary, the injector is asked about its own pod in "
            f"its own namespace: admission refuses it, so nothing is restarted; refused new "
            f"pods are no progress, not a wait without end{RESET}"
        )
        await eventually(
            lambda: refusal_said(kube), timeout=60, what="the refusal said in DataPlaneUpToDate"
        )
        await kubectl("get", "linkerdconfig", "linkerd", "-o", UP_TO_DATE_MESSAGE)
        await kubectl("wait", "linkerdconfig/linkerd", ROLLED_BACK, "--timeout=180s", within=200)
        print(f"Rolled back after {time.monotonic() - started:.1f}s")
        step(
            "Refused past progressDeadline: the rollout failed and rolled back, the ConfigMap "
            "is back on the last completed proxy (emojivoto's new pods are admitted again); "
            "status says so, and exits 2"
        )
        cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
        version = yaml.safe_load(cm["data"]["values"])["proxy"]["image"]["version"]
        print(f"linkerd-config's values: proxy.image.version = {version}")
        if version == BROKEN_PROXY:
            raise RuntimeError(f"the ConfigMap still says {BROKEN_PROXY} after the rollback")
        await linkerd_config("status", *PACE, exits=(2,))
        await kubectl(
            "get", "events", "-A", "--sort-by=.lastTimestamp",
            "--field-selector=type=Warning", "-o",
            "custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message",
        )  # fmt: skip
        print(f"{DIM}# every opted-in pod still on the proxy of the last completed rollout{RESET}")
        await kubectl("-n", scenario.EMOJIVOTO, "get", "po", "-o", NATIVE_SIDECAR_COLUMNS)


async def refusal_said(kube: KubeClient) -> bool:
    """Whether the LinkerdConfig's DataPlaneUpToDate says its new pods are refused."""
    found = await kube.request("GET", LINKERD_CONFIGS.path(name="linkerd"))
    said = condition(found.get("status") or {}, "DataPlaneUpToDate") or {}
    message = str(said.get("message"))
    return said.get("reason") == "WaitingForInjector" and "no progress" in message


REAL_NAMESPACE = "shop"
REAL_SERVERS = 3
REAL_CONFIG = {
    **MODERN_CONFIG,
    "spec": {"proxy": {"proxyVersion": mesh.ROLLED}, "rollout": {"maxRestartsPerPass": 1}},
}
ENOUGH = 100
"""Requests the client sends before the rollout starts, and after it is Ready."""
MESH_COLUMNS = (
    "custom-columns=POD:.metadata.name,NODE:.spec.nodeName,IP:.status.podIP,"
    'READY:.status.conditions[?(@.type=="Ready")].status,'
    "RECONCILE:.metadata.labels.config\\.linkerd\\.io/reconcile,"
    "PROXY:.metadata.annotations.linkerd\\.io/proxy-version"
)


async def real_data_plane_act(cp: LocalControlPlane, workdir: Path) -> None:
    """Linkerd's own control plane and meshed pods on the real node (kubelet, containerd):
    three opted-in servers under a client's live traffic; the controller rolls a proxy
    upgrade across them one workload a pass, and the client counts every request meanwhile.
    Fails (after printing them) if any request failed."""
    async with clients(cp) as (kubectl, linkerd_config, kube):
        step(
            f"Linkerd {MODERN_TAG}'s own control plane on the real node (identity, destination, "
            f"policy, the proxy injector); {REAL_SERVERS} opted-in servers (2 replicas and a "
            "PodDisruptionBudget each) and a client (not opted in) sending to all of them, "
            "counting every request"
        )
        servers = await asyncio.to_thread(mesh.start_rollout_mesh, cp, REAL_NAMESPACE, REAL_SERVERS)
        await scenario.install_crd(kube)
        await kubectl("get", "nodes", "-o", "wide")
        await kubectl("-n", "linkerd", "get", "deploy")
        await kubectl("-n", REAL_NAMESPACE, "get", "po", "-o", MESH_COLUMNS)
        warm = await mesh.traffic_beyond(cp, REAL_NAMESPACE, ENOUGH)
        print(f"the client: {warm.total} requests so far, {warm.failed} failed")

        step(
            f"Run the controller; move the proxy to {mesh.ROLLED} (the same binary under a "
            "second tag), one workload per pass"
        )
        async with scenario.controller(
            cp, "demo-real-node", restart_interval=INTERVAL, injector_wait=120
        ):
            path = workdir / "real-node.yaml"
            path.write_text(yaml.safe_dump(REAL_CONFIG, sort_keys=False))
            print(path.read_text(), end="")
            await linkerd_config("plan", "-f", str(path), *PACE, exits=(2,))
            before = await asyncio.to_thread(mesh.client_counts, cp, REAL_NAMESPACE)
            await kubectl("apply", "-f", str(path))
            print(
                f"{DIM}# the injector reads linkerd-config from its ConfigMap volume, which the "
                f"kubelet updates some seconds later: until the injector injects "
                f"{mesh.ROLLED}, nothing is restarted{RESET}"
            )
            rolled_in = await watch_rollout(cp, kube, servers, before)
            print(f"Ready after {rolled_in:.1f}s")
            at_ready = await asyncio.to_thread(mesh.client_counts, cp, REAL_NAMESPACE)
            after = await mesh.traffic_beyond(cp, REAL_NAMESPACE, at_ready.total + ENOUGH)

            step(f"Every server pod replaced, on {mesh.ROLLED}, serving the client over mTLS")
            await mesh.serving_on_mtls(cp, REAL_NAMESPACE, servers, mesh.ROLLED)
            await eventually(
                lambda: asyncio.to_thread(drained, cp),
                timeout=60,
                what="the old pods gone (each drains before it stops)",
            )
            await kubectl("-n", REAL_NAMESPACE, "get", "po", "-o", MESH_COLUMNS)
            print(
                f"{DIM}# each of the {2 * len(servers)} server pods' proxies counts the client's "
                f"requests (identity {mesh.identity(REAL_NAMESPACE, 'client')}) on "
                f'tls="true", and none without; one of them:{RESET}'
            )
            print(mtls_line(cp, servers[0]))
            await linkerd_config("status", *PACE)
        report_traffic(before, after)


async def watch_rollout(
    cp: LocalControlPlane, kube: KubeClient, servers: list[str], before: mesh.Counts
) -> float:
    """Every second until the LinkerdConfig is Ready: the client's requests since ``before``
    beside each server's pods on the old and new proxy, and the rollout's DataPlaneUpToDate
    whenever it changes. The seconds it took."""
    print(
        f"{DIM}# each second, since the apply: the rollout's passes so far, the client's "
        f"requests sent and failed, each server's pods on the old proxy and on "
        f"{mesh.ROLLED} (ready){RESET}"
    )
    started = time.monotonic()
    said = ""
    while not await scenario.ready(kube, "linkerd"):
        elapsed = time.monotonic() - started
        if elapsed > 300:
            raise RuntimeError("the rollout was not Ready within 300s")
        cond = await scenario.condition(kube, "linkerd", "DataPlaneUpToDate")
        now = f"{cond.get('reason')}: {cond.get('message')}" if cond.get("reason") else ""
        if now != said:
            print(f"{DIM}  DataPlaneUpToDate {now}{RESET}")
            said = now
        counts = await asyncio.to_thread(mesh.client_counts, cp, REAL_NAMESPACE)
        pods = [f"{name} {await asyncio.to_thread(old_and_new, cp, name)}" for name in servers]
        passes = await asyncio.to_thread(passes_made, cp)
        print(
            f"{elapsed:5.1f}s  pass {passes}  {counts.total - before.total:5d} sent, "
            f"{counts.failed - before.failed} failed   {'   '.join(pods)}",
            flush=True,
        )
        await asyncio.sleep(1)
    return time.monotonic() - started


def old_and_new(cp: LocalControlPlane, server: str) -> str:
    """How many of the server's pods run the old proxy, and the new one (ready or not)."""
    found = mesh.pods(cp, REAL_NAMESPACE, server)
    new = [
        p
        for p in found
        if p["metadata"]["annotations"].get(PROXY_VERSION_ANNOTATION) == mesh.ROLLED
    ]
    ready = sum(unready_stage.is_ready(p) for p in new)
    starting = f" (+{len(new) - ready} starting)" if len(new) > ready else ""
    return f"old {len(found) - len(new)} new {ready}{starting}"


def passes_made(cp: LocalControlPlane) -> int:
    """The controller's passes so far: the distinct times it stamped on the Deployments."""
    listed = cp.api_request("GET", f"/apis/apps/v1/namespaces/{REAL_NAMESPACE}/deployments")
    stamps = {
        (d["spec"]["template"]["metadata"].get("annotations") or {}).get(RESTARTED_AT_ANNOTATION)
        for d in listed["items"]
    }
    return len(stamps - {None})


def drained(cp: LocalControlPlane) -> bool:
    """No pod of the namespace is still terminating."""
    listed = cp.api_request("GET", f"/api/v1/namespaces/{REAL_NAMESPACE}/pods")
    return not any(p["metadata"].get("deletionTimestamp") for p in listed["items"])


def mtls_line(cp: LocalControlPlane, server: str) -> str:
    """One of the server's proxies' own count of the client's requests, on mTLS."""
    pod = mesh.pods(cp, REAL_NAMESPACE, server)[0]
    client = mesh.identity(REAL_NAMESPACE, "client")
    for line in mesh.proxy_metrics(pod).splitlines():
        if (
            line.startswith("request_total{")
            and 'direction="inbound"' in line
            and f'client_id="{client}"' in line
        ):
            return f"{DIM}# {pod['metadata']['name']}'s proxy, its :4191/metrics:{RESET}\n{line}"
    raise RuntimeError(f"{pod['metadata']['name']}'s proxy counts no request from {client}")


def report_traffic(before: mesh.Counts, after: mesh.Counts) -> None:
    """The client's requests from the apply until ``ENOUGH`` after Ready; any failure (since
    the client started) printed, and the demo fails."""
    step("The client's count over the rollout (from the apply until after Ready)")
    for failure in after.failures:
        print(f"{failure.time:%H:%M:%S.%f} {failure.target}: {failure.error}")
    print(
        f"{BOLD}{after.total - before.total} requests, {after.failed - before.failed} failed{RESET}"
    )
    if after.failed:
        raise RuntimeError(f"{after.failed} of the client's requests failed")


def timeline(cp: LocalControlPlane, injector: ProxyInjector) -> str:
    """When the ConfigMap was written, the injector got it, and the restarts began."""
    agent = "linkerd-config/"
    written = received_at(successful_writes(cp, "patch", "configmaps", "linkerd", agent)[-1])
    projected = float(injector.projections()[-1]["projected_at"])
    restarts = successful_writes(cp, "patch", "deployments", scenario.EMOJIVOTO, agent)
    first = received_at(restarts[0]) - written if restarts else float("nan")
    return (
        f"ConfigMap written at 0.0s; injector's files updated at {projected - written:.1f}s; "
        f"first of {len(restarts)} restarts at {first:.1f}s (audit log)"
    )


def _collection(config: dict[str, object]) -> str:
    resources = (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS)
    return next(r for r in resources if r.kind == config["kind"]).path()


def main() -> int:
    configure_logging("warning", "console")
    started = time.monotonic()
    step("Starting the local control plane (etcd, kube-apiserver, KCM, scheduler, kwok)")
    with (
        LocalControlPlane(ControlPlaneOptions(workloads=True)) as cp,
        tempfile.TemporaryDirectory(prefix="linkerd-config-demo-") as tmp,
    ):
        print(f"API server {cp.server}; kubeconfig {cp.kubeconfig}")
        asyncio.run(demo(cp, Path(tmp)))
    step(f"The same story on today's Linkerd ({MODERN_TAG}), on a fresh control plane")
    with (
        LocalControlPlane(ControlPlaneOptions(workloads=True)) as cp,
        tempfile.TemporaryDirectory(prefix="linkerd-config-demo-") as tmp,
    ):
        asyncio.run(demo_modern(cp, Path(tmp)))
    step(
        "Linkerd's real data plane, on a fresh control plane with a real node (kubelet, "
        "containerd): a proxy upgrade rolled under live traffic"
    )
    act = time.monotonic()
    with (
        LocalControlPlane(ControlPlaneOptions(real_node=True)) as cp,
        tempfile.TemporaryDirectory(prefix="linkerd-config-demo-") as tmp,
    ):
        asyncio.run(real_data_plane_act(cp, Path(tmp)))
    step(
        f"Done in {time.monotonic() - started:.0f}s (the real data plane's act "
        f"{time.monotonic() - act:.0f}s); nothing left running"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
