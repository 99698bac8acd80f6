"""Scale: the controller side by side with the physical limit and with kopf, in one run,
interleaved, on one local control plane (etcd + kube-apiserver; the pods are bound to a node
that does not exist and marked Running by the bench, so nothing else uses the CPU).

At each scale point (``--pods``, growing one cluster: 1,000 then 10,000 ...) it creates the
opted-in Running pods (25 per namespace, each ~6 KB of JSON like a meshed workload), then,
``--repeats`` times in rotating order, starts each peer as a process of its own and measures:

* start → ready: spawn to ``/readyz`` answering 200 for ours (polled every 20 ms: what a
  kubelet's probe and a rollout wait on); spawn to ``HasSynced`` for a Go controller's cache
  of the same pods (``bench/go_peer/``: a client-go metadata informer, protobuf on the wire,
  built once from Go modules and cached), three ways: paged LIST (``go``), streaming list
  (``go-stream``, ``KUBE_FEATURE_WatchListClient=true``) and streaming list with a transform
  keeping only the fields our decisions read (``go-trim``); spawn to "every pod listed"
  for the bare paginated LIST + decode (``bench/scale_peers.py list``, as JSON and as
  metadata); spawn to "the index holds every pod" for kopf;
* whole-process peak RSS (``VmHWM``) once synced and after the drift rounds (medians of
  the rounds; the maximum is kept too);
* drift revert, for ours, the bare watch-and-patch reverter and kopf: a probe tampers with
  ``linkerd-config``'s managed key and times until the watch shows it restored, counting a
  restore only after it has seen its own tamper event; CPU per revert from /proc.

Before the cluster starts, ours' floor: the RSS of fresh runtime interpreters after importing
each stage of its dependencies (``FLOOR_STAGES``), no work done.

Then, on a second control plane with the scheduler, kwok and Linkerd's real edge-19.12.3
injector, ``--deployments`` opted-in Deployments are rolled to a new proxy with ``--batch``
restarts per pass every ``--interval`` seconds: first → last restart against what that rate
implies, the controller's API requests per restart (``rest_client_requests_total``), and its
requests in the quiet ``--steady-seconds`` after.

    make bench-scale SCALE_ARGS='--pods 1000,10000,50000 --deployments 1000 --batch 50'

Prints tables of ratios (start and memory to the best Go peer: ours/best go,
limit-meta/go; drift: ours/limit, ours/kopf) and writes ``bench/results/scale.json``;
``bench/results_tables.py`` puts them in ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import informer_bench
from devcluster import pinned
from devcluster.binaries import (
    BinaryUnavailableError,
    build_lock,
    cache_root,
    go_build,
    go_toolchain,
)
from devcluster.cluster import ControlPlaneOptions, LocalControlPlane, free_port
from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS
from linkerd_config.linkerd.mesh import (
    POD_ANNOTATIONS,
    POD_LABELS,
    PROXY_VERSION_ANNOTATION,
    RECONCILE_AUTO,
    RECONCILE_LABEL,
)
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS_V1ALPHA1
from linkerd_config.linkerd.trust.guard import MESHED_LABEL
from tests.support import scenario
from tests.support.samples import sample

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "scale.json"
PODS_PER_NAMESPACE = 25
CREATE_CONCURRENCY = 48
PROXY_VERSION = "edge-19.12.3"
LINKERD_NAMESPACE = "linkerd"
KEY = "global"
GO_PEERS = ("go", "go-stream", "go-trim")
"""The Go controller's cache: paged LIST; + streaming list (KUBE_FEATURE_WatchListClient);
+ streaming list + a transform keeping only what the decisions read."""
PEERS = ("ours", *GO_PEERS, "limit", "limit-meta", "kopf")
NO_DRIFT = (*GO_PEERS, "limit", "limit-meta")
"""Peers measured for start and memory only: they watch no ConfigMap."""
READY_TIMEOUT = {**dict.fromkeys(PEERS, 600.0), "kopf": 300.0}
WATCH_LIST = {"KUBE_FEATURE_WatchListClient": "true"}
GO_PEER_SOURCE = BENCH / "go_peer"
GO_PEER_FILES = ("main.go", "go.mod", "go.sum")

Json = dict[str, Any]


# -- the cluster -------------------------------------------------------------------------------


def pod_manifest(namespace: str, i: int) -> Json:
    """``bench/informer_bench.py``'s meshed-workload pod (~6 KB stored), opted in and injected
    with the current proxy: nothing for any peer to restart. Labelled as Linkerd's injector
    labels every pod it meshes (``linkerd.io/control-plane-ns``, edge-19.12 to edge-26), so
    ours caches it twice, as in a real mesh: opted in (the rollout's cache) and meshed (the
    trust-anchor guard's, which the Go peers do not keep)."""
    pod = informer_bench.pod_manifest(i)
    meta, spec = pod["metadata"], pod["spec"]
    meta["namespace"] = namespace
    meta["labels"][RECONCILE_LABEL] = RECONCILE_AUTO
    meta["labels"][MESHED_LABEL] = LINKERD_NAMESPACE
    meta["annotations"][PROXY_VERSION_ANNOTATION] = PROXY_VERSION
    spec["nodeName"] = "bench-node-that-does-not-exist"
    proxy = spec["containers"][1]
    proxy.update(name="linkerd-proxy", image=f"gcr.io/linkerd-io/proxy:{PROXY_VERSION}")
    return pod


async def grow_to(kube: KubeClient, have: int, want: int) -> float:
    """Create pods ``have`` .. ``want`` - 1 (Running), 25 per namespace; the seconds taken."""
    started = time.monotonic()
    namespaces = sorted({f"scale-{i // PODS_PER_NAMESPACE:05d}" for i in range(have, want)})

    async def namespace(name: str) -> None:
        with contextlib.suppress(ApiError):
            await kube.request("POST", NAMESPACES.path(), body={"metadata": {"name": name}})

    async def pod(i: int) -> None:
        ns = f"scale-{i // PODS_PER_NAMESPACE:05d}"
        manifest = pod_manifest(ns, i)
        await kube.request("POST", PODS.path(ns), body=manifest)
        await kube.request(
            "PATCH",
            PODS.path(ns, manifest["metadata"]["name"], "status"),
            body={"status": {"phase": "Running"}},
            content_type=MERGE_PATCH,
        )

    await informer_bench.bounded(
        CREATE_CONCURRENCY, [functools.partial(namespace, n) for n in namespaces]
    )
    await informer_bench.bounded(
        CREATE_CONCURRENCY, [functools.partial(pod, i) for i in range(have, want)]
    )
    return time.monotonic() - started


# -- the Go peer -------------------------------------------------------------------------------


@functools.cache
def ensure_go_peer() -> Path:
    """``bench/go_peer/`` built once per source (main.go, go.mod, go.sum hashed) into
    ``cache_root()/bench/<hash>/``, from the Go module cache like the control plane."""
    sources = {name: (GO_PEER_SOURCE / name).read_bytes() for name in GO_PEER_FILES}
    staging = "v0." + pinned.KUBERNETES.split(".", 1)[1]
    for module in ("k8s.io/client-go", "k8s.io/apimachinery"):
        if f"\t{module} {staging}\n" not in sources["go.mod"].decode():
            raise BinaryUnavailableError(
                f"bench/go_peer/go.mod must require {module} {staging} "
                f"(Kubernetes {pinned.KUBERNETES}, devcluster/pinned.py)"
            )
    digest = hashlib.sha256()
    for name, data in sources.items():
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    folder = cache_root() / "bench" / digest.hexdigest()[:16]
    out = folder / "scale-go-peer"
    if out.is_file():
        return out
    with build_lock("bench-go-peer"):
        if not out.is_file():
            go = go_toolchain("the scale bench's Go peer", "drop the go peer from the bench")
            src = folder / "src"
            src.mkdir(parents=True, exist_ok=True)
            for name, data in sources.items():
                (src / name).write_bytes(data)
            go_build(go, src, "scale-go-peer", ".", "", out, print)
    return out


# -- the peers ---------------------------------------------------------------------------------


@dataclass
class Proc:
    """One peer process, with what /proc says about it."""

    name: str
    popen: subprocess.Popen[bytes]
    started: float
    ready_port: int = 0
    reported_pods: int | None = None

    def cpu_seconds(self) -> float:
        """CPU time of every thread the process has now, in nanoseconds from the scheduler
        (``/proc/PID/task/*/schedstat``): ``/proc/PID/stat``'s clock ticks (10 ms) would
        make a 20-round average of a 1 ms revert a multiple of 0.5 ms."""
        total = 0
        for task in Path(f"/proc/{self.popen.pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmHWM")

    def stop(self) -> None:
        if self.popen.poll() is None:
            if self.popen.stdin:
                with contextlib.suppress(OSError):
                    self.popen.stdin.close()
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def spawn(
    name: str, argv: list[str], env: dict[str, str] | None = None, *, tree: Path | None = None
) -> Proc:
    """A peer's process; ours runs the code of ``tree`` (a checkout's root; this one's if
    None), from it, as ``-m`` puts the working directory first on the path."""
    if name == "ours":
        env = {**(env or {}), "PYTHONPATH": str(tree or BENCH.parent)}
    started = time.monotonic()
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=tree,
    )
    return Proc(name, popen, started)


