"""The secure /metrics endpoint (``--metrics-secure``): a bearer token checked by TokenReview
(401 without one or with a bad one), the request by SubjectAccessReview (403 when denied),
answers cached for the delegating TTLs, and a review that cannot be made is a 500, never an
allow, never cached. Fakes stand in for the two reviews; one test checks the real client's
two calls against a fake API server."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter

from linkerd_config.kube.admission import ReloadingCertificate
from linkerd_config.kube.certs import TinyCA, self_signed_serving_pair, write_serving_pair
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.delegated_auth import (
    REVIEW_BURST,
    REVIEW_QPS,
    SOURCE_REVIEW_BURST,
    SOURCE_REVIEW_QPS,
    CacheTTLs,
    DelegatedAuth,
    ReviewLimited,
    TTLCache,
    UserInfo,
    bearer_token,
)
from linkerd_config.kube.kubeconfig import ClusterAccess
from linkerd_config.kube.probes import Probes
from linkerd_config.kube.serving import InMemoryCertificate, ServingCertificate, serve_tls
from linkerd_config.settings import SettingsError, parse
from tests.support.clock import FakeClock

Json = dict[str, Any]

GOOD, OTHER, BAD = "good-token", "other-token", "not-a-token"
READER = "system:serviceaccount:monitoring:prometheus"
STRANGER = "system:serviceaccount:default:nobody"


class FakeReviews:
    """The API server's answers: tokens it knows, users RBAC lets get /metrics."""

    def __init__(self) -> None:
        self.users: dict[str, Json] = {
            GOOD: {
                "username": READER,
                "uid": "uid-1",
                "groups": ["system:serviceaccounts"],
                "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
            },
            OTHER: {"username": STRANGER, "groups": ["system:authenticated"]},
        }
        self.readers = {READER}
        self.token_calls: list[tuple[str, float | None]] = []
        self.access_calls: list[tuple[Json, float | None]] = []
        self.failure: Exception | None = None

    @property
    def calls(self) -> int:
        return len(self.token_calls) + len(self.access_calls)

    async def review_token(self, token: str, *, timeout: float | None = None) -> Json:
        self.token_calls.append((token, timeout))
        if self.failure is not None:
            raise self.failure
        user = self.users.get(token)
        if user is None:
            return {"authenticated": False, "error": "invalid bearer token"}
        return {"authenticated": True, "user": user}

    async def review_access(self, spec: Json, *, timeout: float | None = None) -> Json:
        self.access_calls.append((spec, timeout))
        if self.failure is not None:
            raise self.failure
        wanted = {"path": "/metrics", "verb": "get"}
        if spec["user"] in self.readers and spec.get("nonResourceAttributes") == wanted:
            return {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "reader"'}
        return {"allowed": False}


def metrics_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("controller_runtime_reconcile_total", "reconciles", registry=registry).inc()
    return registry


@pytest.fixture
def reviews() -> FakeReviews:
    return FakeReviews()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def scraper(reviews: FakeReviews, clock: FakeClock) -> AsyncIterator[TestClient[Any, Any]]:
    auth = DelegatedAuth(reviews, clock=clock)
    app = Probes(metrics_registry()).metrics_app(auth)
    async with TestClient(TestServer(app)) as client:
        yield client


async def scrape(client: TestClient[Any, Any], token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with client.get("/metrics", headers=headers) as resp:
        return resp.status, await resp.text()


# -- 401 / 403 / 200 -------------------------------------------------------------------------


async def test_no_token_is_401_and_asks_nobody(
    scraper: TestClient[Any, Any], reviews: FakeReviews
) -> None:
    status, body = await scrape(scraper)
    assert (status, body) == (401, "Unauthorized\n")
    for header in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "bearer  two-spaces"):
        async with scraper.get("/metrics", headers={"Authorization": header}) as resp:
            assert resp.status == 401, header
            assert resp.headers["WWW-Authenticate"] == "Bearer"
    assert reviews.calls == 0


async def test_a_bad_token_is_401(scraper: TestClient[Any, Any], reviews: FakeReviews) -> None:
    assert await scrape(scraper, BAD) == (401, "Unauthorized\n")
    assert [t for t, _ in reviews.token_calls] == [BAD]
    assert reviews.access_calls == []  # never authorized


async def test_denied_is_403_and_logged_at_debug_with_the_user_not_the_token(
    scraper: TestClient[Any, Any], reviews: FakeReviews
) -> None:
    with structlog.testing.capture_logs() as logs:
        status, body = await scrape(scraper, OTHER)
    assert (status, body) == (403, f"Authorization denied for user {STRANGER}\n")
    (denied,) = [e for e in logs if e["event"] == "authorization denied"]
    assert denied["log_level"] == "debug"
    assert denied["user"] == STRANGER and denied["verb"] == "get" and denied["path"] == "/metrics"
    assert OTHER not in repr(logs)


async def test_allowed_gets_the_metrics(
    scraper: TestClient[Any, Any], reviews: FakeReviews
) -> None:
    status, body = await scrape(scraper, GOOD)
    assert status == 200
    assert "controller_runtime_reconcile_total 1.0" in body
    ((spec, timeout),) = reviews.access_calls
    assert spec == {
        "user": READER,
        "uid": "uid-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    assert timeout == 10.0 and reviews.token_calls == [(GOOD, 10.0)]


async def test_the_verb_is_the_method_in_lower_case(
    scraper: TestClient[Any, Any], reviews: FakeReviews
) -> None:
    async with scraper.head("/metrics", headers={"Authorization": f"Bearer {GOOD}"}) as resp:
        assert resp.status == 403  # RBAC here grants get, not head
    assert reviews.access_calls[0][0]["nonResourceAttributes"]["verb"] == "head"


# -- the cache -------------------------------------------------------------------------------


async def test_a_second_scrape_makes_no_review(
    scraper: TestClient[Any, Any], reviews: FakeReviews, clock: FakeClock
) -> None:
    assert (await scrape(scraper, GOOD))[0] == 200
    assert reviews.calls == 2
    clock.now += 15  # the next scrape
    assert (await scrape(scraper, GOOD))[0] == 200
    assert reviews.calls == 2
    clock.now += 46  # 61 s: the token is reviewed again, the allow still cached (5 min)
    assert (await scrape(scraper, GOOD))[0] == 200
    assert (len(reviews.token_calls), len(reviews.access_calls)) == (2, 1)
    clock.now += 240  # 301 s: both again
    assert (await scrape(scraper, GOOD))[0] == 200
    assert (len(reviews.token_calls), len(reviews.access_calls)) == (3, 2)


async def test_a_denial_is_cached_for_30s_only(
    scraper: TestClient[Any, Any], reviews: FakeReviews, clock: FakeClock
) -> None:
    assert (await scrape(scraper, OTHER))[0] == 403
    reviews.readers.add(STRANGER)  # RBAC granted meanwhile
    clock.now += 29
    assert (await scrape(scraper, OTHER))[0] == 403
    assert len(reviews.access_calls) == 1  # the denial came from the cache
    clock.now += 2
    assert (await scrape(scraper, OTHER))[0] == 200
    assert len(reviews.access_calls) == 2


async def test_a_bad_token_is_remembered_for_a_minute(
    scraper: TestClient[Any, Any], reviews: FakeReviews, clock: FakeClock
) -> None:
    for _ in range(3):
        assert (await scrape(scraper, BAD))[0] == 401
    assert len(reviews.token_calls) == 1
    clock.now += 61
    assert (await scrape(scraper, BAD))[0] == 401
    assert len(reviews.token_calls) == 2


def test_the_cache_is_bounded_and_forgets_the_least_recently_used(clock: FakeClock) -> None:
    cache: TTLCache[str, int] = TTLCache(2, clock)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3, 10)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (1, None, 3, 2)
    clock.now += 10
    assert cache.get("a") is None and len(cache) == 1


async def test_tokens_are_not_kept_in_memory(reviews: FakeReviews, clock: FakeClock) -> None:
    auth = DelegatedAuth(reviews, clock=clock)
    assert await auth.authenticate(GOOD) is not None
    assert GOOD.encode() not in repr(vars(auth._tokens)).encode()


# -- the API server unreachable --------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        aiohttp.ClientConnectionError("connection refused"),
        TimeoutError(),
        ApiError(403, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", None, None),
    ],
    ids=["unreachable", "timeout", "review-forbidden"],
)
async def test_no_token_review_is_500_and_not_cached(
    scraper: TestClient[Any, Any], reviews: FakeReviews, failure: Exception
) -> None:
    reviews.failure = failure
    with structlog.testing.capture_logs() as logs:
        assert await scrape(scraper, GOOD) == (500, "Authentication failed\n")
    assert [e["log_level"] for e in logs if e["event"] == "authentication failed"] == ["error"]
    assert GOOD not in repr(logs)
    reviews.failure = None
    assert (await scrape(scraper, GOOD))[0] == 200  # asked again: the failure was not cached
    assert len(reviews.token_calls) == 2


