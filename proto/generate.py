"""Generate the Python code for the project's protobuf definitions.

Usage: ``.venv/bin/python proto/generate.py [--out DIR]``

Runs the protoc bundled with grpcio-tools (a dev dependency) on
``proto/linkerd/config/config.proto`` and writes ``config_pb2.py`` and its ``.pyi`` stub into
``linkerd_config/linkerd/formats/legacy/`` (or ``--out``); and on Kubernetes' own ``.proto``
files (vendored by ``proto/k8s_vendor.py``), writing one descriptor set,
``linkerd_config/kube/k8s_api/descriptors.binpb``, that the client loads into a pool of its
own (their import paths start ``k8s.io/``, which no Python module name can mirror). The
generated files are checked in so that the package needs no compiler at runtime;
``tests/unit/house/test_proto_generated.py`` regenerates into a temporary directory and fails when
the checked-in copy is stale.
The only change made to protoc's output is a ``# mypy: ignore-errors`` header on the stub (see
STUB_HEADER).

This is a script rather than a module of the package on purpose: importing the package would
import the generated code, which must not be a precondition for regenerating it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
SOURCES = ("linkerd/config/config.proto",)
DEFAULT_OUT = REPO / "linkerd_config" / "linkerd" / "formats" / "legacy"
K8S_SOURCES = (
    "k8s.io/api/apps/v1/generated.proto",
    "k8s.io/api/coordination/v1/generated.proto",
)
"""Compiled with every import: these import core/v1 and the apimachinery packages."""
K8S_OUT = REPO / "linkerd_config" / "kube" / "k8s_api"
K8S_DESCRIPTORS = "descriptors.binpb"

# Prepended to every generated stub: protobuf ships no type information, so under
# ``mypy --strict`` each ``class X(_message.Message)`` would subclass ``Any`` and fail. The stub
# stays useful to callers (field names and types); only its own checking is switched off.
STUB_HEADER = (
    "# mypy: ignore-errors\n"
    "# (line above added by proto/generate.py: protobuf has no stubs, so Message is Any)\n"
)


def well_known_types_dir() -> Path:
    """Where grpcio-tools keeps google/protobuf/*.proto (for duration.proto)."""
    return Path(str(resources.files("grpc_tools") / "_proto"))


def generate(out_dir: Path) -> list[Path]:
    """Compile every source and copy its ``*_pb2.py``/``*_pb2.pyi`` flat into ``out_dir``.

    protoc writes into a package tree mirroring the proto path (``linkerd/config/``); the
    generated module only imports its dependencies (``google.protobuf.duration_pb2``), never
    itself, so it can live anywhere. Its descriptor keeps the unique name
    ``linkerd/config/config.proto`` in the default pool.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="protoc-") as tmp:
        args = [
            "grpc_tools.protoc",
            f"--proto_path={PROTO_ROOT}",
            f"--proto_path={well_known_types_dir()}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *(str(PROTO_ROOT / source) for source in SOURCES),
        ]
        code = protoc.main(args)
        if code != 0:
            raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")
        for source in SOURCES:
            stem = source.removesuffix(".proto")
            for suffix in ("_pb2.py", "_pb2.pyi"):
                generated = Path(tmp) / f"{stem}{suffix}"
                target = out_dir / generated.name
                text = generated.read_text(encoding="utf-8")
                if suffix.endswith(".pyi"):
                    text = STUB_HEADER + text
                target.write_text(text, encoding="utf-8")
                written.append(target)
    return written


def generate_k8s(out_dir: Path) -> Path:
    """Kubernetes' messages as one FileDescriptorSet (no source info: the comments are
    most of the 420 KB of ``.proto``; the set is about 70 KB)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / K8S_DESCRIPTORS
    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO_ROOT}",
        f"--descriptor_set_out={target}",
        "--include_imports",
        *(str(PROTO_ROOT / source) for source in K8S_SOURCES),
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    options = parser.parse_args(argv)
    for path in generate(options.out):
        print(f"wrote {path}")
    print(f"wrote {generate_k8s(K8S_OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
