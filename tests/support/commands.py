"""The ``linkerd-config`` command run as users run it (a process of its own, against a local
control plane): its exit code and output, and the JSON of ``plan`` and ``status``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import yaml

Json = dict[str, Any]


async def cli(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    """``linkerd-config <args> --kubeconfig <kubeconfig>``: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "linkerd_config",
        *args,
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def plan_json(kubeconfig: Path, path: Path) -> tuple[int, Json]:
    """``plan -f path -o json``: its exit code (0 or 2, else the test fails) and answer."""
    code, out, err = await cli(kubeconfig, "plan", "-f", str(path), "-o", "json")
    assert code in (0, 2), (code, out, err)
    found: Json = json.loads(out)
    return code, found


async def plan_object(kubeconfig: Path, obj: Json, folder: Path) -> tuple[int, Json]:
    """``plan_json`` of ``obj``, written as YAML to a file in ``folder`` (as users hand it)."""
    path = folder / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return await plan_json(kubeconfig, path)


async def status_json(kubeconfig: Path) -> tuple[int, list[Json]]:
    """``status -o json``: its exit code (0 or 2, else the test fails) and reports."""
    code, out, err = await cli(kubeconfig, "status", "-o", "json")
    assert code in (0, 2), (code, out, err)
    found: list[Json] = json.loads(out)
    return code, found


def states(lines: list[Json]) -> dict[str, tuple[str, list[str]]]:
    """``plan``'s or ``status``'s workload lines (``-o json``): name -> (state, reasons)."""
    return {w["name"]: (w["state"], [r["reason"] for r in w["reasons"]]) for w in lines}
