"""The outermost middleware: a request id per request, and (JSON logs) one access line per request.

The id is the caller's ``X-Request-ID`` when it is sane (``[A-Za-z0-9._-]{1,64}``), else a new one;
it is echoed in the response's ``X-Request-ID`` and carried by every line logged while the request
runs (``notee.logs.request_id``). With ``log_format="json"`` uvicorn's own access log is off and this
middleware writes ``notee.access`` lines with method, path (device tokens shortened), status and
duration_ms, after the response, so the authenticated service is on the line too.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from notee import logs
from notee.api.routes.devices import shorten_tokens_in_path

_SANE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
access_log = logging.getLogger("notee.access")


def request_id_of(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            candidate: str = value.decode("latin-1")
            if _SANE_ID.fullmatch(candidate):
                return candidate
            break
    return uuid.uuid4().hex


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
                        "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                    },
                )
            logs.service.reset(service_token)
            logs.request_id.reset(rid_token)
