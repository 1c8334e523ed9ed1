"""The HTTP/1.1 protocol of the API's listeners: uvicorn's httptools protocol (llhttp, a C parser),
with the head-size bound Notee needs and a response written in one piece.

* **Head size.** httptools buffers a request head of any size (a header value arriving in pieces
  grows inside the parser until its line ends). ``HttpToolsProtocol`` here counts the bytes of the
  head it has been fed: a head still incomplete past ``api_max_header_bytes`` is answered 400
  ``headers_too_large`` in the error format and the connection closed, so at most one read beyond the
  limit is ever held. A head that arrived whole is measured by the edge (431, ``notee.api.edge``).
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
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _UvicornHttpTools

from notee.api.errors import error_response

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


def _error_answer(status_line: bytes, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer in the error format, for the protocol layer (outside the ASGI app)."""
    body = bytes(error_response(400, code, message).body)
    return (
        status_line
        + b"content-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: close\r\n\r\n"
        + body
    )


class HttpToolsProtocol(_UvicornHttpTools):
    """uvicorn's httptools protocol with a bounded request head and coalesced writes (module doc).
    ``with_head_limit`` makes the class a listener uses."""

    max_head_bytes = 16384

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_fed: int | None = None  # bytes fed while the current head is incomplete; None: no head
        self._reported = 0  # bytes of this feed the parser has reported (URL, headers, body)
        self._before_head = -1  # _reported when the current head began in this feed; -1: it did not

    @classmethod
    def with_head_limit(cls, max_head_bytes: int) -> type[HttpToolsProtocol]:
        return type(cls.__name__, (cls,), {"max_head_bytes": max_head_bytes})

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
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
            self.logger.warning("Invalid HTTP request received.")
            self._answer_and_close("invalid_request", "invalid HTTP request")
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
        if self._head_fed > self.max_head_bytes:
            self.logger.warning("Request head over %d bytes refused.", self.max_head_bytes)
            self._answer_and_close(
                "headers_too_large", f"the request headers are larger than {self.max_head_bytes} bytes"
            )

    def _answer_and_close(self, code: str, message: str) -> None:
        if self.cycle is None or self.cycle.response_complete:  # never inside another response
            self.transport.write(_error_answer(b"HTTP/1.1 400 Bad Request\r\n", code, message))
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
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
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._reported += len(body)
        super().on_body(body)
