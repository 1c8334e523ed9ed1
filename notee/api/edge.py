"""The API's edge: limits and credentials, checked before anything reads or parses a request body.

A pure ASGI middleware, the outermost of the app's own. In order, for every HTTP request:

1. the URL (path + query) is at most ``api_max_url_bytes`` (414), the headers at most
   ``api_max_header_bytes`` (431; ``notee.api.http1`` also stops reading a longer head), and the URL
   percent-decodes to valid UTF-8 (422: otherwise Starlette turns bad bytes into U+FFFD and different byte strings would name the
   same user or topic);
2. at most ``api_max_concurrency`` requests are in progress in this process, and at most
   ``api_max_concurrency_per_address`` of them from one client address (503 ``overloaded``);
3. a declared ``Content-Length`` over ``api_max_body_bytes`` (``import_max_body_bytes`` for
   ``POST /v1/imports``) answers 413 at once;
4. credentials are checked from the headers alone — the admin token for ``/v1/admin``, an API key
   for the rest of ``/v1`` (one indexed MySQL lookup, or none for a key that authenticated within
   ``api_key_cache_s``: ``notee.api.auth.ApiKeyCache``) — so a caller without them never gets a byte
   of its body read (401/403); on the same connection one token of the service's rate limit for the
   request's class is taken (429 with Retry-After; ``notee.domain.ratelimit``);
5. the body is read into memory up to the limit (a chunked body is cut off there: 413; a body with no
   byte for ``api_body_idle_timeout_s``: 408) and its JSON
   nesting depth is checked (422) before FastAPI parses it; the route then receives it from memory.

Early answers carry ``Connection: close`` so the server drops an unread body instead of draining it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from notee.api.auth import ApiKeyCache, authenticate_service, check_admin, check_client_key_route, refill_allowance
from notee.api.connections import address_key
from notee.api.cors import cross_origin, receipts_preflight
from notee.api.errors import error_response, known_error_response
from notee.api.take_ahead import TakeAheads
from notee.core import logs
from notee.core.settings import Settings
from notee.core.vocabulary import RateClass
from notee.domain.ratelimit import Allowance

ADMIN_PREFIX = "/v1/admin"
IMPORTS_PATH = "/v1/imports"  # POST: a bulk import's file (``import_max_body_bytes``, not ``api_max_body_bytes``)
TENANT_PREFIX = "/v1/"
# A JSON string (with escapes) or one bracket: strings are skipped whole so brackets inside them do not count.
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


class _BodyTooLarge(Exception):
    pass


@dataclass(frozen=True)
class EdgeLimits:
    max_body_bytes: int
    max_json_depth: int
    max_url_bytes: int
    max_header_bytes: int
    max_concurrency: int
    max_concurrency_per_address: int

    @classmethod
    def of(cls, settings: Settings) -> EdgeLimits:
        return cls(
            settings.api_max_body_bytes,
            settings.api_max_json_depth,
            settings.api_max_url_bytes,
            settings.api_max_header_bytes,
            settings.api_max_concurrency,
            settings.api_max_concurrency_per_address,
        )


def json_too_deep(body: bytes, limit: int) -> bool:
    """True when arrays/objects nest deeper than ``limit`` (outside strings). Cheap for ordinary
    bodies: only a body with more brackets than the limit is scanned."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for match in _JSON_TOKEN.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


_PUBLISH = re.compile(r"^/v1/(topics/[^/]+/[^/]+/publish|publish/[^/]+)$")
_SEND = re.compile(r"^/v1/users/[^/]+/send$")
RECEIPTS_PATH = "/v1/receipts"
_PREVIEW = re.compile(r"^/v1/(topics/[^/]+/[^/]+/publish|publish/[^/]+)/preview$")


def rate_class(method: str, path: str) -> RateClass | None:
    """The rate-limit class of a tenant request (notee.domain.ratelimit.CLASSES); None for the
    admin API and anything outside /v1."""
    if not path.startswith(TENANT_PREFIX) or path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
        return None
    if method in ("GET", "HEAD") or (method == "POST" and _PREVIEW.match(path)):
        return "read"  # a preview writes and sends nothing: a read (docs/API.md "Rate limits")
    if method == "POST" and _PUBLISH.match(path):
        return "publish"
    if method == "POST" and _SEND.match(path):
        return "send"
    if method == "POST" and path == RECEIPTS_PATH:
        return "receipt"  # the apps': a push's answers must not take the backend's write budget
    return "write"