def peer_argv(peer: str, kubeconfig: Path, desired: Path, pods: int) -> list[str]:
    if peer in ("go", "go-stream"):
        return [str(ensure_go_peer()), "--kubeconfig", str(kubeconfig)]
    if peer == "go-trim":  # the same kept fields as ours (mesh.POD_LABELS, POD_ANNOTATIONS)
        return [str(ensure_go_peer()), "--kubeconfig", str(kubeconfig), "--trim",
                "--keep-labels", ",".join(POD_LABELS),
                "--keep-annotations", ",".join(POD_ANNOTATIONS)]  # fmt: skip
    base = [sys.executable, str(BENCH / "scale_peers.py")]
    common = ["--kubeconfig", str(kubeconfig), "--desired", str(desired)]
    if peer == "limit":
        return [*base, "list", *common]
    if peer == "limit-meta":
        return [*base, "list", *common, "--metadata-only"]
    if peer == "revert":
        return [*base, "revert", *common]
    return [*base, "kopf", *common, "--expect-pods", str(pods)]


RUNTIME_LOCK = BENCH.parent / "requirements" / "runtime.lock"


@functools.cache
def runtime_python() -> Path:
    """A Python with only the runtime dependencies (``requirements/runtime.lock``, what the
    image installs), made once per lock in ``cache_root()/bench/``: the controller is measured
    as it ships, not with the dev tools' packages (rich alone is 4 MiB once structlog finds
    it). The code is the working tree's (``PYTHONPATH``), compiled to bytecode as an install
    compiles it."""
    lock = RUNTIME_LOCK.read_bytes()
    folder = cache_root() / "bench" / f"runtime-{hashlib.sha256(lock).hexdigest()[:16]}"
    python = folder / "bin" / "python"
    with build_lock("bench-runtime-venv"):
        if not (folder / ".installed").is_file():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                 "--require-hashes", "-r", str(RUNTIME_LOCK)],
                check=True,
            )  # fmt: skip
            (folder / ".installed").write_text("")
    # The tree's bytecode, as pip compiles a wheel's at install (the image does): with
    # PYTHONDONTWRITEBYTECODE set, every start would otherwise compile the package anew,
    # about 0.2 s no installed controller pays.
    subprocess.run(
        [str(python), "-m", "compileall", "-q", "-j", "0", str(BENCH.parent / "linkerd_config")],
        check=True,
    )
    return python


