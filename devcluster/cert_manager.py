"""cert-manager's controller and CA injector, built from its Go module and run on the host as
part of the local control plane. The default overlay's Issuer, Certificate and
``cert-manager.io/inject-ca-from`` annotations then work as they do in a cluster.

**What is built.** Every controller, issuer and injector is cert-manager's own code, from the
module ``github.com/cert-manager/cert-manager`` at ``pinned.CERT_MANAGER``, which
``go mod download`` fetches and checksum-verifies. Two parts are not cert-manager's:

* The two ``main`` packages (``cert_manager_mains/``). cert-manager's own mains
  (``cmd/controller``, ``cmd/cainjector``) are separate Go modules named
  ``github.com/cert-manager/cert-manager/controller-binary`` and ``.../cainjector-binary``.
  Each has ``replace github.com/cert-manager/cert-manager => ../../``, and none is published.
  Their names are not fetchable paths. The proxy has nothing under ``.../cmd/controller``.
  The root module's zip leaves out ``cmd/``, because Go excludes nested modules. So no
  wrapper ``go.mod`` can require them. Ours read cert-manager's own configuration files
  (``ControllerConfiguration`` and ``CAInjectorConfiguration``) with cert-manager's loader,
  defaults and validation, and start what upstream's start. Each file's header lists what
  they leave out (leader election, metrics/healthz/pprof for the controller).
* One patch (``VENAFI_PATCH``). Without it the controller's configuration package pulls in
  the Venafi issuer's client library, ``github.com/Venafi/vcert/v5`` v5.13.7. Its module zip
  is refused ("not available") by the module proxy this project builds against. No
  available version (v5.12.x) has the packages cert-manager imports. The patch names the two
  Venafi controllers by their string names instead of importing them. The binary then leaves
  out the Venafi issuer. Every other controller and issuer (self-signed, CA, ACME, Vault) is
  in it, and the default controller lists are unchanged.

The wrapper module requires cert-manager at the pinned version, replaced by a private,
patched copy of the downloaded module. It is named under ``github.com/cert-manager/
cert-manager/`` so that Go lets it import cert-manager's ``internal/`` packages, as
upstream's own binary modules do.

**How it runs** (``start_cert_manager``). cert-manager's six CRDs are applied from the same
module. Each binary gets its own client certificate in ``system:masters`` (cert-manager's
RBAC is not reproduced here). Each gets a configuration file with leader election off (one
replica; no Lease to wait for), ``clusterResourceNamespace: cert-manager`` (where
ClusterIssuers keep their Secrets, as cert-manager's install sets it) and the injector's
metrics server off. No webhook component runs. It only validates and defaults cert-manager's
objects on admission, and the CRDs' schemas already do the validation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
from http import HTTPStatus
from pathlib import Path

import yaml

from devcluster import pinned, third_party_crds
from devcluster.binaries import (
    BinaryUnavailableError,
    Progress,
    build_lock,
    cache_root,
    go_build,
    go_module_dir,
    go_toolchain,
)
from devcluster.cluster import ControlPlaneError, LocalControlPlane
from linkerd_config.kube.resource import NAMESPACES

MODULE = "github.com/cert-manager/cert-manager"
WRAPPER_MODULE = f"{MODULE}/linkerd-config-devcluster"
"""Under cert-manager's path so that its ``internal/`` packages may be imported."""
MAINS = Path(__file__).resolve().parent / "cert_manager_mains"
BINARIES = ("controller", "cainjector")
NAMESPACE = "cert-manager"
"""Where cert-manager runs in a cluster: its cluster resource namespace here."""

CRD_KINDS = (
    ("cert-manager.io", "certificates"),
    ("cert-manager.io", "certificaterequests"),
    ("cert-manager.io", "issuers"),
    ("cert-manager.io", "clusterissuers"),
    ("acme.cert-manager.io", "orders"),
    ("acme.cert-manager.io", "challenges"),
)
"""All of cert-manager's CRDs. The controller's default set includes the ACME order and
challenge controllers, whose informers never sync without their CRDs."""

