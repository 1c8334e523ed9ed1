"""The HTTP/1.1 protocol of the API's listeners: uvicorn's httptools protocol (llhttp, a C parser),
with the head-size bound Notee needs and a response written in one piece.

* **Head size.** httptools buffers a request head of any size (a header value arriving in pieces
  grows inside the parser until its line ends). ``HttpToolsProtocol`` here counts the bytes of the
  head it has been fed: a head still incomplete past ``api_max_header_bytes`` is answered 400
  ``headers_too_large`` in the error format and the connection closed, so at most one read beyond the
  limit is ever held. A head that arrived whole is measured by the edge (431, ``notee.api.edge``).
* **URL length.** A request line still incomplete past ``api_max_url_bytes`` of URL is answered 414
  ``uri_too_long`` (not the head bound's 400): a URL of 10,000 query parameters is too long a URL.
  A URL that arrived whole is measured by the edge (414 too).
* **Connections** (``notee.api.connections.ConnectionGuard``, one per process): a connection over its
  client address's cap is answered 429 ``too_many_connections`` and closed before anything is read;
  a head not whole within ``api_head_timeout_s`` is answered 408 ``request_timeout`` and closed; a
  connection closes after ``api_keepalive_max_requests`` requests (the last answer says
  ``Connection: close``).
* **One write per response.** uvicorn writes a response's head and its body with two
  ``transport.write`` calls, each one ``send()`` (and one TCP segment for the client to wake up
  to) where one would do. ``CoalescingTransport`` holds what is written in one
  event-loop step and sends it as one piece at the end of the step (anything of 64 KiB or more at
  once, after what it holds).

A subclass of uvicorn's protocol that re-implements its ``data_received``: a performance detour
(docs/BENCHMARKS.md, "Performance detours"). uvicorn and httptools are pinned exactly, and
tests/unit/test_uvicorn_pins.py fails, naming it, when what it overrides or reads changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _UvicornHttpTools

from notee.api.connections import ConnectionGuard, TooManyConnections
from notee.api.errors import error_response
from notee.core.settings import Settings

LARGE_WRITE = 64 * 1024  # written at once (after what is held): copying it to join would cost more


class CoalescingTransport:
    """A connection's transport whose writes of one event-loop step go out as one ``write``."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) >= LARGE_WRITE:
            self.flush()
            self._transport.write(data)
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        if self._held:
            data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
            self._held.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()  # what was written before close() still goes out (a 400, a last response)
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def __getattr__(self, name: str) -> Any:  # get_extra_info, set_protocol, abort, ...
        return getattr(self._transport, name)


def _error_answer(status: int, code: str, message: str, extra: bytes = b"") -> bytes:
    """A whole HTTP/1.1 answer in the error format, for the protocol layer (outside the ASGI app)."""
    body = bytes(error_response(status, code, message).body)
    return (
        STATUS_LINE[status]
        + extra
        + b"content-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: close\r\n\r\n"
        + body
    )


