"""The vendored Kubernetes wire types are the pinned Go modules': the ``.proto`` files in
``proto/k8s.io/`` byte for byte, and the JSON shapes read from the Go structs' tags
(``proto/k8s_vendor.py``, which needs Go and the module cache the control plane builds from)."""

from __future__ import annotations

import json

from tests.support.scripts import REPO, load_script


def test_the_vendored_protos_and_shapes_are_the_pinned_modules() -> None:
    vendor = load_script("proto/k8s_vendor.py")
    protos, shapes = vendor.vendored()
    assert set(protos) == {
        str(p.relative_to(REPO / "proto")) for p in (REPO / "proto" / "k8s.io").rglob("*.proto")
    }
    for import_path, data in protos.items():
        checked_in = REPO / "proto" / import_path
        assert checked_in.read_bytes() == data, (
            f"{import_path} differs from {vendor.module_version()}: run proto/k8s_vendor.py"
        )
    assert json.loads(vendor.SHAPES.read_text()) == json.loads(vendor.shapes_text(shapes)), (
        "json_shapes.json is stale: run proto/k8s_vendor.py"
    )
