"""The outermost middleware: a request id per request, its metrics, and (JSON logs) one access line.

The id is the caller's ``X-Request-ID`` when it is sane (``[A-Za-z0-9._-]{1,64}``), else a new one;
it is echoed in the response's ``X-Request-ID`` and carried by every line logged while the request
runs (``notee.core.logs.request_id``). With ``log_format="json"`` uvicorn's own access log is off and this
middleware writes ``notee.access`` lines with method, path (device tokens shortened), status and
duration_ms, after the response, so the authenticated service is on the line too.

Every request is counted in ``notee_http_requests_total`` and timed in
``notee_http_request_duration_seconds`` by its route *template* (``/v1/users/{user_id}``), never its
raw path: ids and device tokens would make a series per value. A request the edge answered before
routing (401, 413, 429, ...) is matched against the routes here; one that matches none is
``unmatched``.
"""

from __future__ import annotations

import http
import itertools
import logging
import re
import secrets
import time
from copy import deepcopy
from typing import Any

import uvicorn.config
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.logging import AccessFormatter

from notee.api.route_table import route_table
from notee.api.routes.devices import shorten_tokens_in_path
from notee.core import logs, metrics

_SANE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
# A new id is this process's random prefix and a counter: unique without a getrandom() call per
# request (uuid4 was ~5 % of the event loop's time on the subscribe path).
_ID_PREFIX = secrets.token_hex(8)
_ids = itertools.count(1)
access_log = logging.getLogger("notee.access")


def request_id_of(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            candidate: str = value.decode("latin-1")
            if _SANE_ID.fullmatch(candidate):
                return candidate
            break
    return f"{_ID_PREFIX}{next(_ids):016x}"


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"
ROUTE_LABEL = "notee.route_template"  # scope key: the template of a route answered without routing


def route_template(scope: Scope) -> str:
    """The template of the route that served (or would serve) the request, for metric labels."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    # a route's answer given without routing (TopicSubscribeShortcut): the table is never needed
    # for it (building the table cost ~0.4 s of CPU, on a fresh process's first such request)
    label = scope.get(ROUTE_LABEL)
    if isinstance(label, str):
        return label
    # answered before routing (the edge), or no route: the template the path was meant for
    partial = UNMATCHED  # the path matches but not the method (405)
    for regex, methods, template in route_table(scope["app"]):
        if regex.match(scope["path"]):
            if not methods or scope["method"] in methods:
                return template
            if partial == UNMATCHED:
                partial = template
    return partial


class RequestContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_of(scope)
        rid_token = logs.request_id.set(rid)
        service_token = logs.service.set(None)
        started = time.perf_counter()
        status = 500  # what the client gets when the app fails before answering

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode("ascii"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            method = scope["method"] if scope["method"] in METHODS else "other"
            route = route_template(scope)
            metrics.http_requests(method, route, status).inc()
            metrics.http_duration(method, route).observe(elapsed)
            if scope["app"].state.settings.log_format == "json":
                access_log.info(
                    "%s %s %d",
                    scope["method"],
                    shorten_tokens_in_path(scope["path"]),
                    status,
                    extra={
                        "method": scope["method"],
                        "path": shorten_tokens_in_path(scope["path"]),
                        "status": status,
                        "duration_ms": round(elapsed * 1000, 1),
                    },
                )
            logs.service.reset(service_token)
            logs.request_id.reset(rid_token)


_PHRASES = {int(status): f"{int(status)} {status.phrase}" for status in http.HTTPStatus}


class PlainAccessFormatter(AccessFormatter):
    """uvicorn's access line (text logs), the same text, for a fraction of the CPU: without colours,
    the record is not copied twice and the status phrase is looked up in a table (uvicorn's
    formatter was ~7 % of the event loop's CPU on the subscribe path, docs/BENCHMARKS.md). With
    colours (a terminal), uvicorn's own formatting."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        args = record.args
        if self.use_colors or not isinstance(args, tuple) or len(args) != 5:
            return super().formatMessage(record)
        client_addr, method, full_path, http_version, status_code = args
        code = int(status_code)  # type: ignore[call-overload]
        values: dict[str, Any] = {
            **record.__dict__,
            "levelprefix": record.levelname + ":" + " " * (8 - len(record.levelname)),
            "client_addr": client_addr,
            "request_line": f"{method} {full_path} HTTP/{http_version}",
            "status_code": _PHRASES.get(code) or f"{code} ",
        }
        return self._style._fmt % values


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's default logging configuration (text logs) with ``PlainAccessFormatter``."""
    config: dict[str, Any] = deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["formatters"]["access"]["()"] = f"{__name__}.PlainAccessFormatter"
    return config
