"""Shared fixtures: the local control plane (real etcd + kube-apiserver) and clients to it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.kubeconfig import load_access

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)


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
    access = await load_access(str(own_control_plane.kubeconfig))
    async with KubeClient(access, user_agent="linkerd-config-tests") as client:
        yield client


@pytest.fixture
def private_control_plane() -> Iterator[LocalControlPlane]:
    """An etcd + kube-apiserver of the test's own, for tests that restart or compact it."""
    with LocalControlPlane(ControlPlaneOptions(workloads=False)) as cp:
        yield cp


@pytest.fixture(scope="session")
async def kube(control_plane: LocalControlPlane) -> AsyncIterator[KubeClient]:
    """An admin client (system:masters) on the shared control plane."""
    access = await load_access(str(control_plane.kubeconfig))
    async with KubeClient(access, user_agent="linkerd-config-tests") as client:
        yield client
