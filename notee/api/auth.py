"""Who is calling: the admin token, or a service's API key.

Both come as ``Authorization: Bearer ...`` and are checked by the edge middleware
(``notee.api.edge``) before the body is read; the dependencies here hand its result to the routes
(and declare the security schemes in OpenAPI). Missing or wrong credentials answer 401 (never a hint
about which part was wrong); the admin API answers 403 to everyone while ``NOTEE_ADMIN_TOKEN`` is
unset. Service keys are refused by the admin routes (they do not match the admin token).

An API key that authenticated is remembered for ``api_key_cache_s`` (``ApiKeyCache``), so most
requests authenticate without a MySQL round trip or a worker-thread hop. A revocation through the
admin API or the console of a process forgets the key in that process at once; any other process
(another ``notee api``, a revocation made in the database) stops accepting it within
``api_key_cache_s`` (default 5 s; docs/API.md "Authentication").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from anyio import to_thread
from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from notee.core import crypto
from notee.core.errors import Forbidden, RateLimited, Unauthorized
from notee.core.settings import Settings
from notee.core.vocabulary import RateClass
from notee.domain import ratelimit, services
from notee.domain.credentials import credentials_box
from notee.store.runtime import Runtime

_admin_scheme = HTTPBearer(
    auto_error=False, scheme_name="AdminToken", description="NOTEE_ADMIN_TOKEN of the deployment"
)
_key_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="A service API key `nk_<key_id>_<secret>` (admin API creates them)",
)

Credentials = HTTPAuthorizationCredentials | None


@dataclass(frozen=True, slots=True)
class _Known:
    service: str
    key_hash: bytes  # sha256 of the secret: a cached key is still checked in constant time
    until: float  # clock() after which it is looked up again
    kind: str  # server | client: a token with the other kind's prefix is not this key


class ApiKeyCache:
    """Keys that authenticated lately, by key id, for ``ttl_s`` seconds (0: nothing is kept). Only
    keys that authenticated are kept: an unknown, wrong or revoked key always goes to MySQL, and the
    cache holds at most ``max_keys`` (the oldest go first). One per process, shared by its listeners:
    the event loop reads it, worker threads fill it (single dict operations, atomic under the GIL)."""

    def __init__(self, ttl_s: float, *, max_keys: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self.clock = clock
        self._keys: dict[str, _Known] = {}
        self._generation = 0  # bumped by every forget(): a lookup that began before it is not kept

    def service_of(self, token: str | None) -> str | None:
        """The service of a cached key whose secret matches; None: look it up in MySQL."""
        parsed = crypto.parse_api_key(token or "")
        if parsed is None:
            return None
        known = self._keys.get(parsed[0])
        if known is None:
            return None
        if self.clock() >= known.until:
            self._keys.pop(parsed[0], None)
            return None
        if known.kind != crypto.key_kind(token or ""):
            return None
        return known.service if crypto.secret_matches(parsed[1], known.key_hash) else None

    def generation(self) -> int:
        return self._generation

    def remember(self, token: str, service: str, generation: int) -> None:
        """Keep a key that just authenticated, unless a key was forgotten since ``generation`` was
        read (the lookup may have raced a revocation)."""
        parsed = crypto.parse_api_key(token)
        if self.ttl_s <= 0 or parsed is None or generation != self._generation:
            return
        while len(self._keys) >= self.max_keys:
            self._keys.pop(next(iter(self._keys)), None)
        self._keys[parsed[0]] = _Known(
            service, crypto.hash_secret(parsed[1]), self.clock() + self.ttl_s, crypto.key_kind(token)
        )

    def forget(self, key_id: str) -> None:
        """A key was revoked: refuse it from now on in this process."""
        self._generation += 1
        self._keys.pop(key_id, None)


def key_cache(request: Request) -> ApiKeyCache:
    cache: ApiKeyCache = request.app.state.key_cache
    return cache


RECEIPTS_PATH = "/v1/receipts"


def check_client_key_route(token: str | None, method: str, path: str) -> None:
    """A client key (``nck_``, shipped inside apps) may only ``POST /v1/receipts``: Forbidden (403)
    anywhere else, decided from the prefix before any lookup (docs/ENGAGEMENT.md "Client keys")."""
    if token is not None and crypto.key_kind(token) == "client" and (method, path) != ("POST", RECEIPTS_PATH):
        raise Forbidden("a client key may only post receipts (POST /v1/receipts)")


def check_admin(settings: Settings, token: str | None) -> None:
    expected = settings.admin_token
    if expected is None or not expected.get_secret_value():
        raise Forbidden("admin API is disabled (NOTEE_ADMIN_TOKEN is not set)")
    if token is None or not crypto.tokens_equal(token, expected.get_secret_value()):
        raise Unauthorized("missing or invalid admin token")


def authenticate_service(
    runtime: Runtime,
    settings: Settings,
    token: str | None,
    rate_class: RateClass | None = None,
    cache: ApiKeyCache | None = None,
    known: str | None = None,
    allowance: ratelimit.Allowance | None = None,
) -> str:
    """The calling service's id: one indexed lookup in a short session of its own (the edge
    middleware runs it before the route's session exists), so its connection is back in the pool
    before the route runs; ``known``: the service ``cache`` already vouched for (no lookup). With
    ``rate_class``, one token of the service's bucket is taken on the same connection (RateLimited: 429),
    and, with ``allowance``, the tokens it wants for the process's next requests in the same UPDATE."""
    generation = cache.generation() if cache is not None else 0
    with runtime.sessions() as session:
        if known is not None:
            service = known
        else:
            service = services.authenticate(session, token)
            if cache is not None and token is not None:
                cache.remember(token, service, generation)
        if rate_class is not None and settings.rate_limits_enabled:
            ahead = 0
            if allowance is not None:
                if allowance.needs_limit(service, rate_class):  # what a take may hold: read every few seconds
                    limit = ratelimit.get_limits(session, settings, service)[rate_class]
                    allowance.learn(service, rate_class, limit.rate, limit.burst)
                ahead = allowance.ahead_for(service, rate_class)
            try:
                spare = ratelimit.admit(session, settings, service, rate_class, ahead=ahead)
            except RateLimited:
                session.commit()  # a refusal keeps what it wrote (the bucket a first request created)
                raise
            # Not in a ``finally``: after a store error the transaction is dead, and committing it would
            # raise PendingRollbackError (a 500) in place of the outage (a 503); closing rolls it back.
            session.commit()
            if allowance is not None:
                allowance.keep(service, rate_class, spare, wanted=ahead)
        return service


