"""Find or build the control-plane binaries.

Order of preference for each binary: the folder named by ``KUBEBUILDER_ASSETS`` (the
envtest convention), then our cache (keyed by every pinned version), then a build from Go
modules. Only the first run on a machine pays for the build; its progress is printed, because
a cold build takes many minutes and a silent wait looks like a hang.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from devcluster import pinned

Progress = Callable[[str], None]

ALL_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)
NODE_BINARIES = ("kubelet", "kube-proxy")
"""Built only for a real node (``dev-cluster up --real-node``), from the same module."""


class BinaryUnavailableError(RuntimeError):
    """A control-plane binary can be neither found nor built; the message says how to fix it."""


@dataclass(frozen=True)
class _GoModule:
    """A throw-away wrapper module whose only job is to pin and build a dependency's mains."""

    name: str
    go_mod: str
    packages: Mapping[str, str]  # binary name -> main package import path
    ldflags: str = ""


def cache_root() -> Path:
    """Outside the repository, so a fresh clone reuses what an earlier one built."""
    explicit = os.environ.get("LINKERD_CONFIG_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "linkerd-config"


def versioned_bin_dir() -> Path:
    key = f"k8s-v{pinned.KUBERNETES}-etcd-v{pinned.ETCD}-kwok-v{pinned.KWOK}"
    return cache_root() / key / "bin"


def _kubernetes_module() -> _GoModule:
    k8s = pinned.KUBERNETES
    staging = "0." + k8s.split(".", 1)[1]
    replaces = "\n".join(
        f"\tk8s.io/{m} => k8s.io/{m} v{staging}" for m in pinned.KUBERNETES_STAGING_MODULES
    )
    go_mod = (
        "module linkerd-config.local/kubernetes-binaries\n\n"
        f"go {pinned.GO_DIRECTIVE}\n\n"
        "godebug default=go1.24\n\n"
        f"require k8s.io/kubernetes v{k8s}\n\n"
        f"replace (\n{replaces}\n)\n"
    )
    major, minor, _ = k8s.split(".")
    stamp = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamp += [
            f"-X {pkg}.gitVersion=v{k8s}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=2026-01-01T00:00:00Z",
        ]
    return _GoModule(
        name="kubernetes",
        go_mod=go_mod,
        packages={
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            "kubectl": "k8s.io/kubernetes/cmd/kubectl",
            "kubelet": "k8s.io/kubernetes/cmd/kubelet",
            "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
        },
        ldflags=" ".join(stamp),
    )


def _etcd_module() -> _GoModule:
    # Kept apart from the Kubernetes module so minimal version selection cannot move
    # the etcd client libraries Kubernetes pins.
    return _GoModule(
        name="etcd",
        go_mod=(
            "module linkerd-config.local/etcd-binary\n\n"
            f"go {pinned.GO_DIRECTIVE}\n\n"
            f"require go.etcd.io/etcd/server/v3 v{pinned.ETCD}\n"
        ),
        packages={"etcd": "go.etcd.io/etcd/server/v3"},
    )


def _kwok_module() -> _GoModule:
    return _GoModule(
        name="kwok",
        go_mod=(
            "module linkerd-config.local/kwok-binary\n\n"
            f"go {pinned.GO_DIRECTIVE}\n\n"
            f"require sigs.k8s.io/kwok v{pinned.KWOK}\n"
        ),
        packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
    )


KWOK_STAGE_CRD = "kustomize/crd/bases/kwok.x-k8s.io_stages.yaml"
"""kwok's Stage CRD as its module ships it (controller-gen's output), relative to the module."""
KWOK_STAGE_SETS = "kustomize/stage"
"""kwok's Stage sets (``fast``, ``node/heartbeat``, ``pod/chaos``, ...), each a folder with a
``kustomization.yaml`` listing Stage manifests."""


def kwok_manifests_dir() -> Path:
    """Beside the binaries of the same pinned versions; the kwok module's own layout inside."""
    return versioned_bin_dir().parent / "kwok-manifests"


def ensure_kwok_manifests(progress: Progress = print) -> Path:
    """kwok's Stage CRD and Stage sets, copied from the Go module kwok is built from
    (``sigs.k8s.io/kwok`` at ``pinned.KWOK``, checksum-verified by ``go mod download``)
    into the cache, so the Stage API the local kwok reads is kwok's own, never hand-written."""
    out = kwok_manifests_dir()
    if (out / KWOK_STAGE_CRD).is_file():
        return out
    with build_lock("kwok-manifests"):
        if (out / KWOK_STAGE_CRD).is_file():
            return out
        go = go_toolchain(
            "kwok's Stage CRD and stages",
            f"copy {KWOK_STAGE_CRD} and {KWOK_STAGE_SETS}/ of sigs.k8s.io/kwok v{pinned.KWOK} "
            f"to {out}, keeping their paths",
        )
        module = _kwok_module()
        src = out.parent / "src" / module.name
        src.mkdir(parents=True, exist_ok=True)
        (src / "go.mod").write_text(module.go_mod)
        progress(f"copying kwok's Stage CRD and stages from sigs.k8s.io/kwok v{pinned.KWOK}")
        root = go_module_dir(go, "sigs.k8s.io/kwok", f"v{pinned.KWOK}", cwd=src)
        tmp = out.parent / f".{out.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / KWOK_STAGE_CRD).parent.mkdir(parents=True)
        shutil.copyfile(root / KWOK_STAGE_CRD, tmp / KWOK_STAGE_CRD)
        shutil.copytree(
            root / KWOK_STAGE_SETS, tmp / KWOK_STAGE_SETS, copy_function=shutil.copyfile
        )
        shutil.rmtree(out, ignore_errors=True)
        tmp.replace(out)
    return out


def go_module_dir(
    go: str, module: str, version: str, cwd: Path | None = None, timeout: float = 600.0
) -> Path:
    """Where ``go mod download`` unpacked ``module@version`` in the Go module cache
    (downloading it, checksum-verified, if need be)."""
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"})
    proc = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    folder = Path(info["Dir"]) if isinstance(info, dict) and info.get("Dir") else None
    if proc.returncode != 0 or folder is None or not folder.is_dir():
        error = info.get("Error") if isinstance(info, dict) else None
        raise BinaryUnavailableError(
            f"go mod download {module}@{version} failed (exit code {proc.returncode}): "
            f"{error or (proc.stdout + proc.stderr).strip()}"
        )
    return folder


def _helm_module() -> _GoModule:
    version = f"v{pinned.HELM}"
    return _GoModule(
        name="helm",
        go_mod=(
            "module linkerd-config.local/helm-binary\n\n"
            f"go {pinned.GO_DIRECTIVE}\n\n"
            f"require helm.sh/helm/v3 {version}\n"
        ),
        packages={"helm": "helm.sh/helm/v3/cmd/helm"},
        # Helm's own release stamps the Kubernetes version `helm template` and `helm lint`
        # assume without a cluster; ours is the version the local control plane runs.
        ldflags=" ".join(
            [f"-X helm.sh/helm/v3/internal/version.version={version}"]
            + [
                f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={value}"
                for pkg in ("chartutil", "lint/rules")
                for part, value in zip(
                    ("Major", "Minor"), pinned.KUBERNETES.split(".")[:2], strict=True
                )
            ]
        ),
    )


def helm_bin_dir() -> Path:
    """Apart from the control plane's folder, so a Helm bump rebuilds only Helm."""
    return cache_root() / f"helm-v{pinned.HELM}-k8s-v{pinned.KUBERNETES}" / "bin"


def ensure_helm(progress: Progress = print) -> Path:
    """``helm`` at the pinned version: ``HELM`` if it names an executable, else our build."""
    explicit = os.environ.get("HELM")
    if explicit and os.access(explicit, os.X_OK):
        return Path(explicit)
    out = helm_bin_dir() / "helm"
    with build_lock("helm"):
        if not out.is_file():
            go = go_toolchain("helm", "set HELM to a helm v3 binary")
            module = _helm_module()
            src = out.parent.parent / "src"
            src.mkdir(parents=True, exist_ok=True)
            (src / "go.mod").write_text(module.go_mod)
            out.parent.mkdir(parents=True, exist_ok=True)
            go_build(go, src, "helm", module.packages["helm"], module.ldflags, out, progress)
    return out


PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_BINARIES = ("prometheus", "promtool")


def prometheus_module_version() -> str:
    """Prometheus 2.X.Y's Go module version is v0.X.Y."""
    major, minor, patch = pinned.PROMETHEUS.split(".")
    if major != "2":
        raise ValueError(f"pinned.PROMETHEUS {pinned.PROMETHEUS}: only 2.x maps to v0.x here")
    return f"v0.{minor}.{patch}"


def _prometheus_module(go: str) -> _GoModule:
    """Prometheus builds only with its own go.mod's replace and exclude directives (klog is
    replaced by a go-kit shim), which a dependency's go.mod does not pass on: copied."""
    version = prometheus_module_version()
    own = (go_module_dir(go, PROMETHEUS_MODULE, version) / "go.mod").read_text()
    directives = _go_mod_blocks(own, ("replace", "exclude"))
    stamp = "github.com/prometheus/common/version"
    return _GoModule(
        name="prometheus",
        go_mod=(
            "module linkerd-config.local/prometheus-binary\n\n"
            f"go {pinned.GO_DIRECTIVE}\n\n"
            f"require {PROMETHEUS_MODULE} {version}\n\n" + directives
        ),
        packages={name: f"{PROMETHEUS_MODULE}/cmd/{name}" for name in PROMETHEUS_BINARIES},
        ldflags=f"-X {stamp}.Version={pinned.PROMETHEUS} -X {stamp}.BuildUser=linkerd-config",
    )


def _go_mod_blocks(go_mod: str, verbs: tuple[str, ...]) -> str:
    """The ``verb (...)`` blocks and one-line ``verb ...`` directives of a go.mod, as written."""
    out: list[str] = []
    inside = False
    for line in go_mod.splitlines():
        word = line.split("(")[0].strip()
        if inside:
            out.append(line)
            inside = line.strip() != ")"
        elif word in verbs and line.rstrip().endswith("("):
            out.append(line)
            inside = True
        elif line.split(" ", 1)[0] in verbs:
            out.append(line)
    return "\n".join(out) + "\n"


def prometheus_bin_dir() -> Path:
    """Apart from the control plane's folder, so a Prometheus bump rebuilds only Prometheus."""
    return cache_root() / f"prometheus-v{pinned.PROMETHEUS}" / "bin"


def ensure_prometheus(progress: Progress = print) -> dict[str, Path]:
    """``prometheus`` and ``promtool`` at the pinned version. One you have wins: ``PROMETHEUS``
    (and ``PROMTOOL``, else the ``promtool`` beside it) when they name executables; what is
    not given is built once and cached."""
    given: dict[str, Path] = {}
    server = os.environ.get("PROMETHEUS")
    if server and os.access(server, os.X_OK):
        given["prometheus"] = Path(server)
    tool = os.environ.get("PROMTOOL") or (str(Path(server).with_name("promtool")) if server else "")
    if tool and os.access(tool, os.X_OK):
        given["promtool"] = Path(tool)
    out_dir = prometheus_bin_dir()
    with build_lock("prometheus"):
        missing = [
            name
            for name in PROMETHEUS_BINARIES
            if name not in given and not (out_dir / name).is_file()
        ]
        if missing:
            go = go_toolchain(
                "prometheus", "set PROMETHEUS to a prometheus 2.x binary (promtool beside it)"
            )
            module = _prometheus_module(go)
            src = out_dir.parent / "src"
            src.mkdir(parents=True, exist_ok=True)
            (src / "go.mod").write_text(module.go_mod)
            out_dir.mkdir(parents=True, exist_ok=True)
            for name in missing:
                package = module.packages[name]
                go_build(go, src, name, package, module.ldflags, out_dir / name, progress)
    return {name: given.get(name, out_dir / name) for name in PROMETHEUS_BINARIES}


def _modules() -> list[_GoModule]:
    return [_etcd_module(), _kwok_module(), _kubernetes_module()]


def ensure_binaries(
    names: tuple[str, ...] = ALL_BINARIES, progress: Progress = print
) -> dict[str, Path]:
    """Return a path for every named binary, building whatever is missing."""
    found = {name: path for name in names if (path := _find(name)) is not None}
    missing = [n for n in names if n not in found]
    if missing:
        with build_lock():
            # Another process may have built them while we waited for the lock.
            missing = [n for n in missing if _find(n) is None]
            if missing:
                _build(missing, progress)
        for name in names:
            path = _find(name)
            if path is None:  # pragma: no cover - _build raises first
                raise BinaryUnavailableError(f"{name} was built but cannot be found")
            found[name] = path
    return found


def _find(name: str) -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    candidates = [Path(assets) / name] if assets else []
    candidates.append(versioned_bin_dir() / name)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@contextlib.contextmanager
def build_lock(name: str = "build") -> Iterator[None]:
    """Serialises builds of one artifact across processes (parallel test runs, CI + a shell)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def go_toolchain(what: str, alternative: str) -> str:
    """The ``go`` command, or an error saying what could not be built and what to do instead."""
    go = shutil.which("go")
    if go is None:
        raise BinaryUnavailableError(
            f"cannot build {what}: no Go toolchain on PATH. Install Go 1.24 or newer, "
            f"or {alternative}."
        )
    return go


def _build(missing: list[str], progress: Progress) -> None:
    go = go_toolchain(
        ", ".join(missing),
        f"set KUBEBUILDER_ASSETS to a folder holding {', '.join(ALL_BINARIES)}",
    )
    out_dir = versioned_bin_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    for module in _modules():
        wanted = {b: pkg for b, pkg in module.packages.items() if b in missing}
        if not wanted:
            continue
        src = out_dir.parent / "src" / module.name
        src.mkdir(parents=True, exist_ok=True)
        (src / "go.mod").write_text(module.go_mod)
        for binary, package in wanted.items():
            go_build(go, src, binary, package, module.ldflags, out_dir / binary, progress)


def go_build(
    go: str,
    src: Path,
    binary: str,
    package: str,
    ldflags: str,
    out: Path,
    progress: Progress,
    tags: str = "",
) -> None:
    """``go build`` one main package into ``out`` (atomically), printing progress meanwhile."""
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"})
    tmp = out.parent / f".{out.name}.tmp"
    cmd = [go, "build", "-v", "-trimpath", "-buildvcs=false"]
    if tags:
        cmd += ["-tags", tags]
    cmd += ["-ldflags", f"-s -w {ldflags}", "-o", str(tmp), package]
    progress(f"building {binary} from {package} (first run only; cached in {out.parent})")
    started = time.monotonic()
    try:
        run_with_progress(cmd, src, env, binary, progress, unit="packages")
    except BinaryUnavailableError as exc:
        tmp.unlink(missing_ok=True)
        raise BinaryUnavailableError(f"go build of {binary} ({package}) {exc}") from None
    tmp.replace(out)
    progress(f"built {binary} in {time.monotonic() - started:.0f}s")


def run_with_progress(
    cmd: list[str],
    cwd: Path,
    env: Mapping[str, str],
    what: str,
    progress: Progress,
    unit: str = "lines",
    heartbeat_every: float = 20.0,
) -> None:
    """Run a long build, printing every ``heartbeat_every`` seconds how long it has run, how
    many lines of output (packages, crates) it has printed and the last one; on failure,
    raise with its last 40 lines."""
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    tail: list[str] = []
    counted = 0
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(heartbeat_every):
            elapsed = time.monotonic() - started
            last = tail[-1] if tail else "starting"
            progress(f"  {what}: {elapsed:4.0f}s, {counted} {unit}, at {last}")

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            counted += 1
            tail = [*tail[-39:], line.rstrip()]
        code = proc.wait()
    finally:
        stop.set()
        ticker.join()
    if code != 0:
        raise BinaryUnavailableError(
            f"failed with exit code {code}; last output:\n" + "\n".join(tail)
        )
