"""uvicorn and httptools are pinned exactly because of a performance detour: notee/api/http1.py
subclasses uvicorn's httptools protocol (docs/BENCHMARKS.md, "Performance detours"). The subclass is
what lets the API run on httptools (a C parser) at all: it bounds a request head httptools would
buffer without limit, by counting the bytes httptools reports; and it sends the head and body
uvicorn writes apart as one write. What it relies on, checked here against the installed versions:

* uvicorn's ``HttpToolsProtocol.data_received``, which ``http1.HttpToolsProtocol.data_received``
  re-implements (plus the head count and the error answer): its source, byte for byte;
* the methods the subclass overrides, with the signatures it calls them with, and the helpers and
  attributes it uses (``parser``, ``cycle.response_complete``, ``transport``, ``loop``, ``logger``,
  ``_unset_keepalive_if_required``, ``_should_upgrade``, ``handle_websocket_upgrade``,
  ``_unsupported_upgrade_warning``);
* uvicorn writing a response's head and body as two ``transport.write`` calls (what the coalescing
  merges: if uvicorn writes once itself, the coalescing no longer pays and goes);
* httptools reporting a header only once its line has ended, and the head bound answering from the
  protocol alone (the same over real sockets: tests/{unit,integration}/test_api_http1.py).

Each test fails naming the detour, the pinned and installed versions, and what to re-check.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as UvicornHttpTools
from uvicorn.server import ServerState

from notee.api import http1
from tests.support.pins import HTTP1

# sha256 of inspect.getsource(uvicorn's HttpToolsProtocol.data_received) in the pinned uvicorn
DATA_RECEIVED_SHA256 = "010a7ae59a5d3b1a"
OVERRIDDEN = {
    "connection_made": ["self", "transport"],
    "data_received": ["self", "data"],
    "on_message_begin": ["self"],
    "on_url": ["self", "url"],
    "on_header": ["self", "name", "value"],
    "on_headers_complete": ["self"],
    "on_body": ["self", "body"],
    "connection_lost": ["self", "exc"],
    # called, not overridden
    "_unset_keepalive_if_required": ["self"],
    "_should_upgrade": ["self"],
    "handle_websocket_upgrade": ["self"],
    "_unsupported_upgrade_warning": ["self"],
}


class _Transport:
    """What the protocol writes, and whether it closed the connection."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _serve(protocol_class: type, pieces: list[bytes]) -> _Transport:
    """Feed ``pieces`` to one connection of ``protocol_class`` serving ``_ok``; what it wrote."""

    async def scenario() -> _Transport:
        config = uvicorn.Config(_ok, http=protocol_class, lifespan="off", access_log=False, log_level="error")
        config.load()
        loop = asyncio.get_running_loop()
        protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        transport = _Transport()
        protocol.connection_made(transport)
        for piece in pieces:
            if transport.closed:
                break
            protocol.data_received(piece)
        for _ in range(20):  # the app's task and the coalesced write
            await asyncio.sleep(0)
        return transport

    return asyncio.run(scenario())


def test_uvicorn_and_httptools_are_pinned_exactly_to_the_installed_versions() -> None:
    HTTP1.assert_pinned_to_installed()


def test_the_data_received_the_subclass_re_implements_is_unchanged() -> None:
    source = inspect.getsource(UvicornHttpTools.data_received)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    assert digest == DATA_RECEIVED_SHA256, HTTP1.loud(
        f"uvicorn's HttpToolsProtocol.data_received changed (sha256 {digest}), now:\n{source}"
    )


def test_the_overridden_and_called_methods_keep_their_signatures() -> None:
    for name, params in OVERRIDDEN.items():
        method = getattr(UvicornHttpTools, name, None)
        assert method is not None, HTTP1.loud(f"uvicorn's HttpToolsProtocol has no {name} any more")
        got = list(inspect.signature(method).parameters)
        assert got == params, HTTP1.loud(f"uvicorn's HttpToolsProtocol.{name} now takes {got}, not {params}")


def test_a_connection_has_the_attributes_the_subclass_reads() -> None:
    async def scenario() -> list[str]:
        config = uvicorn.Config(_ok, http=http1.HttpToolsProtocol, lifespan="off")
        config.load()
        protocol = config.http_protocol_class(
            config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop()
        )
        protocol.connection_made(_Transport())
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return [a for a in ("parser", "logger", "loop", "transport", "cycle") if not hasattr(protocol, a)] + (
            [] if hasattr(protocol.cycle, "response_complete") else ["cycle.response_complete"]
        )

    missing = asyncio.run(scenario())
    assert not missing, HTTP1.loud(f"uvicorn's protocol no longer has {missing}")


def test_uvicorn_writes_a_responses_head_and_body_apart_and_the_subclass_joins_them() -> None:
    request = [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"]
    stock = _serve(UvicornHttpTools, request).writes
    assert len(stock) == 2 and stock[1] == b"ok", HTTP1.loud(
        f"uvicorn now writes a response as {len(stock)} pieces: if one, the coalescing "
        "(http1.CoalescingTransport) no longer pays and should go"
    )
    ours = _serve(http1.HttpToolsProtocol, request).writes
    assert ours == [b"".join(stock)], HTTP1.loud(f"the subclass wrote {ours}")


def test_httptools_reports_a_header_only_once_its_line_has_ended() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.events: list[tuple[str, bytes]] = []

        def on_url(self, url: bytes) -> None:
            self.events.append(("url", url))

        def on_header(self, name: bytes, value: bytes) -> None:
            self.events.append(("header", name + b": " + value))

    recorder = Recorder()
    parser = httptools.HttpRequestParser(recorder)
    head = b"GET /a/long/path HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 300 + b"\r\n\r\n"
    for i in range(len(head)):  # one byte at a time
        parser.feed_data(head[i : i + 1])
    headers = [value for kind, value in recorder.events if kind == "header"]
    url = b"".join(value for kind, value in recorder.events if kind == "url")
    assert headers == [b"Host: x", b"X-Pad: " + b"p" * 300] and url == b"/a/long/path", HTTP1.loud(
        f"httptools reported {recorder.events[:6]}..."
    )


def test_an_unfinished_head_over_the_bound_is_answered_400_and_closed() -> None:
    limit = 1024
    pieces = [b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: "] + [b"p" * 100] * 30  # 3,000 bytes, no line end
    transport = _serve(http1.HttpToolsProtocol.with_head_limit(limit), pieces)
    assert transport.closed, HTTP1.loud("the connection stayed open past the head bound")
    head, _, body = b"".join(transport.writes).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), HTTP1.loud(f"answered {head!r}")
    assert json.loads(body)["error"]["code"] == "headers_too_large", HTTP1.loud(f"answered {body!r}")
