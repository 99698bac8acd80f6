"""The field table is the one description of a LinkerdConfig field (issue 25).

The proof is the one import contracts get: a scratch copy of the package with one row added
(and one removed), where the CRD schema, validation, both formats and the docs follow without
another edit. Beside it, the table's own consistency: every legacy column names a real
``config.proto`` field, every such field has exactly one row, and the user guide's table is the
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

ROOT = Path(__file__).resolve().parents[3]

# A field no Linkerd has: the scratch copy's, values-only (v1alpha2), from a made-up release
# on. Adding a Linkerd value is this one line.
SCRATCH_ROW = """
    _linkerd("proxy.scratchTimeout", DURATION, "A scratch field.", releases("edge-24.1.1")),
"""

# Run inside the scratch copy: what the package there says about the new row, as JSON.
PROBE = r"""
import copy, json, sys
from linkerd_config.linkerd.spec.conversion import convert, to_hub
from linkerd_config.linkerd.formats import FormatError, Installed, format_for
from linkerd_config.linkerd.formats.field_table import docs_table
from linkerd_config.linkerd.spec.crd import crd
from linkerd_config.linkerd.admission.validation import validate

versions = {v["name"]: v for v in crd()["spec"]["versions"]}
def spec_schema(version):
    return versions[version]["schema"]["openAPIV3Schema"]["properties"]["spec"]
v2_proxy = spec_schema("v1alpha2")["properties"]["values"]["properties"]["proxy"]["properties"]
v1_proxy = spec_schema("v1alpha1")["properties"]["proxy"]["properties"]

def obj(version, proxy_version, extra):
    return {"apiVersion": "config.linkerd.io/v1alpha2", "kind": "LinkerdConfig",
            "metadata": {"name": "scratch", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"values": {"linkerdVersion": version,
                                "proxy": {"image": {"version": proxy_version}, **extra}}}}

modern = lambda value: obj("edge-26.8.3", "edge-26.8.3", {"scratchTimeout": value})
hub = to_hub(modern("5s"))
values = "linkerdVersion: edge-26.8.3\nproxy:\n  image:\n    version: edge-26.8.3\n"
installed = Installed("linkerd/linkerd-config", {"values": values})
rendered = format_for("edge-26.8.3").rendering(hub["spec"], installed).data["values"]
try:
    format_for("edge-20.9.4").render({"global": {}, "values": hub["spec"]["values"]})
    legacy = []
except FormatError as error:
    legacy = [list(e) for e in error.errors if e.field == "spec.values.proxy.scratchTimeout"]
old_release = format_for("edge-23.8.1").check(hub["spec"])
v1 = convert(modern("5s"), "v1alpha1")
json.dump({
    "schema": v2_proxy.get("scratchTimeout"),
    "in_v1alpha1": "scratchTimeout" in v1_proxy,
    "gone": "logFormat" in v2_proxy or "logFormat" in v1_proxy,
    "accepted": [str(e) for e in validate(modern("5s"))],
    "refused": [list(e) for e in validate(modern("5 parsecs"))],
    "rendered": rendered,
    "legacy": legacy,
    "old_release": [list(e) for e in old_release],
    "round_trip": convert(v1, "v1alpha2") == modern("5s"),
    "v1alpha1_annotations": v1["metadata"].get("annotations"),
    "docs": [line for line in docs_table().splitlines()
             if "scratchTimeout" in line or "`proxy.logFormat`" in line],
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
    end = text.index("\n)\n\nHUB_SECTIONS")
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
    assert scratch["in_v1alpha1"] is False


def test_a_new_row_survives_a_round_trip_through_v1alpha1(scratch: dict[str, Any]) -> None:
    assert scratch["round_trip"] is True
    assert scratch["v1alpha1_annotations"] == {
        "config.linkerd.io/v1alpha2-values": '{"proxy":{"scratchTimeout":"5s"}}'
    }


def test_a_new_row_is_validated_by_its_grammar(scratch: dict[str, Any]) -> None:
    assert scratch["accepted"] == []
    assert scratch["refused"] == [
        ["spec.values.proxy.scratchTimeout", "'5 parsecs' is not a duration: unknown unit "
         "' parsecs' "
         "(use ns, us, ms, s, m or h)"]
    ]  # fmt: skip


def test_a_new_row_is_written_by_the_values_format_and_gated(scratch: dict[str, Any]) -> None:
    assert "scratchTimeout: 5s" in scratch["rendered"]
    assert scratch["old_release"] == [
        ["spec.values.proxy.scratchTimeout", "needs Linkerd edge-24.1.1 or later"]
    ]


def test_a_new_row_is_refused_by_the_legacy_format_naming_the_values(
    scratch: dict[str, Any],
) -> None:
    assert scratch["legacy"] == [
        [
            "spec.values.proxy.scratchTimeout",
            "is not in Linkerd's legacy config format; only the values format has it "
            "(Linkerd edge-24.1.1 or later)",
        ]
    ]


def test_a_new_row_is_documented_and_a_removed_one_is_gone(scratch: dict[str, Any]) -> None:
    assert scratch["gone"] is False
    assert len(scratch["docs"]) == 1
    assert scratch["docs"][0].startswith("| `values.proxy.scratchTimeout` | — | a duration such as")


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
    readme = (ROOT / "docs" / "user-guide.md").read_text()
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
