"""Shared fixtures: the local control plane (real etcd + kube-apiserver) and clients to it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.kubeconfig import load_access
from tests.support import durations

REPO = Path(__file__).resolve().parent.parent


@contextlib.asynccontextmanager
async def admin(cp: LocalControlPlane) -> AsyncIterator[KubeClient]:
    """A client on ``cp`` as its admin (system:masters)."""
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="linkerd-config-tests") as client:
        yield client


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_integration(item):
            item.add_marker(pytest.mark.integration)
    shard(config, items)


def _is_integration(item: pytest.Item) -> bool:
    return "tests/integration/" in str(item.fspath).replace(os.sep, "/")


def _module(item: pytest.Item) -> str:
    return Path(str(item.fspath)).resolve().relative_to(REPO).as_posix()


def _real_node(item: pytest.Item) -> bool:
    """The test runs a real node (``real_node`` marker, or the ``node_cluster`` fixture)."""
    return item.get_closest_marker("real_node") is not None or "node_cluster" in getattr(
        item, "fixturenames", ()
    )


def shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``TEST_SHARD=i/n`` (``make test`` and ``make test-unit`` run n processes): the i-th
    process's share. Unit tests are dealt one by one, in collection order (the long property
    tests of one module are spread). Integration tests go by group (``_groups``: a module,
    or each test of a module whose tests share nothing), placed by ``durations.place``
    (every group with a real node in process 0, the rest balanced by their seconds in the
    last full run)."""
    stated = os.environ.get("TEST_SHARD")
    if not stated:
        return
    index, _, count = stated.partition("/")
    i, n = int(index), int(count)
    if not 0 <= i < n:
        raise pytest.UsageError(f"TEST_SHARD={stated}: want i/n with 0 <= i < n")
    units = [item for item in items if not _is_integration(item)]
    dealt = {id(item): k % n for k, item in enumerate(units)}
    dealt.update(_groups_to_shards([item for item in items if _is_integration(item)], n))
    kept = [item for item in items if dealt[id(item)] == i]
    config.hook.pytest_deselected(items=[item for item in items if dealt[id(item)] != i])
    items[:] = kept


SHARED_FIXTURE_SCOPES = frozenset({"module", "class", "package"})
SHARED_CLUSTER = "control_plane"
"""The session's control plane: a module's tests on it may build on each other's objects."""


def _apart(item: pytest.Item) -> bool:
    """Whether ``item`` may run in another process than its module's other tests: none of
    its fixtures is shared by the module's tests (module-, class- or package-scoped), and it
    does not use the session's control plane (its cluster is its own: ``own_control_plane``,
    ``private_control_plane``, ``node_cluster``)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None or SHARED_CLUSTER in getattr(item, "fixturenames", ()):
        return False
    return not any(
        defs and defs[-1].scope in SHARED_FIXTURE_SCOPES for defs in info.name2fixturedefs.values()
    )


def _groups(items: list[pytest.Item]) -> dict[str, list[pytest.Item]]:
    """The integration tests by what must run in one process: a module whose tests share
    nothing (``_apart``) is one group per test (the slowest module, 24 tests each on its own
    control plane, was 691 s in one process); any other module is one group."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(_module(item), []).append(item)
    groups: dict[str, list[pytest.Item]] = {}
    for module, its in modules.items():
        if all(_apart(t) for t in its):
            groups.update({t.nodeid: [t] for t in its})
        else:
            groups[module] = its
    return groups


def _groups_to_shards(items: list[pytest.Item], n: int) -> dict[int, int]:
    groups = _groups(items)
    known = durations.known()
    real = {g: any(_real_node(t) for t in its) for g, its in groups.items()}
    seconds = {
        g: durations.group_seconds((t.nodeid for t in its), known) for g, its in groups.items()
    }
    placed = durations.place(real, n, seconds)
    return {id(item): placed[group] for group, its in groups.items() for item in its}


@pytest.fixture(scope="session")
def control_plane() -> Iterator[LocalControlPlane]:
    """One full control plane for the session: etcd, kube-apiserver, KCM, scheduler, kwok."""
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as cp:
        yield cp


@pytest.fixture
def own_control_plane() -> Iterator[LocalControlPlane]:
    """A full control plane (with kwok) of the test's own, for tests whose cluster-wide
    objects (Linkerd's, a chart's CRD and webhooks) must not meet other tests' objects."""
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as cp:
        yield cp


@pytest.fixture
async def own_kube(own_control_plane: LocalControlPlane) -> AsyncIterator[KubeClient]:
    """An admin client on ``own_control_plane``."""
    async with admin(own_control_plane) as client:
        yield client


@pytest.fixture
def private_control_plane() -> Iterator[LocalControlPlane]:
    """An etcd + kube-apiserver of the test's own, for tests that restart or compact it."""
    with LocalControlPlane(ControlPlaneOptions(workloads=False)) as cp:
        yield cp


@pytest.fixture(scope="session")
async def kube(control_plane: LocalControlPlane) -> AsyncIterator[KubeClient]:
    """An admin client (system:masters) on the shared control plane."""
    async with admin(control_plane) as client:
        yield client


@pytest.fixture(scope="session")
def node_image() -> str:
    """The controller's image, built once for the session from this checkout with the tool
    the machine has (``make docker-build-local``)."""
    from tests.support.in_cluster import IMAGE, make  # noqa: PLC0415

    make(None, "docker-build-local", f"IMG={IMAGE}")
    return IMAGE


@pytest.fixture
def node_cluster(node_image: str) -> Iterator[LocalControlPlane]:
    """A control plane of its own with a real node (kubelet + containerd) holding
    ``node_image`` (one real node per machine: tests using it run one after the other)."""
    from devcluster import real_node, third_party_crds  # noqa: PLC0415

    with LocalControlPlane(ControlPlaneOptions(real_node=True)) as cp:
        real_node.load_image(cp.node.socket, node_image)
        # What the install's PodMonitor needs: the Prometheus Operator's own CRD.
        third_party_crds.apply(cp, [third_party_crds.crd_path("podmonitors")])
        yield cp


@pytest.fixture
async def node_kube(node_cluster: LocalControlPlane) -> AsyncIterator[KubeClient]:
    """An admin client on ``node_cluster``."""
    async with admin(node_cluster) as client:
        yield client
