"""What the kubelet does for a ConfigMap volume, for components we run without a kubelet.

Linkerd's proxy injector reads its configuration from files (``/var/run/linkerd/config``), not
from the API: in a cluster, the kubelet copies each ConfigMap update into the mounted volume,
eventually (about a minute by default). Nothing else tells the injector that ``linkerd-config``
changed, which is exactly why a controller must not restart pods the moment it writes.

This process watches ConfigMaps and projects each one's ``data`` into its folder the way the
kubelet's atomic writer does: the files go into a fresh ``..<timestamp>`` folder, a ``..data_tmp``
symlink to it is renamed over ``..data`` (one atomic step), and each key is a symlink
``key -> ..data/key``; a reader sees the old set or the new set, never a mix. Each update is
projected ``--delay`` seconds after it was seen (the latest content then), and every projection
is appended to ``--record`` as one JSON line, so a test can tell when the injector could first
have seen a configuration.

Run: ``python -m devcluster.configmap_volume --kubeconfig KC --namespace NS
--delay SECONDS --record FILE NAME=DIR [NAME=DIR ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS

DATA_LINK = "..data"


def project(folder: Path, data: dict[str, str]) -> str:
    """Write ``data`` into ``folder`` atomically, as the kubelet does; returns the payload."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    payload = folder / stamp
    payload.mkdir()
    for key, value in data.items():
        (payload / key).write_text(value)
        (payload / key).chmod(0o644)
    data_link = folder / DATA_LINK
    previous = os.readlink(data_link) if data_link.is_symlink() else None
    tmp_link = folder / f"{DATA_LINK}_tmp"
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(stamp)
    tmp_link.replace(data_link)  # rename(2): the switch a reader cannot see half of
    for key in data:
        user_link = folder / key
        if not user_link.is_symlink():
            user_link.symlink_to(f"{DATA_LINK}/{key}")
    for entry in folder.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in data:
            entry.unlink()
    if previous and previous != stamp:
        shutil.rmtree(folder / previous, ignore_errors=True)
    return stamp


class ConfigMapVolumes:
    """Projects each named ConfigMap of one namespace into its folder, ``delay`` after a change."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        folders: dict[str, Path],
        delay: float,
        record: Path,
    ) -> None:
        self.folders = folders
        self.delay = delay
        self.record = record
        self.informer = Informer(client, CONFIGMAPS, namespace=namespace, name="projected")
        # Invariant: a name is in _due while a projection of it is scheduled, so a burst of
        # updates within ``delay`` costs one write, of the newest content.
        self._due: dict[str, asyncio.TimerHandle] = {}
        self._projected: dict[str, dict[str, str]] = {}
        self.informer.add_handler(self._changed, lambda _old, new: self._changed(new))

    def _changed(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name in self.folders and name not in self._due:
            loop = asyncio.get_running_loop()
            self._due[name] = loop.call_later(self.delay, self._project, name)

    def _project(self, name: str) -> None:
        self._due.pop(name, None)
        obj = self.informer.store.get(f"{self.informer.namespace}/{name}")
        if obj is None:  # deleted meanwhile: like the kubelet, keep the last files
            return
        data: dict[str, str] = dict(obj.get("data") or {})
        if self._projected.get(name) == data:
            return
        stamp = project(self.folders[name], data)
        self._projected[name] = data
        line = {
            "configmap": name,
            "resourceVersion": obj["metadata"].get("resourceVersion"),
            "keys": sorted(data),
            "payload": stamp,
            "projected_at": time.time(),
        }
        with self.record.open("a") as f:
            f.write(json.dumps(line) + "\n")
        print(json.dumps({"msg": "projected", **line}), flush=True)

    async def run(self) -> None:
        try:
            await self.informer.run()
        finally:
            for handle in self._due.values():
                handle.cancel()


async def _main(args: argparse.Namespace) -> None:
    folders = {}
    for spec in args.volumes:
        name, _, folder = spec.partition("=")
        folders[name] = Path(folder)
    access = await load_access(args.kubeconfig)
    async with KubeClient(access, user_agent="linkerd-config-devcluster-kubelet") as client:
        volumes = ConfigMapVolumes(client, args.namespace, folders, args.delay, Path(args.record))
        task = asyncio.create_task(volumes.run(), name="configmap-volumes")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--record", required=True, help="JSON-lines file of projections")
    parser.add_argument("volumes", nargs="+", metavar="CONFIGMAP=FOLDER")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
