"""Vendor Kubernetes' wire types at the pinned version: the ``.proto`` files and their JSON.

Usage: ``.venv/bin/python proto/k8s_vendor.py`` (needs Go: ``go mod download``).

The API server encodes built-in objects in protobuf from the same Go structs it encodes as
JSON, so a client that wants the JSON shape back needs two things only those Go modules have:

* the ``.proto`` files of ``k8s.io/api`` and ``k8s.io/apimachinery`` (field numbers and
  types), copied into ``proto/k8s.io/`` from the modules at ``pinned.KUBERNETES``
  (``v1.x.y`` is ``v0.x.y`` for the staging modules); ``proto/generate.py`` compiles them;
* how each field looks in JSON: its JSON name, and whether Go omits it when empty, writes
  ``null``, or flattens it into its parent (``json:",inline"``). That is in the struct tags
  of the Go types, which this script reads into ``linkerd_config/kube/k8s_api/json_shapes.json``.

Both are checked in, so neither the package nor its unit tests need Go;
``tests/integration/test_k8s_api_vendored.py`` re-derives both from the pinned modules and
fails when the checked-in copies differ.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import pinned  # noqa: E402
from devcluster.binaries import go_module_dir, go_toolchain  # noqa: E402

PROTO_ROOT = REPO / "proto"
SHAPES = REPO / "linkerd_config" / "kube" / "k8s_api" / "json_shapes.json"

PACKAGES: tuple[tuple[str, str, str], ...] = (
    # (Go module, package folder in it, protobuf package)
    ("k8s.io/api", "core/v1", "k8s.io.api.core.v1"),
    ("k8s.io/api", "apps/v1", "k8s.io.api.apps.v1"),
    ("k8s.io/api", "coordination/v1", "k8s.io.api.coordination.v1"),
    ("k8s.io/apimachinery", "pkg/apis/meta/v1", "k8s.io.apimachinery.pkg.apis.meta.v1"),
    ("k8s.io/apimachinery", "pkg/runtime", "k8s.io.apimachinery.pkg.runtime"),
    ("k8s.io/apimachinery", "pkg/runtime/schema", "k8s.io.apimachinery.pkg.runtime.schema"),
    ("k8s.io/apimachinery", "pkg/util/intstr", "k8s.io.apimachinery.pkg.util.intstr"),
    ("k8s.io/apimachinery", "pkg/api/resource", "k8s.io.apimachinery.pkg.api.resource"),
)

_STRUCT = re.compile(r"^type (\w+) struct \{\n(.*?)^\}", re.M | re.S)
_SLICE_TYPE = re.compile(r"^type (\w+) \[\]\w+\s*$", re.M)
_FIELD = re.compile(r"^\s*(?:(\w+)\s+)?([\w.*\[\]]+)\s+`([^`]*)`", re.M)
_TAG = re.compile(r'(\w+):"([^"]*)"')


def module_version() -> str:
    """The staging modules' version of the pinned Kubernetes (``1.34.4`` -> ``v0.34.4``)."""
    major, minor, patch = pinned.KUBERNETES.split(".")
    return f"v0.{minor}.{patch}" if major == "1" else f"v{pinned.KUBERNETES}"


def module_dirs(go: str) -> dict[str, Path]:
    version = module_version()
    return {m: go_module_dir(go, m, version) for m in sorted({p[0] for p in PACKAGES})}


def field_shape(go_type: str, tags: dict[str, str]) -> list[str | bool] | None:
    """``[protobuf name, JSON name, pointer, list/map, omitempty, omitzero, inline]`` for one
    Go struct field, or None for a field that is not on the wire or not in JSON."""
    proto = dict(p.split("=", 1) for p in tags.get("protobuf", "").split(",") if "=" in p)
    if "name" not in proto:
        return None
    json_name, *options = tags.get("json", "").split(",")
    if json_name == "-":
        return None
    inline = "inline" in options
    collection = go_type.startswith(("[]", "map[", "*[]"))
    return [
        proto["name"],
        "" if inline else (json_name or proto["name"]),
        go_type.startswith("*"),
        collection,
        "omitempty" in options,
        "omitzero" in options,
        inline,
    ]


def shapes_of(sources: dict[str, str]) -> dict[str, object]:
    """Every wire struct's fields, keyed by the protobuf message's full name; and the
    messages that wrap a Go slice type (their JSON is the list itself)."""
    messages: dict[str, dict[str, list[str | bool]]] = {}
    lists: list[str] = []
    for proto_package, text in sorted(sources.items()):
        for struct, body in _STRUCT.findall(text):
            fields: dict[str, list[str | bool]] = {}
            for _name, go_type, tag_text in _FIELD.findall(body):
                shape = field_shape(go_type, dict(_TAG.findall(tag_text)))
                if shape is not None:
                    fields[str(shape[0])] = shape[1:]
            if fields:
                messages[f"{proto_package}.{struct}"] = fields
        lists += [f"{proto_package}.{name}" for name in _SLICE_TYPE.findall(text)]
    return {"messages": messages, "lists": sorted(lists)}


def read_sources(dirs: dict[str, Path]) -> tuple[dict[str, bytes], dict[str, str]]:
    """The ``.proto`` files (by their import path) and the Go sources (by protobuf package)."""
    protos: dict[str, bytes] = {}
    go: dict[str, str] = {}
    for module, folder, proto_package in PACKAGES:
        package_dir = dirs[module] / folder
        protos[f"{module}/{folder}/generated.proto"] = (
            package_dir / "generated.proto"
        ).read_bytes()
        go[proto_package] = "\n".join(
            path.read_text()
            for path in sorted(package_dir.glob("*.go"))
            if not path.name.endswith("_test.go") and not path.name.startswith("zz_generated")
        )
    return protos, go


def vendored() -> tuple[dict[str, bytes], dict[str, object]]:
    """What the pinned modules say: the ``.proto`` files and the JSON shapes."""
    go = go_toolchain("Kubernetes' protobuf files", "copy them into proto/k8s.io by hand")
    protos, sources = read_sources(module_dirs(go))
    return protos, shapes_of(sources)


def shapes_text(shapes: dict[str, object]) -> str:
    """The file: the lists, and each message's fields as a JSON text of their own, so a
    process parses only the messages it decodes (a few dozen of about 300)."""
    messages = shapes["messages"]
    assert isinstance(messages, dict)
    packed = {
        name: json.dumps(fields, sort_keys=True, separators=(",", ":"))
        for name, fields in messages.items()
    }
    return json.dumps({**shapes, "messages": packed}, indent=1, sort_keys=True) + "\n"


def main() -> int:
    protos, shapes = vendored()
    shutil.rmtree(PROTO_ROOT / "k8s.io", ignore_errors=True)
    for import_path, data in protos.items():
        target = PROTO_ROOT / import_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"wrote {target.relative_to(REPO)}")
    SHAPES.parent.mkdir(parents=True, exist_ok=True)
    SHAPES.write_text(shapes_text(shapes))
    print(f"wrote {SHAPES.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
