"""``--metrics-secure`` on a real API server, as kubebuilder v4 serves /metrics: HTTPS only,
the scraper's ServiceAccount token checked by TokenReview and its access by
SubjectAccessReview against real RBAC.

The controller runs in-process as a ServiceAccount whose only permissions are the two
reviews (create tokenreviews, create subjectaccessreviews), so it never leads (no Lease
access): its client's write gate refuses every write, and the reviews, which are not
writes, still go through. Its informers are refused too, which does not matter here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from devcluster.cluster import LocalControlPlane, free_port
from linkerd_config.app import App, build, running
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import NAMESPACES, SERVICE_ACCOUNTS, ApiResource
from tests.support import scenario, service_accounts
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAMESPACE = "metrics-auth"
CONTROLLER, NOSY, PROMETHEUS = "controller", "nosy", "prometheus"
CLUSTER_ROLES = ApiResource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
)
CLUSTER_ROLE_BINDINGS = ApiResource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
COMPONENT = Path(__file__).resolve().parents[2] / "manifests/components/secure-metrics"
_ROLES = {
    doc["metadata"]["name"]: doc["rules"]
    for doc in yaml.safe_load_all((COMPONENT / "metrics_auth.yaml").read_text())
    if doc and doc["kind"] == "ClusterRole"
}
AUTH_RULES: list[dict[str, Any]] = _ROLES["linkerd-config-metrics-auth"]
"""What the controller needs for --metrics-secure, as the install manifests grant it."""
READER_RULES: list[dict[str, Any]] = _ROLES["linkerd-config-metrics-reader"]
"""What a scraper needs, as the install manifests define it."""


def user(name: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{name}"


async def grant(kube: KubeClient, role: str, rules: list[dict[str, Any]], sa: str) -> None:
    await scenario.create(kube, CLUSTER_ROLES.path(), {"metadata": {"name": role}, "rules": rules})
    await scenario.create(
        kube,
        CLUSTER_ROLE_BINDINGS.path(),
        {
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "namespace": NAMESPACE, "name": sa}],
        },
    )


async def may_get_metrics(kube: KubeClient, sa: str) -> bool:
    review = await kube.review_access(
        {
            "user": user(sa),
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        }
    )
    return bool(review.get("allowed"))


def reviews_made(app: App) -> float:
    """The controller's own rest_client_requests_total{code="201", method="POST"}: its only
    successful creates here are the reviews (a follower writes nothing)."""
    total = 0.0
    for family in app.registry.collect():
        for s in family.samples:
            if s.name == "rest_client_requests_total" and (
                s.labels.get("method"),
                s.labels.get("code"),
            ) == ("POST", "201"):
                total += s.value
    return total


async def accounts(admin: KubeClient) -> dict[str, str]:
    """The controller's, a nosy and Prometheus's ServiceAccounts, the controller allowed the
    reviews and Prometheus /metrics (as the install manifests grant them); their tokens."""
    await scenario.create(admin, NAMESPACES.path(), {"metadata": {"name": NAMESPACE}})
    for sa in (CONTROLLER, NOSY, PROMETHEUS):
        await scenario.create(admin, SERVICE_ACCOUNTS.path(NAMESPACE), {"metadata": {"name": sa}})
    await grant(admin, "metrics-auth", AUTH_RULES, CONTROLLER)
    await grant(admin, "metrics-reader", READER_RULES, PROMETHEUS)
    await eventually(lambda: may_get_metrics(admin, PROMETHEUS), timeout=10, what="RBAC")
    return {
        sa: await service_accounts.token(admin, NAMESPACE, sa)
        for sa in (CONTROLLER, NOSY, PROMETHEUS)
    }


@contextlib.asynccontextmanager
async def secure_controller(
    cp: LocalControlPlane, tmp_path: Path, token: str, port: int
) -> AsyncIterator[App]:
    """The controller as the CONTROLLER ServiceAccount (``token``), /metrics secure on
    ``port``."""
    config = service_accounts.kubeconfig(tmp_path / "controller.kubeconfig", cp, CONTROLLER, token)
    settings = scenario.local_settings(
        config, "--metrics-bind-address", f"127.0.0.1:{port}", "--metrics-secure"
    )
    assert settings.metrics_secure and settings.leader_elect and not settings.metrics_cert_dir
    app = await build(settings)
    async with running(app):
        yield app


async def test_metrics_need_a_token_rbac_allows(
    private_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    cp = private_control_plane
    async with KubeClient(await load_access(str(cp.kubeconfig))) as admin:
        tokens = await accounts(admin)
        assert not await may_get_metrics(admin, NOSY)

    port = free_port()
    url = f"https://127.0.0.1:{port}/metrics"
    # Self-signed (no --metrics-cert-dir): scrapers skip verification, as kubebuilder's
    # ServiceMonitor does (insecureSkipVerify) unless cert-manager issues the certificate.
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        secure_controller(cp, tmp_path, tokens[CONTROLLER], port) as app,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False), timeout=timeout) as http,
    ):

        async def scrape(bearer: str | None = None) -> tuple[int, str]:
            headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
            async with http.get(url, headers=headers) as resp:
                return resp.status, await resp.text()

        async def listening() -> tuple[int, str] | None:
            with contextlib.suppress(aiohttp.ClientConnectorError):
                return await scrape()
            return None

        assert await eventually(listening, timeout=15, what="HTTPS /metrics") == (
            401,
            "Unauthorized\n",
        )
        assert await scrape("not-a-token") == (401, "Unauthorized\n")
        assert await scrape(tokens[NOSY]) == (403, f"Authorization denied for user {user(NOSY)}\n")

        status, body = await scrape(tokens[PROMETHEUS])
        assert status == 200, body
        assert "# TYPE controller_runtime_reconcile_total counter" in body
        assert 'rest_client_requests_total{code="201",host=' in body  # the reviews themselves
        assert not app.manager.leading  # a follower: its write gate refuses, reviews pass

        asked = reviews_made(app)
        assert asked >= 2  # a TokenReview and a SubjectAccessReview, as the controller
        assert (await scrape(tokens[PROMETHEUS]))[0] == 200
        assert reviews_made(app) == asked  # the second scrape is answered from the cache

        # Not plain HTTP: the port speaks TLS only.
        with pytest.raises(aiohttp.ClientError):
            async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                await resp.read()


SOURCES = [f"127.0.0.{n}" for n in range(2, 22)]
"""Junk-token clients on 20 loopback addresses: each source is paced on its own (5 scrapes a
second past 10), so only the reviews' own limit bounds what 20 of them cost together."""
FLOOD_SECONDS = 10.0


