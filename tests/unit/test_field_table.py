"""The field table is the one description of a LinkerdConfig field (issue 25).

The proof is the one import contracts get: a scratch copy of the package with one row added
(and one removed), where the CRD schema, validation, both formats and the docs follow without
another edit. Beside it, the table's own consistency: every legacy column names a real
``config.proto`` field, every such field has exactly one row, and the README's table is the
generated one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from linkerd_config.linkerd.formats import field_table
from linkerd_config.linkerd.formats.field_table import FIELDS, by_path, spec_leaves
from linkerd_config.linkerd.formats.legacy import config_pb2

ROOT = Path(__file__).resolve().parents[2]

# A field no Linkerd has: the scratch copy's, values-only, from a made-up release on.
SCRATCH_ROW = """
    ConfigField(
        ("proxy", "scratchTimeout"),
        DURATION,
        "A scratch field (tests/unit/test_field_table.py).",
        None,
        ValuesField(("proxy", "scratchTimeout"), nested=True, releases=releases("edge-24.1.1")),
    ),
"""

# Run inside the scratch copy: what the package there says about the new row, as JSON.
PROBE = r"""
import copy, json, sys
from linkerd_config.linkerd.formats import FormatError, Installed, format_for
from linkerd_config.linkerd.formats.field_table import docs_table
from linkerd_config.linkerd.linkerdconfig_resource import crd
from linkerd_config.linkerd.validation import validate

schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
proxy = schema["properties"]["proxy"]["properties"]

def obj(version, proxy_version, extra):
    return {"apiVersion": "config.linkerd.io/v1alpha1", "kind": "LinkerdConfig",
            "metadata": {"name": "scratch", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"global": {"version": version},
                     "proxy": {"proxyVersion": proxy_version, **extra}}}

modern = lambda value: obj("edge-26.8.3", "edge-26.8.3", {"scratchTimeout": value})
values = "linkerdVersion: edge-26.8.3\nproxy:\n  image:\n    version: edge-26.8.3\n"
installed = Installed("linkerd/linkerd-config", {"values": values})
rendered = format_for("edge-26.8.3").rendering(modern("5s")["spec"], installed).data["values"]
try:
    format_for("edge-20.9.4").render({"global": {}, "proxy": {"scratchTimeout": "5s"}})
    legacy = []
except FormatError as error:
    legacy = [list(e) for e in error.errors if e.field == "spec.proxy.scratchTimeout"]
old_release = format_for("edge-23.8.1").check(modern("5s")["spec"])
json.dump({
    "schema": proxy.get("scratchTimeout"),
    "gone": "logFormat" in proxy,
    "accepted": [str(e) for e in validate(modern("5s"))],
    "refused": [list(e) for e in validate(modern("5 parsecs"))],
    "rendered": rendered,
    "legacy": legacy,
    "old_release": [list(e) for e in old_release],
    "docs": [line for line in docs_table().splitlines()
             if "scratchTimeout" in line or "logFormat" in line],
}, sys.stdout)
"""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The package copied, the scratch row added and the ``logFormat`` row removed, and what
    it then says."""
    copy = tmp_path_factory.mktemp("scratch")
    shutil.copytree(
        ROOT / "linkerd_config",
        copy / "linkerd_config",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    table = copy / "linkerd_config" / "linkerd" / "formats" / "field_table.py"
    text = table.read_text()
    end = text.index("\n)\n\nSECTIONS")
    text = text[:end] + SCRATCH_ROW.rstrip() + text[end:]
    start = text.index('    ConfigField(\n        ("proxy", "logFormat"),')
    stop = text.index("\n    ),\n", start) + len("\n    ),\n")
    table.write_text(text[:start] + text[stop:])
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=copy,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_new_row_is_in_the_schema(scratch: dict[str, Any]) -> None:
    assert scratch["schema"]["type"] == "string"
    assert scratch["schema"]["pattern"] == field_table.DURATION.pattern
    assert scratch["schema"]["description"].startswith("A scratch field")


def test_a_new_row_is_validated_by_its_grammar(scratch: dict[str, Any]) -> None:
    assert scratch["accepted"] == []
    assert scratch["refused"] == [
        ["spec.proxy.scratchTimeout", "'5 parsecs' is not a duration: unknown unit ' parsecs' "
         "(use ns, us, ms, s, m or h)"]
    ]  # fmt: skip


def test_a_new_row_is_written_by_the_values_format_and_gated(scratch: dict[str, Any]) -> None:
    assert "scratchTimeout: 5s" in scratch["rendered"]
    assert scratch["old_release"] == [
        ["spec.proxy.scratchTimeout", "needs Linkerd edge-24.1.1 or later"]
    ]


def test_a_new_row_is_refused_by_the_legacy_format_naming_the_values(
    scratch: dict[str, Any],
) -> None:
    assert scratch["legacy"] == [
        [
            "spec.proxy.scratchTimeout",
            "is not in Linkerd's legacy config format; only the values format has it "
            "(Linkerd edge-24.1.1 or later)",
        ]
    ]


def test_a_new_row_is_documented_and_a_removed_one_is_gone(scratch: dict[str, Any]) -> None:
    assert scratch["gone"] is False
    assert len(scratch["docs"]) == 1
    assert scratch["docs"][0].startswith("| `proxy.scratchTimeout` | a duration such as")


# -- the table's own consistency -----------------------------------------------------------------


def _proto_fields(message: Any, prefix: str = "") -> set[str]:
    """Every leaf field path of a ``config_pb2`` message (``identity_context.scheme``)."""
    found: set[str] = set()
    for field in message.DESCRIPTOR.fields:
        path = f"{prefix}{field.name}"
        sub = field.message_type
        if (
            sub is not None
            and sub.name not in ("Duration", "Port", "PortRange")
            and not (field.is_repeated)
        ):
            found |= _proto_fields(getattr(config_pb2, sub.name), f"{path}.")
        else:
            found.add(path)
    return found


@pytest.mark.parametrize("section", ["global", "proxy"])
def test_every_proto_field_has_exactly_one_row(section: str) -> None:
    message = config_pb2.Global if section == "global" else config_pb2.ProxyWithPortRanges
    fields = _proto_fields(message) - {"auto_inject_context"}  # Linkerd always writes null
    rows = [
        row.legacy.proto.removesuffix(".port")
        if row.legacy.proto.endswith("_port.port")
        else row.legacy.proto
        for row in FIELDS
        if row.path[0] == section and row.legacy is not None
    ]
    assert sorted(rows) == sorted(set(rows))
    assert set(rows) == {f.removesuffix(".port") if f.endswith("_port.port") else f for f in fields}


def test_every_row_has_a_valid_example_and_one_path() -> None:
    assert len(by_path()) == len(FIELDS)
    for row in FIELDS:
        assert row.grammar.problems(row.grammar.example) == [], row.name


def test_the_readme_table_is_generated() -> None:
    readme = (ROOT / "README.md").read_text()
    assert field_table.with_docs_table(readme) == readme, "run make generate"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"proxy": {"adminPort": 1}}, [("spec.proxy.adminPort", "")]),
        ({"proxy": {"proxyImage": "x"}}, [("spec.proxy.proxyImage", "must be an object")]),
        ({"proxy": {"nope": 1}}, [("spec.proxy.nope", "is not a LinkerdConfig field")]),
        ({"global": {"identityContext": {"scheme": None}}}, []),
        ({"rollout": {"paused": True}}, []),
    ],
)
def test_spec_leaves(spec: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert [(s.field, s.problem) for s in spec_leaves(spec)] == expected
