"""The docs hold together: every relative link leads to a file (and heading) that exists, every
``make`` target they name is one the Makefile has, the README's install commands are the
targets the install tests run, and the README stays short and free of measured figures (those
live in bench/RESULTS.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.in_cluster import MAKE_TARGETS

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", ROOT / "CHANGES.md", ROOT / "bench" / "RESULTS.md",
        *sorted((ROOT / "docs").glob("*.md"))]  # fmt: skip
README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^( *)```[a-z]*\n(.*?)^\1```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
MAKE = re.compile(r"^make ((?:[a-z][a-z0-9-]*(?: |$))+)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    text = CODE_BLOCK.sub("", path.read_text())
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug)
    return found


def links(path: Path) -> list[str]:
    text = CODE_BLOCK.sub("", path.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*):", text, re.M))


def make_commands(text: str) -> list[list[str]]:
    """The targets of each ``make`` command in code: blocks' lines and inline spans."""
    commands = []
    pieces = [line for _, block in CODE_BLOCK.findall(text) for line in block.splitlines()]
    pieces += INLINE_CODE.findall(CODE_BLOCK.sub("", text))
    for piece in pieces:
        found = MAKE.match(piece.split("#")[0].strip())
        if found:
            commands.append(found.group(1).split())
    return commands


def test_the_docs_are_where_the_readme_says() -> None:
    assert {p.name for p in DOCS} >= {"README.md", "CHANGES.md", "RESULTS.md", "user-guide.md",
                                      "operations.md", "design.md", "development.md"}  # fmt: skip


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(path: Path) -> None:
    for target in links(path):
        file, _, anchor = target.partition("#")
        goal = (path.parent / file).resolve() if file else path
        assert goal.exists(), f"{path.name}: {target} does not exist"
        if anchor and goal.suffix == ".md":
            assert anchor in anchors(goal), f"{path.name}: no heading #{anchor} in {goal.name}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_make_target_named_exists(path: Path) -> None:
    known = make_targets()
    for targets in make_commands(path.read_text()):
        unknown = [t for t in targets if t not in known]
        assert not unknown, f"{path.name}: make {' '.join(targets)}: no target {unknown}"


def test_the_readme_installs_with_the_targets_the_install_tests_run() -> None:
    """test_in_cluster_deploy runs these targets on a local control plane with a real node;
    pushing to a registry is the one step no test can take."""
    text = README.read_text()
    install = text[text.index("## Install") : text.index("## Example")]
    used = {t for targets in make_commands(install) for t in targets}
    assert {"deploy", "helm-deploy"} <= used
    assert used - {"docker-push"} <= set(MAKE_TARGETS), used


def test_the_readme_is_short_and_holds_no_measured_figures() -> None:
    text = README.read_text()
    assert len(text.encode()) <= 8 * 1024
    figures = re.findall(r"\b\d[\d,.]* ?(?:ms|s|min|MiB|MB|GB|passed|tests)\b", text)
    assert figures == [], "timings and counts belong in bench/RESULTS.md"