FLOOR_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the interpreter", ()),
    ("+ asyncio, ssl", ("asyncio", "ssl")),
    # As `run` imports it: without the system CA bundle aiohttp's import would load.
    (
        "+ aiohttp (client and server)",
        ("linkerd_config.kube.tls:import_aiohttp_lean", "aiohttp.web"),
    ),
    (
        "+ protobuf, PyYAML, orjson, structlog, prometheus-client",
        ("google.protobuf", "yaml", "orjson", "structlog", "prometheus_client"),
    ),
    ("+ what `run` imports (linkerd_config.app)", ("linkerd_config.app",)),
    ("+ cryptography (only to make a certificate: a local run's conversion webhook)",
     ("cryptography.x509", "linkerd_config.kube.certs")),
)  # fmt: skip
"""The runtime's memory before any work, a stage at a time, each imported as ``run`` imports
it (``module:function`` is a call after the import): the floor under ours' peak RSS that no
change to our own code moves (the dependencies are the architecture's)."""

_FLOOR_PROBE = """
import importlib, json, sys
def rss():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")
out = []
for modules in json.loads(sys.argv[1]):
    for name in modules:
        module, _, function = name.partition(":")
        imported = importlib.import_module(module)
        if function:
            getattr(imported, function)()
    out.append(rss())
print(json.dumps(out))
"""