_DEFAULTS_GO = "internal/apis/config/controller/v1alpha1/defaults.go"
_VENAFI_CONTROLLERS = {
    "crvenaficontroller": ("pkg/controller/certificaterequests/venafi", "CRControllerName"),
    "csrvenaficontroller": (
        "pkg/controller/certificatesigningrequests/venafi",
        "CSRControllerName",
    ),
}
VENAFI_PATCH = (_DEFAULTS_GO, _VENAFI_CONTROLLERS)
"""In ``defaults.go``, each import alias of a Venafi controller package is removed. Its
``alias.Constant`` uses become that constant's string, read from the package's own source."""


def bin_dir() -> Path:
    """Keyed by the version and by what we add (mains, patch), so changing either rebuilds."""
    digest = hashlib.sha256()
    for path in sorted(MAINS.rglob("*.go")):
        digest.update(path.relative_to(MAINS).as_posix().encode() + b"\0" + path.read_bytes())
    digest.update(json.dumps(VENAFI_PATCH).encode())
    return cache_root() / f"cert-manager-v{pinned.CERT_MANAGER}-{digest.hexdigest()[:12]}" / "bin"


def ensure_cert_manager(progress: Progress = print) -> dict[str, Path]:
    """cert-manager's ``controller`` and ``cainjector``, built on first use and cached."""
    out = bin_dir()
    paths = {name: out / name for name in BINARIES}
    if all(_executable(p) for p in paths.values()):
        return paths
    with build_lock("cert-manager"):
        if not all(_executable(p) for p in paths.values()):
            go = go_toolchain(
                f"cert-manager v{pinned.CERT_MANAGER}'s controller and cainjector",
                "deploy an overlay that needs no cert-manager (manifests/own-certs)",
            )
            _build(go, out, progress)
    return paths


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _build(go: str, out: Path, progress: Progress) -> None:
    root = out.parent
    root.mkdir(parents=True, exist_ok=True)
    version = f"v{pinned.CERT_MANAGER}"
    progress(f"downloading {MODULE} {version} (Go module proxy, checksum-verified)")
    module = go_module_dir(go, MODULE, version, cwd=root)
    directive = _go_directive(module / "go.mod")
    _check_go_version(go, directive)

    src = root / "src"
    _remove(src)
    copy = src / "cert-manager"
    shutil.copytree(module, copy, copy_function=shutil.copyfile)
    _writable(copy)
    patch_venafi_out(copy)
    for name in BINARIES:
        (src / name).mkdir(parents=True)
        shutil.copyfile(MAINS / name / "main.go", src / name / "main.go")
    (src / "go.mod").write_text(
        f"module {WRAPPER_MODULE}\n\n"
        f"go {directive}\n\n"
        f"require {MODULE} {version}\n\n"
        f"replace {MODULE} => ./cert-manager\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    ldflags = f"-X {MODULE}/pkg/util.AppVersion={version}"
    for name in BINARIES:
        go_build(go, src, f"cert-manager {name}", f"./{name}", ldflags, out / name, progress)


def _writable(tree: Path) -> None:
    """copytree gives the copy's folders the module cache's read-only modes."""
    for folder, _, _ in os.walk(tree):
        Path(folder).chmod(0o755)


def _remove(tree: Path) -> None:
    if tree.exists():
        _writable(tree)
        shutil.rmtree(tree)


def _go_directive(go_mod: Path) -> str:
    match = re.search(r"^go\s+(\S+)\s*$", go_mod.read_text(), re.MULTILINE)
    if match is None:
        raise BinaryUnavailableError(f"{go_mod} has no go directive")
    return match.group(1)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _check_go_version(go: str, needed: str) -> None:
    """Say plainly when the local Go is older than cert-manager's go.mod requires (with
    GOTOOLCHAIN=local, Go would not fetch a newer toolchain itself)."""
    proc = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60, check=False
    )
    have = proc.stdout.strip()
    if proc.returncode == 0 and _version_tuple(have) < _version_tuple(needed):
        raise BinaryUnavailableError(
            f"cert-manager v{pinned.CERT_MANAGER} needs Go {needed} or newer; {go} is {have}"
        )