async def test_no_access_review_is_500_and_not_cached(
    scraper: TestClient[Any, Any], reviews: FakeReviews, clock: FakeClock
) -> None:
    assert (await scrape(scraper, GOOD))[0] == 200
    clock.now += 301  # the allow expired; the token too
    original = reviews.review_access

    async def unreachable(spec: Json, *, timeout: float | None = None) -> Json:
        reviews.access_calls.append((spec, timeout))
        raise aiohttp.ServerDisconnectedError()

    reviews.review_access = unreachable  # type: ignore[method-assign]
    assert await scrape(scraper, GOOD) == (500, f"Authorization for user {READER} failed\n")
    reviews.review_access = original  # type: ignore[method-assign]
    assert (await scrape(scraper, GOOD))[0] == 200
    assert len(reviews.access_calls) == 3


# -- small parts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("  BEARER abc  ", "abc"),
        ("Bearer abc def", "abc"),
        ("Bearer", None),
        ("Bearer  abc", None),  # the API server too: an empty token, then junk
        ("Basic abc", None),
        ("", None),
    ],
)
def test_bearer_token_parsing(header: str, token: str | None) -> None:
    assert bearer_token(header) == token


def test_user_groups_get_system_authenticated_once() -> None:
    user = UserInfo.from_review({"username": "u", "groups": ["system:authenticated", "g"]})
    assert user.groups == ("system:authenticated", "g")
    assert UserInfo.from_review({"username": "u"}).groups == ("system:authenticated",)