def import_floor(repeats: int) -> list[Json]:
    """RSS after each of ``FLOOR_STAGES`` in a fresh runtime interpreter (``runtime_python``,
    the tree's code on ``PYTHONPATH`` as ours runs), the median of ``repeats`` processes."""
    stages = json.dumps([list(modules) for _, modules in FLOOR_STAGES])
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    runs = [
        json.loads(
            subprocess.run(
                [str(runtime_python()), "-c", _FLOOR_PROBE, stages],
                env=env, check=True, capture_output=True, text=True, timeout=120,
            ).stdout
        )
        for _ in range(repeats)
    ]  # fmt: skip
    return [
        {"stage": label, "rss_mib": round(statistics.median(run[i] for run in runs), 1)}
        for i, (label, _) in enumerate(FLOOR_STAGES)
    ]


def ours_argv(kubeconfig: Path, *extra: str) -> list[str]:
    """``linkerd-config run`` as one replica (no election: nothing to renew), webhooks off,
    on the runtime dependencies only (``runtime_python``)."""
    return [
        str(runtime_python()),
        "-m",
        "linkerd_config",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--leader-elect=false",
        "--enable-webhooks=false",
        "--serve-conversion=false",  # the bench's CRD and objects are v1alpha2
        "--log-level=warning",
        *extra,
    ]


def start(peer: str, kubeconfig: Path, desired: Path, pods: int) -> Proc:
    if peer != "ours":
        env = WATCH_LIST if peer in ("go-stream", "go-trim") else None
        return spawn(peer, peer_argv(peer, kubeconfig, desired, pods), env)
    health = free_port()
    proc = spawn(
        "ours",
        ours_argv(
            kubeconfig,
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{health}",
        ),
    )
    proc.ready_port = health
    return proc


async def until_ready(proc: Proc, timeout: float) -> float | None:
    """Seconds from spawn to ready, or None (timed out or died)."""
    deadline = proc.started + timeout
    if proc.ready_port:
        url = f"http://127.0.0.1:{proc.ready_port}/readyz"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while time.monotonic() < deadline and proc.popen.poll() is None:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(url) as resp:
                        if resp.status == 200:
                            return time.monotonic() - proc.started
                await asyncio.sleep(0.02)
        return None
    assert proc.popen.stdout is not None
    stdout = proc.popen.stdout

    def read_ready() -> float | None:
        for line in stdout:
            message = orjson.loads(line)
            if message.get("ready"):
                ready = time.monotonic() - proc.started
                proc.reported_pods = message.get("pods")
                return ready
        return None

    try:
        return await asyncio.wait_for(asyncio.to_thread(read_ready), timeout)
    except TimeoutError:
        return None


# -- drift -------------------------------------------------------------------------------------


CM_PATH = CONFIGMAPS.path(LINKERD_NAMESPACE, "linkerd-config")


async def drift_round(kube: KubeClient, desired: str, n: int) -> float:
    """Tamper with the managed key; seconds until the watch shows it restored, counted only
    after the watch has shown our own tamper (so a late write of an earlier round cannot
    pass for this round's restore)."""
    version = (await kube.request("GET", CM_PATH))["metadata"]["resourceVersion"]
    params: dict[str, str | int | bool] = {
        "watch": True,
        "fieldSelector": "metadata.name=linkerd-config",
        "resourceVersion": version,
    }
    async with kube.stream(
        CONFIGMAPS.path(LINKERD_NAMESPACE), params=params, total_timeout=60, read_timeout=30
    ) as body:
        started = time.monotonic()
        tampered = await kube.request(
            "PATCH",
            CM_PATH,
            body={"data": {KEY: f'{{"tampered":{n}}}'}},
            content_type=MERGE_PATCH,
        )
        tamper_version = tampered["metadata"]["resourceVersion"]
        seen_tamper = False
        async for line in body:
            obj = orjson.loads(line)["object"]
            if obj["metadata"]["resourceVersion"] == tamper_version:
                seen_tamper = True
            elif seen_tamper and (obj.get("data") or {}).get(KEY) == desired:
                return time.monotonic() - started
    raise RuntimeError("the watch ended before the restore")


