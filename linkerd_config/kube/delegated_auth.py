"""Delegated authentication and authorization: the API server decides who a caller is and
what it may do, as kube-apiserver's delegating authenticator/authorizer (and so
controller-runtime's secure metrics filter) does.

* authentication: the caller's bearer token goes into a TokenReview; the API server answers
  with the user (name, uid, groups, extra) or "not authenticated";
* authorization: that user, the HTTP verb and the path go into a SubjectAccessReview with
  non-resource attributes, so plain RBAC decides (``nonResourceURLs: ["/metrics"]``,
  ``verbs: ["get"]``).

Answers are cached, bounded, for the delegating defaults (tokens 1 min either way; access
5 min when allowed, 30 s when denied), so a scraper every 15 s costs an API call about once
a minute, not two per scrape. Tokens are cached under a keyed hash, never as themselves.
A review that cannot be made (API server unreachable, timed out, refused the review itself)
is :class:`ReviewError`: neither an allow nor a deny, and never cached.

Reviews the caches cannot answer are sent at most ``review_qps`` per second (a burst of
``review_burst``), whatever the request rate: a caller sending a new junk token per request
would otherwise turn each request into an API call (28,117 requests made 28,128 in 20 s,
issue 39, finding 4), in the priority-and-fairness flow the controller's Lease renewals use.
Over the limit, :class:`ReviewLimited`: the request is answered 429 with Retry-After, and a
scraper whose answer is cached is not slowed at all. Each source address has a share of its
own (``SOURCE_REVIEW_QPS``, a burst of ``SOURCE_REVIEW_BURST``), taken before the shared
rate: one source flooding junk tokens spends its share, never the rate a new valid token from
another source needs (issue 61, finding 9: a new scraper token got 429 three times out of
three behind a junk-token flood).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from linkerd_config.kube.ratelimit import TokenBucket
from linkerd_config.kube.resource import Json

AUTHENTICATED_GROUP = "system:authenticated"
UNAUTHENTICATED_GROUP = "system:unauthenticated"

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Reviews(Protocol):
    """The two API calls (``KubeClient`` has them); each returns the review's ``status``."""

    async def review_token(self, token: str, *, timeout: float | None = None) -> Json: ...

    async def review_access(self, spec: Json, *, timeout: float | None = None) -> Json: ...


class ReviewError(Exception):
    """A review could not be made or answered; the request must fail, not pass."""


@dataclass(frozen=True)
class UserInfo:
    """Who a token belongs to, as the TokenReview said (hashable: it keys the access cache)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @staticmethod
    def from_review(user: Json) -> UserInfo:
        groups = [str(g) for g in user.get("groups") or []]
        # As the API server's authenticated-group adder: every authenticated user is in
        # system:authenticated, so RBAC bindings to that group hold here too.
        if AUTHENTICATED_GROUP not in groups and UNAUTHENTICATED_GROUP not in groups:
            groups.append(AUTHENTICATED_GROUP)
        extra = user.get("extra") or {}
        return UserInfo(
            name=str(user.get("username", "")),
            uid=str(user.get("uid", "")),
            groups=tuple(groups),
            extra=tuple(
                sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in extra.items())
            ),
        )


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


@dataclass(frozen=True)
class _Authentication:
    user: UserInfo | None  # None: the API server said the token is not valid


class TTLCache(Generic[K, V]):
    """At most ``max_entries`` answers, each until its own deadline; least recently used
    goes first when full. Not thread-safe (one event loop)."""

    def __init__(self, max_entries: int, clock: Callable[[], float]) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        deadline, value = found
        if self._clock() >= deadline:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


@dataclass(frozen=True)
class CacheTTLs:
    """controller-runtime's (and the API server's delegating) defaults."""

    authenticated: float = 60.0
    unauthenticated: float = 60.0
    allowed: float = 300.0
    denied: float = 30.0


class ReviewLimited(ReviewError):
    """Over the rate of reviews sent to the API server: try again after ``retry_after``."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many reviews: try again in {retry_after:.1f}s")
        self.retry_after = retry_after


