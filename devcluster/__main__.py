"""The local control plane for development, tests, the demo and the bench: ``python -m
devcluster up|status|env|load-image|down`` (``make dev-cluster-up`` runs it). Not part of the
product: the controller's package and image hold none of it (issue 38)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from devcluster import binaries
from devcluster.addons import ADDONS
from devcluster.binaries import cache_root


def _dev_cluster(args: argparse.Namespace) -> int:
    # Here, not at the top: `--help` should not pay for the cluster machinery.
    from devcluster import real_node, service  # noqa: PLC0415

    state_dir = Path(args.state_dir)
    try:
        if args.action == "up":
            ready = service.up(
                state_dir,
                workloads=not args.no_workloads,
                real_node=args.real_node,
                addons=tuple(args.addons),
            )
            print(f"control plane up at {ready['server']}")
            print(f"export KUBECONFIG={ready['kubeconfig']}")
            print(f"export PATH={ready['bin_dir']}:$PATH   # kubectl v{ready['kubernetes']}")
        elif args.action == "down":
            stopped = service.down(state_dir)
            print("control plane stopped" if stopped else "no control plane was running")
        elif args.action == "status":
            state = service.status(state_dir)
            if state is None:
                print("no control plane running")
                return 1
            print(json.dumps(state, indent=2))
        elif args.action == "load-image":
            state = service.status(state_dir)
            if state is None or not state.get("real_node"):
                print("no control plane with a real node; start one: up --real-node")
                return 1
            if not args.image:
                print(
                    "load-image needs an image: python -m devcluster load-image IMG",
                    file=sys.stderr,
                )
                return 1
            real_node.load_image(Path(state["real_node"]["containerd"]), args.image)
            print(f"loaded {args.image} into {state['real_node']['name']}'s containerd")
        elif args.action == "env":
            state = service.status(state_dir)
            if state is None:
                print("no control plane running; start it with: python -m devcluster up")
                return 1
            print(f"export KUBECONFIG={state['kubeconfig']}")
            print(f"export PATH={state['bin_dir']}:$PATH")
    except (
        service.DevClusterError,
        binaries.BinaryUnavailableError,
        real_node.RealNodeUnavailableError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser(prog: str = "python -m devcluster") -> argparse.ArgumentParser:
    dev = argparse.ArgumentParser(
        prog=prog,
        description="A real local control plane on loopback, for your own kubectl and for "
        "`linkerd-config run --kubeconfig`. Binaries are found or built on first use.",
        epilog="actions:\n"
        "  up      start it in the background (a supervisor process) and print the\n"
        "          KUBECONFIG and PATH exports to use it\n"
        "  status  print its state (server, kubeconfig, pids, which components are alive);\n"
        "          exit 1 when none is running\n"
        '  env     print only the exports, for eval "$(python -m devcluster env)"\n'
        "  load-image IMG\n"
        "          copy the image IMG from podman or docker (CONTAINER_TOOL) into the real\n"
        "          node's containerd (with up --real-node), as `kind load` does\n"
        "  down    stop it and remove every file up created",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dev.add_argument(
        "action", choices=["up", "down", "status", "env", "load-image"], help="see below"
    )
    dev.add_argument("image", nargs="?", help="load-image: the image to copy")
    dev.add_argument(
        "--state-dir",
        default=os.environ.get("LINKERD_CONFIG_DEV_CLUSTER_DIR", str(cache_root() / "dev-cluster")),
        help="where the kubeconfig and state live (env LINKERD_CONFIG_DEV_CLUSTER_DIR)",
    )
    dev.add_argument(
        "--no-workloads",
        action="store_true",
        help="only etcd and kube-apiserver: faster, but Deployments never get pods",
    )
    dev.add_argument(
        "--real-node",
        action="store_true",
        help="also a real node (kubelet, containerd, runc, kube-proxy) that runs the pods of "
        "namespace linkerd (kwok's node runs every other pod); needs root and Debian's "
        "containerd, runc, iptables and containernetworking-plugins",
    )
    dev.add_argument(
        "--with",
        dest="addons",
        action="append",
        default=[],
        choices=ADDONS,
        help="up: also run cert-manager (built from its Go module) or serve the Prometheus "
        "Operator's CRDs; what the default kustomize overlay needs (repeatable)",
    )
    dev.set_defaults(func=_dev_cluster)
    return dev


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