async def settled(proc: Proc, window: float = 0.5, timeout: float = 60.0) -> float:
    """Seconds until ``proc`` is idle: less than 5% of a CPU over ``window``. Whatever a peer
    does once ready (ours lists the meshed pods then, which only a trust bundle change
    reads) is start, not the events measured next."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = proc.cpu_seconds()
        await asyncio.sleep(window)
        if proc.cpu_seconds() - before < 0.05 * window:
            break
    return time.monotonic() - started


async def drift(kube: KubeClient, proc: Proc, desired: str, rounds: int) -> Json:
    await drift_round(kube, desired, -1)  # a first round warms the peer's paths
    cpu_before = proc.cpu_seconds()
    samples = []
    for n in range(rounds):
        samples.append(await drift_round(kube, desired, n))
        await asyncio.sleep(0.1)
    cpu = (proc.cpu_seconds() - cpu_before) / rounds
    return {"samples_ms": [round(s * 1000, 2) for s in samples], "cpu_ms_per_revert": cpu * 1000}


# -- one scale point ---------------------------------------------------------------------------


@dataclass
class PeerRuns:
    ready_s: list[float | None] = field(default_factory=list)
    peak_rss_mib: list[float] = field(default_factory=list)
    reported_pods: list[int | None] = field(default_factory=list)
    drift_ms: list[float] = field(default_factory=list)
    cpu_ms_per_revert: list[float] = field(default_factory=list)


async def measure_point(
    kube: KubeClient, kubeconfig: Path, desired_file: Path, pods: int, args: argparse.Namespace
) -> dict[str, PeerRuns]:
    desired = await asyncio.to_thread(desired_file.read_text)
    runs = {p: PeerRuns() for p in (*PEERS, "revert")}
    order = list(PEERS)
    for repeat in range(args.repeats):
        for peer in order[repeat % len(order) :] + order[: repeat % len(order)]:
            if peer == "kopf" and pods > args.kopf_max_pods:
                continue
            READY_TIMEOUT["kopf"] = args.kopf_timeout
            proc = start(peer, kubeconfig, desired_file, pods)
            try:
                ready = await until_ready(proc, READY_TIMEOUT[peer])
                runs[peer].ready_s.append(ready)
                if ready is None:
                    print(f"  {peer}: not ready in {READY_TIMEOUT[peer]:.0f}s", flush=True)
                    continue
                runs[peer].reported_pods.append(proc.reported_pods)
                if proc.reported_pods is not None and proc.reported_pods != pods:
                    print(f"  {peer}: reported {proc.reported_pods} pods, not {pods}", flush=True)
                await asyncio.sleep(1.0)
                if peer not in NO_DRIFT:
                    await settled(proc)
                    d = await drift(kube, proc, desired, args.rounds)
                    runs[peer].drift_ms += d["samples_ms"]
                    runs[peer].cpu_ms_per_revert.append(d["cpu_ms_per_revert"])
                runs[peer].peak_rss_mib.append(proc.peak_rss_mib())
                print(
                    f"  {peer}: ready {ready:.2f}s, peak RSS {runs[peer].peak_rss_mib[-1]:.0f} MiB",
                    flush=True,
                )
            finally:
                proc.stop()
        proc = start("revert", kubeconfig, desired_file, pods)
        try:
            await until_ready(proc, 30)
            await settled(proc)
            d = await drift(kube, proc, desired, args.rounds)
            runs["revert"].drift_ms += d["samples_ms"]
            runs["revert"].cpu_ms_per_revert.append(d["cpu_ms_per_revert"])
            runs["revert"].peak_rss_mib.append(proc.peak_rss_mib())
        finally:
            proc.stop()
    for peer in ("ours", *GO_PEERS):
        times = ", ".join("-" if x is None else f"{x:.2f}" for x in runs[peer].ready_s)
        rss = ", ".join(f"{x:.0f}" for x in runs[peer].peak_rss_mib)
        print(f"  {peer} by round: ready [{times}] s, peak RSS [{rss}] MiB", flush=True)
    return runs


def pct(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(runs: dict[str, PeerRuns]) -> Json:
    out: Json = {}
    for peer, r in runs.items():
        ready = [x for x in r.ready_s if x is not None]
        out[peer] = {
            "ready_s_median": round(statistics.median(ready), 2) if ready else None,
            "ready_s": [None if x is None else round(x, 2) for x in r.ready_s],
            "peak_rss_mib_median": (
                round(statistics.median(r.peak_rss_mib), 1) if r.peak_rss_mib else None
            ),
            "peak_rss_mib_max": round(max(r.peak_rss_mib), 1) if r.peak_rss_mib else None,
            "peak_rss_mib": [round(x, 1) for x in r.peak_rss_mib],
            "reported_pods": r.reported_pods,
            "drift_p50_ms": pct(r.drift_ms, 0.5),
            "drift_p99_ms": pct(r.drift_ms, 0.99),
            "drift_rounds": len(r.drift_ms),
            "cpu_ms_per_revert": (
                round(statistics.median(r.cpu_ms_per_revert), 2) if r.cpu_ms_per_revert else None
            ),
        }
    return out


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def best_go(point: Json, key: str) -> float | None:
    """The best (lowest) of the Go peers' ``key`` at a scale point."""
    values = [(point.get(p) or {}).get(key) for p in GO_PEERS]
    present = [v for v in values if v is not None]
    return min(present) if present else None