def test_ttls_are_the_delegating_defaults() -> None:
    assert CacheTTLs() == CacheTTLs(authenticated=60, unauthenticated=60, allowed=300, denied=30)


# -- the real client's calls, against a fake API server --------------------------------------


class RefuseAllWrites:
    def check(self, method: str, path: str) -> None:
        raise AssertionError(f"{method} {path} went through the write gate")


async def test_the_client_reviews_are_unfenced_posts_of_the_review_kinds() -> None:
    seen: list[tuple[str, Json]] = []

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((request.path, body))
        status = (
            {"authenticated": True, "user": {"username": "u"}}
            if body["kind"] == "TokenReview"
            else {"allowed": True}
        )
        return web.json_response({**body, "status": status}, status=201)

    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", review)
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    async with TestServer(app) as server:

        async def bearer() -> str:
            return "Bearer controller"

        access = ClusterAccess(str(server.make_url("")).rstrip("/"), False, bearer, "test")
        async with KubeClient(access, write_gate=RefuseAllWrites()) as client:
            auth = DelegatedAuth(client)
            user = await auth.authenticate("scraper-token")
            assert user is not None and user.name == "u"
            assert (await auth.authorize(user, "get", "/metrics")).allowed
    assert seen == [
        (
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": "scraper-token"},
            },
        ),
        (
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": "u",
                    "groups": ["system:authenticated"],
                    "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                },
            },
        ),
    ]


# -- TLS -------------------------------------------------------------------------------------


async def serve_in_background(certificate: ServingCertificate) -> tuple[asyncio.Task[None], int]:
    app = Probes(metrics_registry()).metrics_app()
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_tls(app, "127.0.0.1", 0, certificate, name="metrics-test", on_bound=bound.set_result)
    )
    return task, await asyncio.wait_for(bound, 5)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_self_signed_metrics_serve_tls_only() -> None:
    pair = self_signed_serving_pair()
    task, port = await serve_in_background(InMemoryCertificate(pair.cert_pem, pair.key_pem))
    try:
        ca = pair.cert_pem.split(b"-----END CERTIFICATE-----\n", 1)[1]  # leaf, then its CA
        trust = ssl.create_default_context(cadata=ca.decode())
        async with aiohttp.ClientSession() as session:
            async with session.get(f"https://localhost:{port}/metrics", ssl=trust) as resp:
                assert resp.status == 200
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    await resp.read()
    finally:
        await stop(task)


def test_the_in_memory_pair_loads_without_memfd_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "memfd_create", raising=False)
    pair = self_signed_serving_pair()
    assert InMemoryCertificate(pair.cert_pem, pair.key_pem).available.is_set()
    with pytest.raises(ssl.SSLError):
        InMemoryCertificate(pair.cert_pem, self_signed_serving_pair().key_pem)  # not its key


