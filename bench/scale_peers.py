"""The peers ``bench/scale_bench.py`` measures the controller against, each a process of its
own, so start-up, memory and CPU are whole-process figures for every one of them:

``list``    the physical limit of a cold start: one paginated LIST (500 a page) of the
            opted-in Running pods, each page decoded, nothing kept; then it reports ready.
            With ``--metadata-only``, the same LIST as PartialObjectMetadata (what the
            controller's pod informer asks for).
``revert``  the physical limit of drift revert: one watch on the ConfigMap, and a PATCH back
            of the managed key whenever it differs from the desired value.
``kopf``    kopf doing the same core job as a Python user would write it: an index of the
            opted-in Running pods (ready once it holds them all) and an ``on.event`` handler
            reverting the managed key.

Each prints JSON lines on stdout: ``{"ready": true}`` once it has everything, then runs until
the bench stops it (``list`` until its stdin closes); the bench reads memory and CPU from
/proc. Run by the bench, not by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from linkerd_config.kube.resource import CONFIGMAPS
from linkerd_config.linkerd.mesh import CANDIDATE_LABEL_SELECTOR, RUNNING_FIELD_SELECTOR

PAGE = 500
PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def say(**message: Any) -> None:
    sys.stdout.write(orjson.dumps(message).decode() + "\n")
    sys.stdout.flush()


def bare_session(kubeconfig: str, folder: Path) -> tuple[str, aiohttp.ClientSession]:
    """aiohttp with the kubeconfig's client certificate: nothing else imported or kept, so
    the process is the smallest a Python LIST can be."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    cert, key = folder / "client.crt", folder / "client.key"
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    context.load_cert_chain(cert, key)
    connector = aiohttp.TCPConnector(ssl=context)
    return cluster["server"], aiohttp.ClientSession(connector=connector)


async def bare_list(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        server, session = bare_session(args.kubeconfig, Path(folder))
    headers = {"Accept": PARTIAL_METADATA_LIST} if args.metadata_only else {}
    async with session:
        params = {
            "labelSelector": CANDIDATE_LABEL_SELECTOR,
            "fieldSelector": RUNNING_FIELD_SELECTOR,
            "limit": str(PAGE),
        }
        count = 0
        while True:
            async with session.get(f"{server}/api/v1/pods", params=params, headers=headers) as resp:
                resp.raise_for_status()
                page = orjson.loads(await resp.read())
            count += len(page["items"])
            token = page["metadata"].get("continue")
            if not token:
                break
            params["continue"] = token
        say(ready=True, pods=count)
    await until_stdin_closes()


async def until_stdin_closes() -> None:
    """Stay alive (for the bench to read our memory) until it closes our stdin."""
    await asyncio.to_thread(sys.stdin.read)


async def bare_revert(args: argparse.Namespace) -> None:
    # Here, not at the top: the `list` peer must not pay for what it does not use.
    from linkerd_config.kube.client import MERGE_PATCH, KubeClient  # noqa: PLC0415
    from linkerd_config.kube.kubeconfig import load_access  # noqa: PLC0415

    desired = await asyncio.to_thread(Path(args.desired).read_text)
    path = CONFIGMAPS.path(args.namespace)
    async with KubeClient(await load_access(args.kubeconfig)) as kube:
        current = await kube.request("GET", CONFIGMAPS.path(args.namespace, args.name))
        version = current["metadata"]["resourceVersion"]
        say(ready=True)
        while True:
            params: dict[str, str | int | bool] = {
                "watch": True,
                "fieldSelector": f"metadata.name={args.name}",
                "resourceVersion": version,
                "allowWatchBookmarks": True,
            }
            async with kube.stream(path, params=params, total_timeout=0, read_timeout=90) as body:
                async for line in body:
                    event = orjson.loads(line)
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "MODIFIED":
                        continue
                    if (obj.get("data") or {}).get(args.key) != desired:
                        await kube.request(
                            "PATCH",
                            CONFIGMAPS.path(args.namespace, args.name),
                            body={"data": {args.key: desired}},
                            content_type=MERGE_PATCH,
                        )


def run_kopf(args: argparse.Namespace) -> None:
    import kopf  # noqa: PLC0415  (a bench-only dependency)

    from linkerd_config.kube.client import MERGE_PATCH, KubeClient  # noqa: PLC0415
    from linkerd_config.kube.kubeconfig import load_access  # noqa: PLC0415

    desired = Path(args.desired).read_text()
    expected = args.expect_pods
    state: dict[str, Any] = {"ready": False, "kube": None}
    reconcile_label, reconcile_value = CANDIDATE_LABEL_SELECTOR.split("=")

    @kopf.on.login()
    def login(**kwargs: Any) -> Any:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup()
    async def configure(settings: Any, **_: Any) -> None:
        settings.posting.enabled = False
        settings.scanning.disabled = True
        settings.peering.standalone = True
        state["kube"] = KubeClient(await load_access(args.kubeconfig))
        state["kube"].open()

    @kopf.index(
        "pods",
        id="opted_in",
        labels={reconcile_label: reconcile_value},
        field="status.phase",
        value="Running",
    )
    def opted_in(namespace: str, name: str, annotations: Any, **_: Any) -> Any:
        return {(namespace, name): annotations.get("linkerd.io/proxy-version")}

    @kopf.on.event(
        "pods", labels={reconcile_label: reconcile_value}, field="status.phase", value="Running"
    )
    def seen(opted_in: Any, **_: Any) -> None:
        if not state["ready"] and len(opted_in) >= expected:
            state["ready"] = True
            say(ready=True, pods=len(opted_in))

    @kopf.on.event("configmaps", field="metadata.name", value=args.name)
    async def revert(body: Any, namespace: str, **_: Any) -> None:
        if namespace != args.namespace:
            return
        if (body.get("data") or {}).get(args.key) != desired:
            await state["kube"].request(
                "PATCH",
                CONFIGMAPS.path(args.namespace, args.name),
                body={"data": {args.key: desired}},
                content_type=MERGE_PATCH,
            )

    if expected == 0:
        say(ready=True, pods=0)
    logging.basicConfig(level=logging.WARNING)  # `kopf run --quiet`: no line per handler call
    os.environ["KUBECONFIG"] = args.kubeconfig
    kopf.run(clusterwide=True, standalone=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("peer", choices=["list", "revert", "kopf"])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="linkerd")
    parser.add_argument("--name", default="linkerd-config")
    parser.add_argument("--key", default="global")
    parser.add_argument("--desired", help="a file holding the managed key's desired value")
    parser.add_argument("--expect-pods", type=int, default=0)
    parser.add_argument(
        "--metadata-only", action="store_true", help="list: as PartialObjectMetadata"
    )
    args = parser.parse_args()
    if args.peer == "list":
        asyncio.run(bare_list(args))
        return
    if args.peer == "revert":
        asyncio.run(bare_revert(args))
        return
    run_kopf(args)


if __name__ == "__main__":
    main()