def table(points: dict[int, Json]) -> str:
    """Start and memory as ratios to the best Go peer; drift against the bare reverter and
    kopf."""
    shown = ("ours", *GO_PEERS, "limit", "limit-meta", "kopf")
    rows = [
        f"| pods | metric | {' | '.join(shown)} | ours/best go | limit-meta/go | ours/kopf |",
        "|---|---|" + "---|" * (len(shown) + 3),
    ]
    for pods, s in points.items():
        go, kopf = s.get("go") or {}, s.get("kopf") or {}
        for metric, key in (("start → ready (s)", "ready_s_median"),
                            ("peak RSS (MiB)", "peak_rss_mib_median")):  # fmt: skip
            values = [(s.get(p) or {}).get(key) for p in shown]
            ours, meta = values[0], values[shown.index("limit-meta")]
            show = ["-" if v is None else f"{v:g}" for v in values]
            ratios = (
                ratio(ours, best_go(s, key)),
                ratio(meta, go.get(key)),
                ratio(ours, kopf.get(key)),
            )
            rows.append(f"| {pods:,} | {metric} | {' | '.join(show)} | {' | '.join(ratios)} |")
    rows += [
        "",
        "| pods | metric | ours | limit | kopf | ours/limit | ours/kopf |",
        "|---|---|---|---|---|---|---|",
    ]
    for pods, s in points.items():
        ours, kopf, revert = s["ours"], s.get("kopf") or {}, s["revert"]
        for metric, key in (("drift revert p50 (ms)", "drift_p50_ms"),
                            ("drift revert p99 (ms)", "drift_p99_ms"),
                            ("CPU per revert (ms)", "cpu_ms_per_revert")):  # fmt: skip
            a, b, c = ours[key], revert[key], kopf.get(key)
            show = ["-" if v is None else f"{v:g}" for v in (a, b, c)]
            rows.append(
                f"| {pods:,} | {metric} | {' | '.join(show)} | {ratio(a, b)} | {ratio(a, c)} |"
            )
    return "\n".join(rows)


# -- rollout ------------------------------------------------------------------------------------