def path_is_utf8(scope: Scope) -> bool:
    raw = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    query = scope.get("query_string", b"")
    if b"%" not in raw and b"%" not in query and raw.isascii() and query.isascii():
        return True  # nothing to decode (most requests): ASCII is UTF-8
    try:
        unquote_to_bytes(raw).decode("utf-8")
        unquote_to_bytes(query).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def bearer_token(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value)
    return None


class EdgeGuard:
    """See the module docstring. Reads its settings and runtime from the Starlette app's state.

    The steps are plain functions that return the refusal to send (a ``Response``) or None; only the
    request's own awaits (a MySQL lookup, reading the body, the app) are awaited here, so a request
    costs no coroutine beyond them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.in_flight = 0
        self.by_address: dict[str, int] = {}  # requests in progress per client address (address_key)
        self.take_aheads = TakeAheads()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        settings: Settings = state.settings
        limits = EdgeLimits.of(settings)
        client = scope.get("client")
        address = address_key(client[0]) if client else None
        refusal = _malformed(scope, limits) or self._overloaded(limits, address)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        self.in_flight += 1
        if address is not None:
            self.by_address[address] = self.by_address.get(address, 0) + 1
        try:
            await self._guarded(scope, receive, send, settings, limits, state)
        finally:
            self.in_flight -= 1
            if address is not None:
                left = self.by_address.pop(address) - 1
                if left:
                    self.by_address[address] = left

    def _overloaded(self, limits: EdgeLimits, address: str | None) -> Response | None:
        """Step 2: the 503 when ``max_concurrency`` requests are already in progress here, or
        ``max_concurrency_per_address`` from this client (a body sent slowly holds its request in
        progress: one client must not hold every slot)."""
        if self.in_flight >= limits.max_concurrency:
            message = "too many requests in progress, retry later"
        elif address is not None and self.by_address.get(address, 0) >= limits.max_concurrency_per_address:
            message = "too many requests in progress from this address, retry later"
        else:
            return None
        return _refusal(503, "overloaded", message, headers={"Retry-After": "1"})

    def _refill(self, state: Any, settings: Settings, service: str, cls: RateClass) -> None:
        """Start a refill of the allowance of (service, class) (``TakeAheads.refill``)."""
        run = partial(refill_allowance, state.runtime, settings, service, cls, state.allowance)
        self.take_aheads.refill(service, cls, run)

    async def _guarded(
        self, scope: Scope, receive: Receive, send: Send, settings: Settings, limits: EdgeLimits, state: Any
    ) -> None:
        """Steps 3 to 5, for a request counted in ``in_flight``."""
        declared = _header(scope, b"content-length")
        path: str = scope["path"]
        if path == RECEIPTS_PATH:  # a web app's service worker posts receipts from its own origin
            if scope["method"] == "OPTIONS":
                await receipts_preflight(scope, receive, send)
                return
            send = cross_origin(send)
        is_import = scope["method"] == "POST" and path == IMPORTS_PATH
        if is_import:  # a bulk import's file has a larger limit of its own, enforced the same way
            limits = replace(limits, max_body_bytes=settings.import_max_body_bytes)
        is_admin = path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")
        refusal = _declared_too_large(declared, limits) or _served_elsewhere(path, is_admin, state)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        try:
            lookup = _credentials(scope, path, is_admin, settings, state, self._refill)
            if lookup is not None:  # a key not seen lately, or a rate class without a token taken ahead
                ask = partial(authenticate_service, state.runtime, settings, *lookup)
                _identified(scope, await self.take_aheads.admitted(lookup[4], lookup[3], lookup[1], ask))
        except Exception as exc:
            response = known_error_response(exc)
            if response is None:
                raise
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        if not _has_body(scope, declared):
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_body(receive, limits.max_body_bytes, settings.api_body_idle_timeout_s)
        except _BodyTooLarge:
            await _body_too_large(limits)(scope, receive, send)
            return
        except TimeoutError:  # no byte of the body for that long: its request slot goes back
            timeout = settings.api_body_idle_timeout_s
            await _refusal(408, "request_timeout", f"no byte of the request body for {timeout:g} s")(
                scope, receive, send
            )
            return
        if not is_import and json_too_deep(body, limits.max_json_depth):  # an import checks each line itself
            await _too_deep(limits)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


# --- the steps: each returns the refusal to send, or None to go on -------------------------------------


def _refusal(
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """An early answer: with ``Connection: close``, so the server drops the unread body."""
    return error_response(status, code, message, details, headers=(headers or {}) | {"Connection": "close"})


def _malformed(scope: Scope, limits: EdgeLimits) -> Response | None:
    """Step 1: a URL or a head over its limit (414, 431), or a URL that is not UTF-8 (422)."""
    if len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") > limits.max_url_bytes:
        return _refusal(414, "uri_too_long", f"the URL is longer than {limits.max_url_bytes} bytes")
    if sum(len(n) + len(v) + 4 for n, v in scope["headers"]) > limits.max_header_bytes:
        # notee.api.http1 bounds an incomplete head; a head that arrived whole is measured here.
        return _refusal(
            431, "headers_too_large", f"the request headers are larger than {limits.max_header_bytes} bytes"
        )
    if not path_is_utf8(scope):
        return _refusal(
            422,
            "invalid_input",
            "request failed validation",
            [{"loc": ["path"], "type": "utf8", "msg": "the URL must percent-decode to valid UTF-8"}],
        )
    return None


def _declared_too_large(declared: bytes | None, limits: EdgeLimits) -> Response | None:
    """Step 3: a declared Content-Length over the limit, refused before a byte of the body is read."""
    if declared is not None and declared.strip().isdigit() and int(declared) > limits.max_body_bytes:
        return _body_too_large(limits)
    return None


def _served_elsewhere(path: str, is_admin: bool, state: Any) -> Response | None:
    """The other listener's API (NOTEE_API_ADMIN_PORT splits them): absent here (404), not refused."""
    if (is_admin and not state.serves_admin) or (
        path.startswith(TENANT_PREFIX) and not is_admin and not state.serves_tenant
    ):
        return _refusal(404, "not_found", "Not Found")
    return None


