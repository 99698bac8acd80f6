"""How ``make test`` deals integration modules to its processes (``durations.place``), and
the seconds it deals them by (``durations.module_seconds``, from pytest's JUnit XML)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support import durations

MODULES = st.dictionaries(
    st.from_regex(r"tests/integration/test_[a-z]{1,8}\.py", fullmatch=True), st.booleans()
)
SECONDS = st.floats(min_value=0.0, max_value=5000.0)


@given(MODULES, st.integers(min_value=1, max_value=4), st.data())
def test_every_module_in_one_shard_and_every_real_node_in_the_first(
    real: dict[str, bool], n: int, data: st.DataObject
) -> None:
    known = data.draw(st.fixed_dictionaries({m: SECONDS for m in real if data.draw(st.booleans())}))
    placed = durations.place(real, n, known)
    assert set(placed) == set(real)
    assert all(0 <= s < n for s in placed.values())
    assert all(placed[m] == 0 for m, is_real in real.items() if is_real)
    assert placed == durations.place(dict(reversed(list(real.items()))), n, known)  # any order


@given(st.lists(SECONDS, min_size=1, max_size=12), st.integers(min_value=2, max_value=3))
def test_no_shard_waits_longer_than_the_longest_module_past_the_shortest(
    seconds: list[float], n: int
) -> None:
    """Longest first to the least loaded: the spread is at most one module's seconds."""
    known = {f"tests/integration/test_m{i}.py": s for i, s in enumerate(seconds)}
    placed = durations.place(dict.fromkeys(known, False), n, known)
    load = [sum(s for m, s in known.items() if placed[m] == k) for k in range(n)]
    assert max(load) - min(load) <= max(seconds) + 1e-6


def test_the_two_long_modules_go_apart_and_the_real_nodes_stay_together() -> None:
    known = {"a.py": 600.0, "b.py": 500.0, "c.py": 100.0, "node1.py": 50.0, "node2.py": 40.0}
    real = {m: m.startswith("node") for m in known}
    placed = durations.place(real, 2, known)
    # 90 s of real nodes, then a (600) to 1, b (500) to 0 (90), c (100) to 0 (590 < 600)
    assert placed == {"node1.py": 0, "node2.py": 0, "a.py": 1, "b.py": 0, "c.py": 0}
    assert durations.place({"new.py": False, "old.py": False}, 2, {"old.py": 1.0}) == {
        "new.py": 0,  # unknown: UNKNOWN_MODULE_SECONDS, longer than old.py's one second
        "old.py": 1,
    }


def test_seconds_are_summed_per_integration_module_over_every_report(tmp_path: Path) -> None:
    first, second = tmp_path / "test-0.xml", tmp_path / "test-1.xml"
    first.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_crd" name="a" time="12.5"/>'
        '<testcase classname="tests.integration.test_crd" name="b" time="2.5"/>'
        '<testcase classname="tests.unit.house.test_docs" name="c" time="9"/>'
        "</testsuite></testsuites>"
    )
    second.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_webhooks.TestX" name="d" time="4"/>'
        "</testsuite></testsuites>"
    )
    assert durations.module_seconds([first, second]) == {
        "tests/integration/test_crd.py": 15.0,
        "tests/integration/test_webhooks.py": 4.0,
    }
