"""How ``make test`` deals integration tests to its processes (``durations.place``, by group:
a module, or a test apart), and the seconds it deals them by (``durations.test_seconds``,
from pytest's JUnit XML)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support import durations

REPO = Path(__file__).resolve().parents[3]

MODULES = st.dictionaries(
    st.from_regex(r"tests/integration/test_[a-z]{1,8}\.py", fullmatch=True), st.booleans()
)
SECONDS = st.floats(min_value=0.0, max_value=5000.0)


@given(MODULES, st.integers(min_value=1, max_value=4), st.data())
def test_every_module_in_one_shard_and_every_real_node_in_the_first(
    real: dict[str, bool], n: int, data: st.DataObject
) -> None:
    known = data.draw(st.fixed_dictionaries({m: SECONDS for m in real}))
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
    assert durations.place({"new.py": False, "old.py": False}, 2, {"new.py": 1, "old.py": 1}) == {
        "new.py": 0,  # a tie: by name
        "old.py": 1,
    }


def test_a_groups_seconds_are_its_tests_and_an_unknown_test_counts_as_the_default() -> None:
    known = {"m.py::a": 12.5, "m.py::b[x]": 2.5}
    assert durations.group_seconds(["m.py::a", "m.py::b[x]"], known) == 15.0
    assert durations.group_seconds(["m.py::a", "m.py::new"], known) == (
        12.5 + durations.UNKNOWN_TEST_SECONDS
    )


def test_seconds_are_read_per_integration_test_over_every_report(tmp_path: Path) -> None:
    first, second = tmp_path / "test-0.xml", tmp_path / "test-1.xml"
    first.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_crd" name="a" time="12.5"/>'
        '<testcase classname="tests.integration.test_crd" name="b[on]" time="2.5"/>'
        '<testcase classname="tests.unit.house.test_docs" name="c" time="9"/>'
        "</testsuite></testsuites>"
    )
    second.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_webhooks.TestX" name="d" time="4"/>'
        "</testsuite></testsuites>"
    )
    tests = durations.test_seconds([first, second])
    assert tests == {  # pytest's node ids
        "tests/integration/test_crd.py::a": 12.5,
        "tests/integration/test_crd.py::b[on]": 2.5,
        "tests/integration/test_webhooks.py::TestX::d": 4.0,
    }
    assert durations.module_seconds(tests) == {
        "tests/integration/test_crd.py": 15.0,
        "tests/integration/test_webhooks.py": 4.0,
    }


GROUPS_PROBE = """
import json, sys
import pytest
from tests import conftest

class Groups:
    def pytest_collection_finish(self, session):
        items = [i for i in session.items if conftest._is_integration(i)]
        found = conftest._groups(items)
        print("GROUPS=" + json.dumps({g: [t.nodeid for t in its] for g, its in found.items()}))

sys.exit(pytest.main(["-p", "no:cacheprovider", "--collect-only", "-q", *sys.argv[1:]],
                     plugins=[Groups()]))
"""


def test_a_module_whose_tests_share_nothing_is_dealt_a_test_at_a_time() -> None:
    """On the real modules: each test of one whose tests each start their own control plane
    is a group; one with a module-scoped fixture, or on the session's control plane, is one
    group of all its tests."""
    apart = "tests/integration/test_never_out_of_the_mesh.py"  # own_control_plane each
    module_fixture = "tests/integration/test_data_plane_rollout.py"  # one real node for all
    session_cluster = "tests/integration/test_informer.py"  # the session's control plane
    done = subprocess.run(
        [sys.executable, "-c", GROUPS_PROBE, apart, module_fixture, session_cluster],
        capture_output=True, text=True, check=True, cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != "TEST_SHARD"},  # every test, not a share
    )  # fmt: skip
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("GROUPS=")]
    groups: dict[str, list[str]] = json.loads(line.removeprefix("GROUPS="))
    split = [g for g in groups if g.startswith(f"{apart}::")]
    assert len(split) > 1
    assert all(groups[g] == [g] for g in split)
    assert len(groups[module_fixture]) > 1
    assert len(groups[session_cluster]) > 1
    assert set(groups) == {*split, module_fixture, session_cluster}
