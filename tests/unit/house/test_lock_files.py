"""The lock files are what the Dockerfile and every venv install: they must pin, with hashes,
every dependency pyproject.toml declares, within its bounds, and every bound must be closed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^ \\]+)")


def pins(lock: str) -> dict[str, str]:
    text = (ROOT / "requirements" / lock).read_text()
    found = {canonicalize_name(m[1]): m[2] for m in map(PIN.match, text.splitlines()) if m}
    blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", text)
    unhashed = [b.split("==")[0] for b in blocks if "==" in b and "--hash=sha256:" not in b]
    assert not unhashed, f"{lock}: pinned without a hash: {unhashed}"
    assert "--find-links" not in text and "index-url" not in text  # no machine's settings
    return found


@pytest.mark.parametrize(
    ("lock", "declared"),
    [
        ("runtime.lock", PROJECT["dependencies"]),
        ("dev.lock", PROJECT["dependencies"] + PROJECT["optional-dependencies"]["dev"]),
        (
            "bench.lock",
            PROJECT["dependencies"]
            + PROJECT["optional-dependencies"]["dev"]
            + PROJECT["optional-dependencies"]["bench"],
        ),
    ],
)
def test_every_declared_dependency_is_pinned_within_its_bounds(
    lock: str, declared: list[str]
) -> None:
    pinned = pins(lock)
    for line in declared:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{lock} lacks {name}: run `make lock`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{lock} pins {name}=={pinned[name]}, outside {requirement.specifier}: run `make lock`"
        )


def test_every_bound_is_closed_above() -> None:
    extras = PROJECT["optional-dependencies"]
    for line in PROJECT["dependencies"] + extras["dev"] + extras["bench"]:
        operators = {spec.operator for spec in Requirement(line).specifier}
        assert operators & {"<", "<=", "==", "~="}, f"{line} has no upper bound"


def test_the_runtime_lock_agrees_with_the_dev_lock() -> None:
    runtime, dev = pins("runtime.lock"), pins("dev.lock")
    assert {name: dev.get(name) for name in runtime} == runtime


def test_the_bench_lock_adds_to_the_dev_lock_and_changes_nothing_in_it() -> None:
    """`make bench` installs bench.lock over the venv: it must not move a tested version."""
    dev, bench = pins("dev.lock"), pins("bench.lock")
    assert {name: bench.get(name) for name in dev} == dev