# What ``authenticate_service`` needs after the runtime and settings: token, rate class, key cache,
# the service the cache vouched for (its allowance had no token left) and the allowance.
_KeyLookup = tuple[str | None, RateClass | None, ApiKeyCache, str | None, Allowance]


_Refill = Callable[[Any, Settings, str, RateClass], None]


def _credentials(
    scope: Scope, path: str, is_admin: bool, settings: Settings, state: Any, refill: _Refill
) -> _KeyLookup | None:
    """Step 4 from memory: the admin token, or a tenant key this process authenticated lately (no
    MySQL, no thread hop) with, for a rate class, a token it took ahead (``ratelimit.Allowance``).
    Raises the refusal of a wrong admin token (401/403). None: done; else the rest of
    ``authenticate_service``'s arguments, for the lookup (and the rate limit's 429) on a worker thread."""
    if is_admin:
        check_admin(settings, bearer_token(scope))
        return None
    if not path.startswith(TENANT_PREFIX):
        return None
    token = bearer_token(scope)
    check_client_key_route(token, scope["method"], path)
    cls = rate_class(scope["method"], path) if settings.rate_limits_enabled else None
    known = state.key_cache.service_of(token)
    if known is not None and (cls is None or state.allowance.take(known, cls)):
        _identified(scope, known)
        if cls is not None and state.allowance.refill_due(known, cls):
            refill(state, settings, known, cls)  # the next tokens, before a request finds none
        return None
    return token, cls, state.key_cache, known, state.allowance


def _identified(scope: Scope, service: str) -> None:
    scope.setdefault("state", {})["service"] = service
    logs.service.set(service)  # on every line logged for this request (notee.api.access resets it)


def _has_body(scope: Scope, declared: bytes | None) -> bool:
    return (declared is not None and declared.strip() != b"0") or _header(scope, b"transfer-encoding") is not None


def _body_too_large(limits: EdgeLimits) -> Response:
    return _refusal(413, "request_too_large", f"the request body is larger than {limits.max_body_bytes} bytes")


def _too_deep(limits: EdgeLimits) -> Response:
    """Step 5: JSON nested deeper than the limit (422), refused before FastAPI parses it."""
    return _refusal(
        422,
        "invalid_input",
        "request failed validation",
        [{"loc": ["body"], "type": "json_depth", "msg": f"JSON nesting deeper than {limits.max_json_depth}"}],
    )


async def _read_body(receive: Receive, limit: int, idle_s: float) -> bytes:
    """The whole body; _BodyTooLarge past ``limit``, TimeoutError when no part arrives for ``idle_s``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        async with asyncio.timeout(idle_s):
            message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, as one message; after it, the server's own messages (disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