def sample_value(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The sum of a family's samples in a Prometheus text scrape (matching ``labels``)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, _, value = line.rpartition(" ")
        if labels and not all(f'{k}="{v}"' in series for k, v in labels.items()):
            continue
        total += float(value)
    return total


async def scrape(http: aiohttp.ClientSession, port: int) -> str:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
        return await resp.text()


async def rollout_point(deployments: int, args: argparse.Namespace) -> Json:
    """``deployments`` opted-in Deployments (one pod each, injected by Linkerd's real
    edge-19.12.3 injector with proxy edge-19.12.1), the controller running with the bench's
    batch and interval, then a LinkerdConfig moving the proxy to edge-19.12.3: the time until
    every Deployment is restarted (against what the rate implies) and the API requests the
    controller made for it (``rest_client_requests_total``), per restart."""
    per_ns = 20
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as cp:
        async with KubeClient(await load_access(str(cp.kubeconfig))) as kube:
            await scenario.install_crd(kube)
            await scenario.install_linkerd_edge_19_12_1(kube)
            async with scenario.linkerd_injector(cp):
                namespaces = [f"roll-{i:03d}" for i in range((deployments + per_ns - 1) // per_ns)]
                for ns in namespaces:
                    await scenario.create(
                        kube,
                        NAMESPACES.path(),
                        {"metadata": {"name": ns, "annotations": {"linkerd.io/inject": "enabled"}}},
                    )
                await scenario.wait_admits_pods(kube, namespaces[0], injected=True)
                created = time.monotonic()
                jobs: list[Callable[[], Awaitable[object]]] = [
                    functools.partial(
                        kube.request,
                        "POST",
                        DEPLOYMENTS.path(namespaces[i // per_ns]),
                        body=scenario.deployment(f"app-{i:04d}", opted_in=True, replicas=1),
                    )
                    for i in range(deployments)
                ]
                await informer_bench.bounded(16, jobs)
                for i, ns in enumerate(namespaces):
                    expected = min(per_ns, deployments - i * per_ns)
                    await scenario.wait_settled(kube, ns, expected=expected, timeout=600)
                print(
                    f"{deployments} Deployments running, injected, in "
                    f"{time.monotonic() - created:.0f}s",
                    flush=True,
                )
                return await measure_rollout(cp, kube, deployments, args)


async def measure_rollout(
    cp: LocalControlPlane, kube: KubeClient, deployments: int, args: argparse.Namespace
) -> Json:
    metrics_port = free_port()
    proc = spawn(
        "ours",
        ours_argv(
            cp.kubeconfig,
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            "--health-probe-bind-address=0",
            f"--max-restarts-per-pass={args.batch}",
            f"--restart-interval={args.interval}",
        ),
    )
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:

            async def scraped() -> str | None:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    return await scrape(http, metrics_port)
                return None

            deadline = time.monotonic() + 120
            while await scraped() is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("the controller never served metrics")
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)  # caches synced, nothing to do yet
            before_text = await scrape(http, metrics_port)
            before = sample_value(before_text, "rest_client_requests_total")
            applied = time.monotonic()
            await kube.request(
                "POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=sample("edge_19.12.3.yaml")
            )
            first = last = None
            while True:
                text = await scrape(http, metrics_port)
                done = sample_value(text, "linkerd_config_workload_restarts_total")
                if done and first is None:
                    first = time.monotonic() - applied
                if done >= deployments:
                    last = time.monotonic() - applied
                    break
                if time.monotonic() - applied > args.rollout_timeout:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(args.interval)  # the last pass's status write
            after_text = await scrape(http, metrics_port)
            # Steady state: once every new pod runs the new proxy (Ready), nothing but the
            # watches should remain.
            ready_at = None
            while time.monotonic() - applied < args.rollout_timeout:
                ready = await scenario.condition(kube, "edge-19.12.3", "Ready")
                if ready.get("status") == "True":
                    ready_at = time.monotonic() - applied
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)
            requests = sample_value(after_text, "rest_client_requests_total") - before
            restarted = sample_value(after_text, "linkerd_config_workload_restarts_total")
            by_method = requests_by_method(before_text, after_text)
            quiet_text = await scrape(http, metrics_port)
            await asyncio.sleep(args.steady_seconds)
            quiet_by_method = requests_by_method(quiet_text, await scrape(http, metrics_port))
            quiet = sum(quiet_by_method.values())
    finally:
        proc.stop()
    passes = -(-deployments // args.batch)
    implied = (passes - 1) * args.interval
    return {
        "deployments": deployments,
        "batch": args.batch,
        "interval_s": args.interval,
        "restarted": restarted,
        "first_restart_s": None if first is None else round(first, 2),
        "last_restart_s": None if last is None else round(last, 2),
        "first_to_last_s": None if first is None or last is None else round(last - first, 2),
        "implied_first_to_last_s": implied,
        "first_to_last_over_floor": None
        if first is None or last is None or not implied
        else round((last - first) / implied, 3),
        "ready_s": None if ready_at is None else round(ready_at, 2),
        "requests": requests,
        "requests_per_restart": round(requests / restarted, 3) if restarted else None,
        "requests_by_method": by_method,
        "steady_requests": quiet,
        "steady_requests_by_method": quiet_by_method,
        "steady_seconds": args.steady_seconds,
    }


def requests_by_method(before: str, after: str) -> dict[str, float]:
    """The controller's API requests between two scrapes, by HTTP method."""
    return {
        m: sample_value(after, "rest_client_requests_total", {"method": m})
        - sample_value(before, "rest_client_requests_total", {"method": m})
        for m in ("GET", "POST", "PATCH", "PUT", "DELETE", "WATCH")
    }


def rollout_table(r: Json) -> str:
    return "\n".join(
        [
            "| Deployments | batch / interval | first → last restart "
            "| floor: (passes - 1) x interval | ratio (target ≤ 1.1) "
            "| API requests per restart (perfect: 2, the PATCH and its Event) "
            "| requests in the next "
            f"{r['steady_seconds']:.0f} s |",
            "|---|---|---|---|---|---|---|",
            f"| {r['deployments']:,} | {r['batch']} / {r['interval_s']:g} s "
            f"| {r['first_to_last_s']} s | {r['implied_first_to_last_s']:g} s "
            f"| {r.get('first_to_last_over_floor')} "
            f"| {r['requests_per_restart']} | {r['steady_requests']:g} |",
        ]
    )


# -- main --------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def cluster() -> AsyncIterator[tuple[LocalControlPlane, KubeClient]]:
    with LocalControlPlane(ControlPlaneOptions(workloads=False)) as cp:
        async with KubeClient(await load_access(str(cp.kubeconfig))) as kube:
            yield cp, kube


async def write_config(kube: KubeClient, kubeconfig: Path, desired_file: Path) -> None:
    """Install Linkerd's config and a LinkerdConfig; let ours write it once, and keep the
    managed key as written: the value every reverter restores."""
    await scenario.install_crd(kube)
    await scenario.install_linkerd_edge_19_12_1(kube)
    await kube.request("POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=sample("edge_19.12.3.yaml"))
    before = (await kube.request("GET", CM_PATH))["data"][KEY]
    proc = start("ours", kubeconfig, desired_file, 0)
    try:
        await until_ready(proc, 120)
        deadline = time.monotonic() + 60
        while (now := (await kube.request("GET", CM_PATH))["data"][KEY]) == before:
            if time.monotonic() > deadline:
                raise RuntimeError("the controller never wrote linkerd-config")
            await asyncio.sleep(0.1)
        await asyncio.to_thread(desired_file.write_text, now)
    finally:
        proc.stop()


def results_skeleton(args: argparse.Namespace) -> Json:
    """A bench's results before it measures: the machine, its load now, the arguments."""
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_1m_at_start": round(os.getloadavg()[0], 2),
        },
        "args": vars(args),
        "points": {},
    }


async def main_async(args: argparse.Namespace) -> Json:
    points = [int(p) for p in args.pods.split(",") if p]
    results = results_skeleton(args)
    if points:
        # Built (or found in the cache) before the cluster starts: no build in a measurement.
        results["go_peer"] = {"binary": str(await asyncio.to_thread(ensure_go_peer))}
    results["ours_python"] = str(await asyncio.to_thread(runtime_python))
    results["import_floor"] = await asyncio.to_thread(import_floor, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        desired_file = Path(tmp) / "desired"
        async with cluster() as (cp, kube):
            await write_config(kube, cp.kubeconfig, desired_file)
            have = 0
            for pods in points:
                took = await grow_to(kube, have, pods)
                have = pods
                print(f"{pods:,} pods: created in {took:.0f}s", flush=True)
                runs = await measure_point(kube, cp.kubeconfig, desired_file, pods, args)
                results["points"][str(pods)] = summarise(runs)
    if args.deployments:
        results["rollout"] = await rollout_point(args.deployments, args)
    results["machine"]["load_1m_at_end"] = round(os.getloadavg()[0], 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", default="1000,10000,50000", help="comma-separated scale points")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20, help="drift rounds per run")
    parser.add_argument(
        "--kopf-max-pods", type=int, default=1000, help="kopf is not started above this"
    )
    parser.add_argument(
        "--kopf-timeout", type=float, default=120.0, help="seconds kopf has to become ready"
    )
    parser.add_argument(
        "--deployments", type=int, default=1000, help="the rollout's Deployments (0: skip)"
    )
    parser.add_argument("--batch", type=int, default=50, help="--max-restarts-per-pass")
    # Longer than the local control plane takes to bring a pass's 50 Deployments back
    # healthy (2 CPUs): the health gate then never holds a pass, and first → last restart
    # is (passes - 1) x interval plus our own overhead: the ratio the bench reports.
    parser.add_argument("--interval", type=float, default=5.0, help="--restart-interval (s)")
    parser.add_argument("--rollout-timeout", type=float, default=900.0)
    parser.add_argument(
        "--steady-seconds", type=float, default=30.0, help="after the rollout: requests made?"
    )
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    points = {int(k): v for k, v in results["points"].items()}
    print(table(points))
    if "rollout" in results:
        print(rollout_table(results["rollout"]))
    RESULTS.parent.mkdir(exist_ok=True)
    if not results["points"] and RESULTS.exists():
        # The rollout alone (--pods ''): the scale points measured before are kept.
        kept = json.loads(RESULTS.read_text())
        results = {**kept, "rollout": results.get("rollout"), "rollout_args": vars(args)}
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
