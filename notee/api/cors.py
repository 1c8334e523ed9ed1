"""CORS for ``POST /v1/receipts`` (the edge applies it, notee.api.edge).

Receipts come from apps, a web app's service worker too (docs/ENGAGEMENT.md "What an app adds"), on
another origin than the API's. Any origin may post them: the client key is public by design and
nothing here reads cookies. Every other route stays same-origin only.
"""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

_CORS = [(b"access-control-allow-origin", b"*")]
_PREFLIGHT = [
    *_CORS,
    (b"access-control-allow-methods", b"POST"),
    (b"access-control-allow-headers", b"authorization, content-type"),
    (b"access-control-max-age", b"86400"),
    (b"content-length", b"0"),
]


async def receipts_preflight(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": list(_PREFLIGHT)})
    await send({"type": "http.response.body", "body": b""})


def cross_origin(send: Send) -> Send:
    async def with_cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *_CORS]}
        await send(message)

    return with_cors
