"""``make binaries``: find or build every binary the local control plane and Linkerd need."""

from __future__ import annotations

from linkerd_config.devcluster import pinned
from linkerd_config.devcluster.binaries import ensure_binaries, ensure_helm
from linkerd_config.devcluster.linkerd_binaries import ensure_linkerd


def main() -> None:
    for name, path in ensure_binaries().items():
        print(f"{name}: {path}", flush=True)
    print(f"helm: {ensure_helm()}", flush=True)
    for rel in pinned.LINKERD_RELEASES.values():
        print(f"linkerd {rel.tag} controller: {ensure_linkerd(rel.tag)}", flush=True)
        if rel.builds_cli:
            print(f"linkerd {rel.tag} cli: {ensure_linkerd(rel.tag, 'linkerd')}", flush=True)


if __name__ == "__main__":
    main()