async def test_junk_tokens_cost_the_api_server_a_bounded_number_of_reviews(
    private_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    """Issue 39, finding 4: each unique junk bearer token was one TokenReview (28,117 requests,
    28,128 API calls in 20 s). Now, whatever the rate and however many sources, the
    controller asks the API server at most 5 reviews a second past a burst of 20, and a
    scraper whose token is cached is answered throughout."""
    cp = private_control_plane
    async with KubeClient(await load_access(str(cp.kubeconfig))) as admin:
        tokens = await accounts(admin)
    port = free_port()
    url = f"https://127.0.0.1:{port}/metrics"
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        secure_controller(cp, tmp_path, tokens[CONTROLLER], port) as app,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False), timeout=timeout) as http,
    ):

        async def prometheus() -> int:
            headers = {"Authorization": f"Bearer {tokens[PROMETHEUS]}"}
            async with http.get(url, headers=headers) as resp:
                await resp.read()
                return resp.status

        await eventually(lambda: _is_200(prometheus()), timeout=15, what="the scraper answered")
        before = reviews_made(app)
        statuses: dict[int, int] = {}

        async def junk(source: str) -> None:
            connector = aiohttp.TCPConnector(ssl=False, local_addr=(source, 0))
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as own:
                deadline = asyncio.get_running_loop().time() + FLOOD_SECONDS
                n = 0
                while asyncio.get_running_loop().time() < deadline:
                    n += 1
                    headers = {"Authorization": f"Bearer junk-{source}-{n}"}
                    async with own.get(url, headers=headers) as resp:
                        await resp.read()
                        statuses[resp.status] = statuses.get(resp.status, 0) + 1

        flood = [asyncio.create_task(junk(source)) for source in SOURCES]
        answered = []
        while not all(task.done() for task in flood):
            answered.append(await prometheus())
            await asyncio.sleep(0.5)
        await asyncio.gather(*flood)
        made = reviews_made(app) - before
        sent = sum(statuses.values())
        print(f"{sent} junk-token scrapes from {len(SOURCES)} sources in {FLOOD_SECONDS:.0f}s:"
              f" {statuses}; {made:.0f} reviews asked of the API server")  # fmt: skip
        assert sent > 5 * FLOOD_SECONDS * 5  # far more than the reviews' limit allows
        assert made <= 5 * FLOOD_SECONDS + 20 + 5  # the bucket, and a second's slack
        assert set(answered) == {200}  # the cached scraper, throughout


async def _is_200(status: Awaitable[int]) -> bool:
    return await status == 200
