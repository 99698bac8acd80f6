"""Linkerd's images for the real node, made here (no registry is reachable): a Debian bookworm
base made by mmdebstrap, and on it, in Linkerd's own layout (edge-26.8.3's
``Dockerfile.proxy`` and ``Dockerfile.controller``),

- the proxy image: ``/usr/lib/linkerd/linkerd2-proxy``, ``linkerd2-proxy-identity`` (its
  entrypoint, which execs that hard-coded path) and ``linkerd2-proxy-init``, which runs from
  this image as the ``linkerd-init`` container: as uid 65534 with NET_ADMIN and NET_RAW only
  through file capabilities, which Linkerd sets with ``setcap cap_net_raw,cap_net_admin+eip``
  on it and on iptables' two multi-binaries, and which are set here as the same
  ``security.capability`` extended attributes in the layer;
- the controller image: ``/controller`` (identity, destination, the injector, the
  ServiceProfile validator: Linkerd's own binary, ``linkerd_binaries.ensure_linkerd``) and
  ``/linkerd-policy-controller``;
- the data-plane tests' workload (``testapp/main.go``: a server and a counting client), static,
  on no base.

All of them go into one OCI layout (the base layer stored once), cached under a key of every
input, that ``RealNode.import_image`` loads into the node's containerd.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import time
from pathlib import Path

from devcluster import SOURCE_ROOT, container_image, pinned
from devcluster.binaries import (
    BinaryUnavailableError,
    Progress,
    build_lock,
    cache_root,
    go_build,
    go_toolchain,
)
from devcluster.linkerd_binaries import ensure_dataplane, ensure_linkerd, file_sha256
from devcluster.real_node import (
    LayerFile,
    OciImage,
    file_capabilities,
    layer_tar,
    write_oci_layout,
)

TAG = pinned.LINKERD_DATAPLANE.release.tag
PROXY_IMAGE = "localhost/linkerd/proxy"
CONTROLLER_IMAGE = "localhost/linkerd/controller"
TESTAPP_IMAGE = "localhost/linkerd-config/testapp:dev"
BASE_PACKAGES = ("iptables", "ca-certificates")
"""On Debian's minbase (glibc and libgcc for the Rust binaries, coreutils' ``sleep``):
iptables for proxy-init (``xtables-nft-multi``, ``xtables-legacy-multi``)."""
SLIM = (
    *(
        f"--dpkgopt=path-exclude=/usr/share/{folder}/*"
        for folder in ("doc", "man", "locale", "info")
    ),
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
)
"""Without documentation and translations (a quarter of the base; each cluster imports it),
keeping each package's copyright file."""
CAP_NET_ADMIN = 12
CAP_NET_RAW = 13
_CAPABLE = ("usr/sbin/xtables-legacy-multi", "usr/sbin/xtables-nft-multi")
TESTAPP_SOURCE = SOURCE_ROOT / "devcluster" / "testapp"
_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_LAYOUT_VERSION = "1"
"""Bumped when what this module puts in the images changes (part of the cache key)."""


def proxy_image() -> str:
    return f"{PROXY_IMAGE}:{TAG}"


def controller_image() -> str:
    return f"{CONTROLLER_IMAGE}:{TAG}"


def ensure_testapp(progress: Progress = print) -> Path:
    """The test workload's static binary, built from ``testapp/`` (cached by its source)."""
    sources = sorted(TESTAPP_SOURCE.glob("*"))
    key = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sources))
    out = cache_root() / f"testapp-{key.hexdigest()[:12]}" / "testapp"
    if out.is_file():
        return out
    with build_lock("testapp"):
        if not out.is_file():
            go = go_toolchain("the data-plane tests' workload", "install Go")
            out.parent.mkdir(parents=True, exist_ok=True)
            go_build(go, TESTAPP_SOURCE, "testapp", ".", "", out, progress)
    return out


