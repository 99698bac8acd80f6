"""The fixture of what ``linkerd install --set`` renders is Linkerd's, not ours: every command
it records is run again through the edge-26.8.3 CLI this project builds, and the value at the
path in the rendered linkerd-config must be the one recorded, with its YAML type.

(tests/unit/formats/test_injector_values.py then holds the values format to the fixture
without a CLI.)
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from devcluster.linkerd_binaries import ensure_linkerd

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "injector_values_edge-26.8.3.json"
PATHS: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["paths"]
# Recorded with a values file (a float --set cannot give) or a file of the user's (a PEM
# bundle): here, the same with a values file holding the sample.
BY_FILE = frozenset({"proxy.runtime.workers.maximumCPURatio"})


def at(root: Any, path: str) -> Any:
    for key in path.split("."):
        root = root.get(key) if isinstance(root, dict) else None
    return root


def values_file(path: str, value: Any, directory: Path) -> Path:
    doc: dict[str, Any] = {}
    node = doc
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    file = directory / f"{path}.yaml"
    file.write_text(yaml.safe_dump(doc))
    return file


async def rendered(cli: Path, argv: list[str]) -> Any:
    proc = await asyncio.create_subprocess_exec(
        str(cli), *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    for doc in yaml.safe_load_all(out):
        if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == "linkerd-config":
            return yaml.safe_load(doc["data"]["values"])
    raise AssertionError("linkerd install rendered no linkerd-config")


async def test_every_recorded_command_renders_what_the_fixture_says(tmp_path: Path) -> None:
    cli = await asyncio.to_thread(ensure_linkerd, "edge-26.8.3", "linkerd")
    limit = asyncio.Semaphore(8)
    wrong: list[str] = []

    async def check(entry: dict[str, Any]) -> None:
        path = entry["path"]
        if entry["sample"] == "@file":
            return  # a PEM: rendered verbatim (the unit test states one); needs an issuer too
        argv = shlex.split(entry["command"])[1:]  # drop "linkerd"
        if path in BY_FILE:
            argv = ["install", "--ignore-cluster", "-f"]
            argv.append(str(values_file(path, entry["sample"], tmp_path)))
        async with limit:
            values = await rendered(cli, argv)
        found = at(values, path)
        if found != entry["rendered"] or type(found) is not type(entry["rendered"]):
            wrong.append(f"{path}: {found!r} != recorded {entry['rendered']!r}")

    await asyncio.gather(*(check(entry) for entry in PATHS))
    assert wrong == []