class HttpToolsProtocol(_UvicornHttpTools):
    """uvicorn's httptools protocol with a bounded request head and URL, guarded connections and
    coalesced writes (module doc). ``for_listener`` makes the class a listener uses."""

    max_head_bytes = 16384
    max_url_bytes = 8192
    max_requests = 1000  # per connection
    guard: ConnectionGuard | None = None  # None: no cap per address, no head deadline
    _over_cap: bytes | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_fed: int | None = None  # bytes fed while the current head is incomplete; None: no head
        self._reported = 0  # bytes of this feed the parser has reported (URL, headers, body)
        self._before_head = -1  # _reported when the current head began in this feed; -1: it did not
        self._address: str | None = None  # what the guard counts this connection against
        self._requests = 0

    @classmethod
    def with_head_limit(cls, max_head_bytes: int, **limits: Any) -> type[HttpToolsProtocol]:
        """A subclass with these class attributes (``max_head_bytes`` and any of ``max_url_bytes``,
        ``max_requests``, ``guard``)."""
        return type(cls.__name__, (cls,), {"max_head_bytes": max_head_bytes} | limits)

    @classmethod
    def for_listener(cls, settings: Settings, guard: ConnectionGuard) -> type[HttpToolsProtocol]:
        return cls.with_head_limit(
            settings.api_max_header_bytes,
            max_url_bytes=settings.api_max_url_bytes,
            max_requests=settings.api_keepalive_max_requests,
            guard=guard,
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        if self.guard is None:
            return
        try:
            self._address = self.guard.admit(self.client[0] if self.client else None)
        except TooManyConnections:
            # Not one of the process's connections (api_max_connections): it is gone at once.
            self.connections.discard(self)
            self.transport.write(self._over_cap_answer())
            self.transport.close()
            return
        self.guard.head_begins(self, self.loop)  # the first head's deadline runs from the accept

    @classmethod
    def _over_cap_answer(cls) -> bytes:
        """The 429 of a connection over its address's cap: made once per listener (a flood of
        connections is answered at the cost of a write each)."""
        answer = cls._over_cap  # None until this listener's class refused one (a subclass's own)
        if answer is None:
            per_address = cls.guard.limits.per_address if cls.guard else 0
            message = f"more than {per_address} open connections from this address"
            answer = _error_answer(429, "too_many_connections", message, b"retry-after: 1\r\n")
            cls._over_cap = answer
        return answer

    def connection_lost(self, exc: Exception | None) -> None:
        if self.guard is not None:
            self.guard.head_ends(self)
            self.guard.release(self._address)
            self._address = None
        super().connection_lost(exc)

    def head_timed_out(self) -> None:
        """The guard's call: the head was not whole in time (408, closed). A pipelined head that
        began while the request before it is still being answered: closed after that answer."""
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
            return
        timeout = self.guard.limits.head_timeout_s if self.guard else 0
        self._answer_and_close(408, "request_timeout", f"the request head did not arrive within {timeout:g} s")

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self.guard is not None and (self.cycle is None or self.cycle.response_complete):
            self.guard.head_begins(self, self.loop)  # a byte on an idle connection: a head has begun
        self._reported = 0
        self._before_head = -1
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if len(getattr(self, "url", b"")) > self.max_url_bytes:
                # A whole head whose URL httptools cannot even parse (over 64 KiB): too long, not invalid
                self._url_too_long()
                return
            self.logger.warning("Invalid HTTP request received.")
            self._answer_and_close(400, "invalid_request", "invalid HTTP request")
            return
        if self._head_fed is None:
            return
        # A head still incomplete: every byte fed since it began is head. What the parser reported
        # before it began in this feed (the previous request's end) is not; the request line's fixed
        # bytes and chunk framing are never reported, so the count errs only towards a larger head.
        if self._before_head >= 0:
            self._head_fed = len(data) - self._before_head
        else:
            self._head_fed += len(data)
        if len(self.url) > self.max_url_bytes:  # the request line is not even over (edge: a whole one)
            self._url_too_long()
        elif self._head_fed > self.max_head_bytes:
            self.logger.warning("Request head over %d bytes refused.", self.max_head_bytes)
            self._answer_and_close(
                400, "headers_too_large", f"the request headers are larger than {self.max_head_bytes} bytes"
            )

    def _url_too_long(self) -> None:
        self.logger.warning("Request URL over %d bytes refused.", self.max_url_bytes)
        self._answer_and_close(414, "uri_too_long", f"the URL is longer than {self.max_url_bytes} bytes")

    def _answer_and_close(self, status: int, code: str, message: str) -> None:
        if self.cycle is None or self.cycle.response_complete:  # never inside another response
            self.transport.write(_error_answer(status, code, message))
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.guard is not None:
            self.guard.head_begins(self, self.loop)  # a pipelined head begins while the last is served
        self._head_fed = 0
        self._before_head = self._reported

    def on_url(self, url: bytes) -> None:
        self._reported += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._reported += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_fed = None
        if self.guard is not None:
            self.guard.head_ends(self)
        self._requests += 1
        super().on_headers_complete()
        if self._requests >= self.max_requests and self.cycle is not None:
            self.cycle.keep_alive = False  # its answer says Connection: close, then the connection closes

    def on_body(self, body: bytes) -> None:
        self._reported += len(body)
        super().on_body(body)