def debian_base(progress: Progress = print) -> Path:
    """Debian bookworm's minbase with ``BASE_PACKAGES``, as a root file system tar (cached).

    mmdebstrap picks its output format from the file's name: the name ends in ``.tar``."""
    key = hashlib.sha256(" ".join((container_image.DEBIAN_SUITE, *BASE_PACKAGES, *SLIM)).encode())
    out = cache_root() / f"debian-base-{key.hexdigest()[:12]}" / "rootfs.tar"
    if out.is_file():
        return out
    with build_lock("debian-base"):
        if out.is_file():
            return out
        if shutil.which("mmdebstrap") is None:
            raise BinaryUnavailableError(
                "cannot make the images' Debian base: needs mmdebstrap "
                "(Debian: apt-get install mmdebstrap)"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / "making.tar"  # .tar: mmdebstrap writes a tarball
        progress(f"making the images' Debian {container_image.DEBIAN_SUITE} base (cached in {out})")
        started = time.monotonic()
        try:
            command = container_image.mmdebstrap_command(tmp, packages=BASE_PACKAGES, options=SLIM)
            container_image.run_command(command, progress=progress)
        except container_image.ContainerToolError as exc:
            tmp.unlink(missing_ok=True)
            raise BinaryUnavailableError(f"the images' Debian base: {exc}") from None
        tmp.replace(out)
        progress(f"made the Debian base in {time.monotonic() - started:.0f} s")
    return out


def ensure_images(progress: Progress = print) -> Path:
    """The OCI layout (a tar) holding the proxy, controller and test workload images."""
    dataplane = ensure_dataplane(progress)
    controller = ensure_linkerd(TAG, "controller", progress)
    testapp = ensure_testapp(progress)
    base = debian_base(progress)
    inputs = [*dataplane.values(), controller, testapp, base]
    key = hashlib.sha256(
        (_LAYOUT_VERSION + "".join(file_sha256(p) for p in inputs)).encode()
    ).hexdigest()[:12]
    out = cache_root() / f"linkerd-images-{TAG}-{key}" / "images.oci.tar"
    if out.is_file():
        return out
    with build_lock("linkerd-images"):
        if out.is_file():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        tmp = out.with_suffix(".tmp")
        write_oci_layout(tmp, images(base, dataplane, controller, testapp))
        tmp.replace(out)
        progress(f"wrote Linkerd's images to {out} in {time.monotonic() - started:.0f} s")
    return out


def images(
    base: Path, dataplane: dict[str, Path], controller: Path, testapp: Path
) -> list[OciImage]:
    """The three images, the proxy's and the controller's on ``base``."""
    caps = {"security.capability": file_capabilities(CAP_NET_ADMIN, CAP_NET_RAW)}
    with tarfile.open(base) as rootfs:
        capable = {path: _member(rootfs, path) for path in _CAPABLE}
    proxy_files = {
        f"usr/lib/linkerd/{name}": LayerFile(dataplane[name].read_bytes())
        for name in ("linkerd2-proxy", "linkerd2-proxy-identity")
    }
    proxy_files["usr/lib/linkerd/linkerd2-proxy-init"] = LayerFile(
        dataplane["linkerd2-proxy-init"].read_bytes(), xattrs=caps
    )
    proxy_files.update({path: LayerFile(data, xattrs=caps) for path, data in capable.items()})
    version = f"LINKERD_CONTAINER_VERSION_OVERRIDE={TAG}"
    return [
        OciImage(
            proxy_image(),
            (base, layer_tar(proxy_files)),
            {
                "Entrypoint": ["/usr/lib/linkerd/linkerd2-proxy-identity"],
                "User": "65534",
                "Env": [
                    _PATH,
                    version,
                    "LINKERD2_PROXY_LOG=warn,linkerd=info",
                    "LINKERD2_PROXY_LOG_FORMAT=plain",
                ],
            },
        ),
        OciImage(
            controller_image(),
            (
                base,
                layer_tar(
                    {
                        "controller": LayerFile(controller.read_bytes()),
                        "linkerd-policy-controller": LayerFile(
                            dataplane["linkerd-policy-controller"].read_bytes()
                        ),
                    }
                ),
            ),
            {"Entrypoint": ["/controller"], "Env": [_PATH, version]},
        ),
        OciImage(
            TESTAPP_IMAGE,
            (layer_tar({"testapp": LayerFile(testapp.read_bytes())}),),
            {"Entrypoint": ["/testapp"], "User": "65532:65532"},
        ),
    ]


def _member(rootfs: tarfile.TarFile, path: str) -> bytes:
    """A regular file of the base (mmdebstrap writes ``./usr/...``)."""
    for name in (f"./{path}", path):
        try:
            member = rootfs.getmember(name)
        except KeyError:
            continue
        extracted = rootfs.extractfile(member)
        if member.isfile() and extracted is not None:
            return extracted.read()
    raise BinaryUnavailableError(f"the Debian base has no file {path}")