REVIEW_QPS = 5.0
REVIEW_BURST = 20
SOURCE_REVIEW_QPS = 2.0
SOURCE_REVIEW_BURST = 10
"""One source's share: a scraper's new token takes two reviews (the token, then access), a
person trying a few tokens a few more; one flooding source spends at most half the shared
burst, and under half the shared rate."""


class DelegatedAuth:
    """Authenticates bearer tokens and authorizes non-resource requests with the API server."""

    def __init__(
        self,
        reviews: Reviews,
        *,
        timeout: float = 10.0,
        ttls: CacheTTLs | None = None,
        max_entries: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        review_qps: float = REVIEW_QPS,
        review_burst: int = REVIEW_BURST,
    ) -> None:
        self.reviews = reviews
        self.timeout = timeout
        """Per review call (controller-runtime's TokenAccessReviewTimeout is 10 s)."""
        self.ttls = ttls or CacheTTLs()
        self._hash_key = secrets.token_bytes(32)
        self._tokens: TTLCache[bytes, _Authentication] = TTLCache(max_entries, clock)
        self._access: TTLCache[tuple[UserInfo, str, str], Decision] = TTLCache(max_entries, clock)
        self._clock = clock
        self._reviews = TokenBucket(review_qps, review_burst, clock())
        """Reviews sent (token and access alike): the API server's cost, bounded."""
        self._sources: OrderedDict[str, TokenBucket] = OrderedDict()
        """Each source's share, the least recently seen first (at most ``max_entries``)."""
        self._max_sources = max_entries

    def _may_review(self, source: str | None) -> None:
        now = self._clock()
        if source is not None:
            share = self._sources.get(source)
            if share is None:
                share = self._sources[source] = TokenBucket(
                    SOURCE_REVIEW_QPS, SOURCE_REVIEW_BURST, now
                )
                if len(self._sources) > self._max_sources:
                    self._sources.popitem(last=False)
            else:
                self._sources.move_to_end(source)
            if not share.allow(now):
                raise ReviewLimited(1.0 / share.qps)
        if not self._reviews.allow(now):
            raise ReviewLimited(1.0 / self._reviews.qps)

    async def authenticate(self, token: str, source: str | None = None) -> UserInfo | None:
        """The token's user, or None when the API server says it is not valid; ``source``:
        the address that sent it, whose share of reviews a review takes."""
        key = hmac.new(self._hash_key, token.encode(), hashlib.sha256).digest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached.user
        self._may_review(source)
        try:
            status = await self.reviews.review_token(token, timeout=self.timeout)
        except Exception as exc:  # unreachable, timed out, 403 on tokenreviews: no answer
            raise ReviewError(f"TokenReview failed: {_describe(exc)}") from exc
        user = None
        if status.get("authenticated") is True and isinstance(status.get("user"), dict):
            user = UserInfo.from_review(status["user"])
        ttl = self.ttls.authenticated if user else self.ttls.unauthenticated
        self._tokens.put(key, _Authentication(user), ttl)
        return user

    async def authorize(
        self, user: UserInfo, verb: str, path: str, source: str | None = None
    ) -> Decision:
        """Whether ``user`` may ``verb`` the non-resource URL ``path`` (``source``: as for
        ``authenticate``)."""
        key = (user, verb, path)
        cached = self._access.get(key)
        if cached is not None:
            return cached
        self._may_review(source)
        spec: Json = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        try:
            status = await self.reviews.review_access(spec, timeout=self.timeout)
        except Exception as exc:
            raise ReviewError(f"SubjectAccessReview failed: {_describe(exc)}") from exc
        # An explicit deny wins over an allow (the API server never sends both).
        allowed = status.get("allowed") is True and status.get("denied") is not True
        decision = Decision(allowed, str(status.get("reason") or ""))
        self._access.put(key, decision, self.ttls.allowed if allowed else self.ttls.denied)
        return decision


def _describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None (the API server's
    parsing: scheme case-insensitive, an empty token is no token)."""
    parts = header.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]
