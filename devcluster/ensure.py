"""``make binaries``: find or build every binary the local control plane and Linkerd need."""

from __future__ import annotations

from devcluster import pinned, real_node, system_packages
from devcluster.binaries import (
    NODE_BINARIES,
    BinaryUnavailableError,
    ensure_binaries,
    ensure_helm,
    ensure_prometheus,
)
from devcluster.cert_manager import ensure_cert_manager
from devcluster.linkerd_binaries import ensure_dataplane, ensure_linkerd
from devcluster.linkerd_images import ensure_images
from devcluster.status_readers import ensure_status_readers


def main() -> None:
    still = system_packages.ensure()
    if still:
        print(f"Debian packages missing: {' '.join(still)}", flush=True)
    for name, path in ensure_binaries().items():
        print(f"{name}: {path}", flush=True)
    print(f"helm: {ensure_helm()}", flush=True)
    for name, path in ensure_prometheus().items():
        print(f"{name}: {path}", flush=True)
    for name, path in ensure_cert_manager().items():
        print(f"cert-manager {name}: {path}", flush=True)
    print(
        f"status-readers (kstatus, Flux's wait, gopher-lua): {ensure_status_readers()}", flush=True
    )
    missing = real_node.missing_requirements()
    if missing:
        # The real node's tests will fail with the same list; everything else works.
        print(f"real node: this machine lacks {'; '.join(missing)}", flush=True)
    else:
        for name, path in ensure_binaries(NODE_BINARIES).items():
            print(f"{name}: {path}", flush=True)
        print(f"pause image: {real_node.pause_image_archive()}", flush=True)
    for rel in pinned.LINKERD_RELEASES.values():
        print(f"linkerd {rel.tag} controller: {ensure_linkerd(rel.tag)}", flush=True)
        if rel.builds_cli:
            print(f"linkerd {rel.tag} cli: {ensure_linkerd(rel.tag, 'linkerd')}", flush=True)
    try:
        for name, path in ensure_dataplane().items():
            print(f"linkerd {pinned.LINKERD_DATAPLANE.release.tag} {name}: {path}", flush=True)
        if not missing:
            # Linkerd's images for the real node's data-plane tests (mmdebstrap makes the base).
            images = ensure_images()
            print(f"linkerd images (proxy, controller, test workload): {images}", flush=True)
    except BinaryUnavailableError as exc:
        # The data-plane tests will fail with the same reason; everything else works.
        print(f"linkerd data plane: {exc}", flush=True)


if __name__ == "__main__":
    main()
