"""What the Dockerfile copies is in its build context: ``.dockerignore`` (an allow-list)
admits every ``COPY`` source. A new user's first ``docker build`` failed at
``COPY requirements/runtime.lock`` because it did not (issue 24). Read here with the rules
Docker and Buildah follow (patterns in order, the last that matches decides, ``!``
re-admits), so the check needs no container engine; building the image is issue 24's
integration test."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _rules() -> list[tuple[bool, str]]:
    """(excluded?, pattern) in file order."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        rules.append((not negated, line.lstrip("!").strip("/")))
    return rules


def _matches(pattern: str, path: str) -> bool:
    """The pattern matches the path or one of its parent folders (``**`` any depth)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    regex = fnmatch.translate(pattern).replace(".*.*/", "(.*/)?")
    return any(re.fullmatch(regex, c) for c in candidates)


def excluded(path: str) -> bool:
    verdict = False
    for exclude, pattern in _rules():
        if _matches(pattern, path):
            verdict = exclude
    return verdict


def copied_sources() -> list[str]:
    """Every build-context source of a ``COPY`` (not ``--from=`` another stage)."""
    sources = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
            continue
        sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def test_every_copied_source_is_in_the_build_context() -> None:
    sources = copied_sources()
    assert "requirements/runtime.lock" in sources and "linkerd_config" in sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not excluded(source), f"{source} is left out of the build context"
    # ... the package's modules with it, its bytecode caches not.
    assert not excluded("linkerd_config/linkerd/rollback.py")
    assert excluded("linkerd_config/__pycache__/app.cpython-311.pyc")


def test_the_reader_follows_dockerignore_rules() -> None:
    assert excluded("tests/unit/rollout/test_rollback.py")  # '*' leaves out everything else
    assert excluded(".venv/bin/python")
    assert excluded("requirements/dev.lock")  # only the runtime lock is admitted