async def test_a_cert_dir_is_served_and_followed(tmp_path: Path) -> None:
    ca = TinyCA("metrics-test-ca")
    write_serving_pair(tmp_path, ["localhost"], ["127.0.0.1"], ca)
    certificate = ReloadingCertificate(tmp_path / "tls.crt", tmp_path / "tls.key")
    task, port = await serve_in_background(certificate)
    try:
        trust = ssl.create_default_context(cadata=ca.cert_pem.decode())
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"https://127.0.0.1:{port}/metrics", ssl=trust) as resp,
        ):
            assert resp.status == 200
        assert certificate.reloads == 1
    finally:
        await stop(task)


# -- settings --------------------------------------------------------------------------------

KUBECONFIG = ["--kubeconfig", "/dev/null"]


def test_metrics_secure_settings() -> None:
    plain = parse(KUBECONFIG, env={})
    assert (plain.metrics_secure, plain.metrics_cert_dir, plain.metrics_address) == (
        False,
        "",
        ("0.0.0.0", 8080),
    )
    assert parse([*KUBECONFIG, "--metrics-secure"], env={}).metrics_secure is True
    assert parse([*KUBECONFIG, "--metrics-secure", "false"], env={}).metrics_secure is False
    env = {"METRICS_SECURE": "true", "METRICS_CERT_DIR": "/certs"}
    secure = parse([*KUBECONFIG, "--metrics-bind-address=:8443"], env=env)
    assert (secure.metrics_secure, secure.metrics_cert_dir, secure.metrics_address) == (
        True,
        "/certs",
        ("0.0.0.0", 8443),
    )
    with pytest.raises(SettingsError, match="--metrics-cert-dir = '/certs' is used only with"):
        parse([*KUBECONFIG, "--metrics-cert-dir", "/certs"], env={})


async def test_a_flood_of_junk_tokens_costs_the_api_server_a_bounded_number_of_reviews(
    reviews: FakeReviews, clock: FakeClock
) -> None:
    """Issue 39, finding 4: a new junk token per request was one TokenReview per request
    (28,117 requests, 28,128 API calls in 20 s). Now at most the burst, then the rate; the
    token whose answer is cached is not slowed; over the rate, ``ReviewLimited``."""
    auth = DelegatedAuth(reviews, clock=clock)
    assert await auth.authenticate(GOOD) is not None  # cached from now on
    before, limited = reviews.calls, 0
    for second in range(20):
        for n in range(100):  # 100 requests a second, each with a token never seen
            try:
                assert await auth.authenticate(f"junk-{second}-{n}") is None
            except ReviewLimited as exc:
                limited += 1
                assert exc.retry_after == 1.0 / REVIEW_QPS
        assert await auth.authenticate(GOOD) is not None
        clock.now += 1.0
    sent = reviews.calls - before
    assert sent <= REVIEW_BURST + REVIEW_QPS * 20, sent
    assert limited == 2000 - sent


async def test_a_new_valid_token_is_not_refused_behind_another_sources_junk(
    reviews: FakeReviews, clock: FakeClock
) -> None:
    """Issue 61, finding 9: behind a flood of junk tokens, a new valid scraper token got 429
    three times out of three. The flooding source spends its own share of reviews; a new
    token from another source is reviewed, each second of the flood; the API server's cost
    stays bounded."""
    auth = DelegatedAuth(reviews, clock=clock)
    flooder, scraper = "10.0.0.9", "10.0.0.2"
    limited = 0
    for second in range(10):
        for n in range(100):
            try:
                await auth.authenticate(f"junk-{second}-{n}", flooder)
            except ReviewLimited:
                limited += 1
        fresh = f"scraper-{second}"  # a rotated token, never seen
        reviews.users[fresh] = reviews.users[GOOD]
        user = await auth.authenticate(fresh, scraper)
        assert user is not None and user.name == READER
        assert (await auth.authorize(user, "get", "/metrics", scraper)).allowed
        clock.now += 1.0
    assert limited >= 1000 - (SOURCE_REVIEW_BURST + SOURCE_REVIEW_QPS * 10)
    assert reviews.calls <= REVIEW_BURST + REVIEW_QPS * 10


async def test_over_the_review_rate_a_request_is_429_with_retry_after(
    reviews: FakeReviews, clock: FakeClock
) -> None:
    auth = DelegatedAuth(reviews, clock=clock, review_qps=1.0, review_burst=1)
    app = Probes(metrics_registry()).metrics_app(auth)
    async with TestClient(TestServer(app)) as client:
        assert (await scrape(client, "junk-1"))[0] == 401  # reviewed: the one token there was
        async with client.get("/metrics", headers={"Authorization": "Bearer junk-2"}) as resp:
            assert (resp.status, resp.headers.get("Retry-After")) == (429, "1")
        assert reviews.calls == 1
