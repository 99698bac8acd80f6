"""No two modules with one name: pytest imports test modules by their basename (a second
``test_x.py`` elsewhere fails collection), and a reader must not have to ask which ``x``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _repeated(*folders: str) -> list[str]:
    names = Counter(
        path.name
        for folder in folders
        for path in (ROOT / folder).rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py", "conftest.py")
    )
    return sorted(name for name, count in names.items() if count > 1)


def test_no_two_test_modules_share_a_name() -> None:
    assert _repeated("tests") == []


def test_no_two_package_modules_share_a_name() -> None:
    assert _repeated("linkerd_config") == []


def test_no_module_of_the_tests_shares_a_name_with_one_of_the_package() -> None:
    assert _repeated("linkerd_config", "tests", "bench", "proto") == []