def patch_venafi_out(tree: Path) -> None:
    """Apply ``VENAFI_PATCH`` to a private copy of the module (see the module docstring)."""
    path = tree / _DEFAULTS_GO
    text = path.read_text()
    for alias, (package, constant) in _VENAFI_CONTROLLERS.items():
        source = "\n".join(p.read_text() for p in sorted((tree / package).glob("*.go")))
        value = re.search(rf'^\s*{constant}\s*=\s*("[^"]+")', source, re.MULTILINE)
        import_line = f'\t{alias} "{MODULE}/{package}"\n'
        if value is None or text.count(import_line) != 1:
            raise BinaryUnavailableError(
                f"{path}: expected one import of {alias} and {package}'s {constant} to patch; "
                "the source differs from the one this patch was written for"
            )
        text = text.replace(import_line, "").replace(f"{alias}.{constant}", value.group(1))
    if '/venafi"' in text:
        raise BinaryUnavailableError(f"{path}: still imports a Venafi package after patching")
    path.write_text(text)


# -- running -----------------------------------------------------------------------------------


def crd_files() -> list[Path]:
    """cert-manager's CRDs as its module ships them (``deploy/crds``)."""
    return [
        third_party_crds.crd_path(
            plural, dataclasses.replace(third_party_crds.CERT_MANAGER, group=group)
        )
        for group, plural in CRD_KINDS
    ]


def start_cert_manager(cp: LocalControlPlane) -> None:
    """Apply cert-manager's CRDs and start its controller and CA injector on ``cp``; return
    once both have synced their caches and started their controllers."""
    if any(name.startswith("cert-manager-") for name in cp.pids()):
        raise ControlPlaneError("cert-manager already runs on this control plane")
    binaries = ensure_cert_manager(cp.progress)
    third_party_crds.apply(cp, crd_files())
    _create_namespace(cp, NAMESPACE)
    configs = {
        "controller": {
            "apiVersion": "controller.config.cert-manager.io/v1alpha1",
            "kind": "ControllerConfiguration",
            "clusterResourceNamespace": NAMESPACE,
        },
        "cainjector": {
            "apiVersion": "cainjector.config.cert-manager.io/v1alpha1",
            "kind": "CAInjectorConfiguration",
            "metricsListenAddress": "0",
        },
    }
    accounts = {"controller": "cert-manager", "cainjector": "cert-manager-cainjector"}
    for name in BINARIES:
        component = f"cert-manager-{name}"
        kubeconfig = cp.add_user(
            f"system:serviceaccount:{NAMESPACE}:{accounts[name]}",
            ["system:masters"],
            cp.workdir / f"{component}.kubeconfig",
        )
        config = cp.workdir / f"{component}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    **configs[name],
                    "kubeConfig": str(kubeconfig),
                    "leaderElectionConfig": {"enabled": False},
                    "logging": {"format": "text", "verbosity": 2},
                }
            )
        )
        ready = cp.workdir / f"{component}.ready"
        ready.unlink(missing_ok=True)
        cp.launch_component(
            component, [str(binaries[name]), f"--config={config}", f"--ready-file={ready}"]
        )
        cp.wait_for(f"cert-manager's {name} started", ready.exists)


def _create_namespace(cp: LocalControlPlane, name: str) -> None:
    try:
        cp.api_request("POST", NAMESPACES.path(), {"metadata": {"name": name}})
    except urllib.error.HTTPError as exc:
        if exc.code != HTTPStatus.CONFLICT:
            raise


def main() -> None:
    """``python -m devcluster.cert_manager``: build (or find) both binaries."""
    for name, path in ensure_cert_manager(lambda line: print(line, file=sys.stderr)).items():
        print(f"cert-manager {name}: {path}", flush=True)


if __name__ == "__main__":
    main()