def refill_allowance(
    runtime: Runtime, settings: Settings, service: str, rate_class: RateClass, allowance: ratelimit.Allowance
) -> None:
    """Take the next tokens of ``allowance`` for (service, class) before they run out, on a worker
    thread, for no request of its own (notee.api.take_ahead.TakeAheads.refill): one UPDATE, on a
    short session as ``authenticate_service``'s."""
    with runtime.sessions() as session:
        if allowance.needs_limit(service, rate_class):
            limit = ratelimit.get_limits(session, settings, service)[rate_class]
            allowance.learn(service, rate_class, limit.rate, limit.burst)
        wanted = allowance.refill_size(service, rate_class)
        if wanted <= 0:
            return
        taken = ratelimit.refill(session, settings, service, rate_class, n=wanted)
        session.commit()
    allowance.keep(service, rate_class, taken, wanted=wanted)


# ``async def`` (no I/O, or I/O on a worker thread): FastAPI would run a plain ``def`` dependency on
# a worker thread, one more hop per request.
async def require_admin(request: Request, creds: Annotated[Credentials, Security(_admin_scheme)]) -> None:
    check_admin(request.app.state.settings, creds.credentials if creds is not None else None)


async def require_service(request: Request, creds: Annotated[Credentials, Security(_key_scheme)]) -> str:
    """The service the edge middleware authenticated (looked up here only if it did not run). No
    ``RuntimeDep``: every sub-dependency costs FastAPI ~15 µs per request to resolve, on every tenant route."""
    service = getattr(request.state, "service", None)
    if isinstance(service, str):
        return service
    token = creds.credentials if creds is not None else None
    check_client_key_route(token, request.method, request.url.path)
    state = request.app.state
    return await to_thread.run_sync(
        authenticate_service, state.runtime, state.settings, token, None, key_cache(request)
    )


async def get_secrets_box(request: Request) -> crypto.SecretsBox | None:
    return credentials_box(request.app.state.settings)


AdminDep = Depends(require_admin)
ServiceDep = Annotated[str, Depends(require_service)]
BoxDep = Annotated[crypto.SecretsBox | None, Depends(get_secrets_box)]
