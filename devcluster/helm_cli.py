"""``python -m devcluster.helm_cli ARGS``: the pinned helm (built on first use)
with ARGS, so `make helm-deploy` needs no helm on PATH."""

from __future__ import annotations

import os
import sys

from devcluster.binaries import ensure_helm


def main() -> None:
    helm = str(ensure_helm(progress=lambda line: print(line, file=sys.stderr)))
    os.execv(helm, [helm, *sys.argv[1:]])


if __name__ == "__main__":
    main()
