"""Linkerd's own install output, rendered by its CLI: the starting point of a modern cluster.

``linkerd install --ignore-cluster`` renders the whole control plane without asking a cluster;
we keep what a local control plane without containers can use: the configuration the proxy
injector reads (``linkerd-config`` with its Helm ``values``, ``linkerd-identity-trust-roots``)
and the injector's MutatingWebhookConfiguration. Nothing here is written by hand.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import yaml

from devcluster.binaries import BinaryUnavailableError, Progress
from devcluster.linkerd_binaries import ensure_linkerd

Obj = dict[str, Any]


@dataclass(frozen=True)
class LinkerdInstall:
    """The objects one ``linkerd install`` rendered, by kind and name."""

    tag: str
    objects: tuple[Obj, ...]

    def get(self, kind: str, name: str) -> Obj:
        for obj in self.objects:
            if obj.get("kind") == kind and obj.get("metadata", {}).get("name") == name:
                return obj
        raise KeyError(f"linkerd install ({self.tag}) rendered no {kind} {name}")

    @property
    def namespace(self) -> Obj:
        return self.get("Namespace", "linkerd")

    @property
    def configmaps(self) -> list[Obj]:
        """What the injector reads: linkerd-config and the trust roots, as rendered."""
        return [
            self.get("ConfigMap", "linkerd-config"),
            self.get("ConfigMap", "linkerd-identity-trust-roots"),
        ]

    @property
    def injector_webhook(self) -> Obj:
        return self.get("MutatingWebhookConfiguration", "linkerd-proxy-injector-webhook-config")


def render_install(tag: str, *args: str, progress: Progress = print) -> LinkerdInstall:
    """Run ``linkerd install --ignore-cluster [args]`` of release ``tag`` and parse its output."""
    cli = ensure_linkerd(tag, "linkerd", progress)
    done = subprocess.run(
        [str(cli), "install", "--ignore-cluster", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise BinaryUnavailableError(
            f"linkerd install --ignore-cluster ({tag}) failed: {done.stderr.strip()[-2000:]}"
        )
    objects = tuple(doc for doc in yaml.safe_load_all(done.stdout) if isinstance(doc, dict))
    return LinkerdInstall(tag, objects)


def main() -> None:
    """Print the ConfigMaps a release's ``linkerd install`` renders (the unit-test fixture)."""
    tag = sys.argv[1] if len(sys.argv) > 1 else "edge-26.8.3"
    rendered = render_install(tag, progress=lambda message: print(message, file=sys.stderr))
    print(
        f"# Rendered by Linkerd {tag}'s own CLI, `linkerd install --ignore-cluster`: the two\n"
        "# ConfigMaps its proxy injector reads. Regenerate with\n"
        f"# `python -m devcluster.linkerd_install {tag}`."
    )
    print(yaml.safe_dump_all(rendered.configmaps, sort_keys=False), end="")


if __name__ == "__main__":
    main()
