# over 400 lines: one Connection class, the per-frame hot path, whose methods share its state (no mixins)
"""Notee's own lean HTTP/2 client (asyncio over TLS): the transport of the FCM and APNs senders.

Why not the SDKs' transports: firebase-admin's senders cost ~1,060 µs CPU per message (requests)
and ~1,180 µs (its httpx HTTP/2 path); this client multiplexes up to ``max_streams`` requests per
connection (docs/PROVIDERS.md, "Measured CPU per message").

Why its own framing and not a general HTTP/2 library (measured side by side, docs/PROVIDERS.md
"HTTP/2 engines"): the push APIs need only a small part of HTTP/2 -- a client that sends one
HEADERS (+ CONTINUATION) and DATA per request and reads HEADERS, DATA and trailers back, plus
SETTINGS, PING, WINDOW_UPDATE, RST_STREAM and GOAWAY. ``h2``/``jh2`` pay per frame for what Notee
never uses (event objects, a state machine per stream, header validation); libcurl (pycurl) is
cheaper still but opens streams before the server's first SETTINGS. The frames are parsed here with
``struct`` over one receive buffer; request headers are HPACK-encoded by ``HeaderEncoder`` (no
Huffman, constant headers indexed once per connection); response header blocks are decoded by jh2's
native HPACK decoder (``jh2._hazmat``, pinned: tests/unit/test_http2_pins.py).

Here: one ``Connection`` and its batches. The frame layout, settings and HPACK are
``notee.providers.http2_wire``; the senders' pool of connections is ``notee.providers.http2_pool``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from notee.core import metrics
from notee.core.metric_tally import HistogramTally
from notee.providers.http2_wire import (
    ACK,
    CANCEL,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_SIZE,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_HEAD,
    FRAME_SIZE_ERROR,
    GOAWAY,
    GOAWAY_PAYLOAD,
    HEADER_TABLE_SIZE,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    LOCAL_CONNECTION_WINDOW,
    LOCAL_STREAM_WINDOW,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_BLOCK,
    MAX_STREAM_ID,
    MAX_WINDOW,
    NO_ERROR,
    PADDED,
    PING,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTING,
    SETTINGS,
    SETTINGS_ACK,
    U32,
    WINDOW_UPDATE,
    HeaderDecoder,
    HeaderEncoder,
    ProtocolError,
    client_preface,
    frame,
)

log = logging.getLogger(__name__)


class TransportError(Exception):
    """The request got no response (connect failure, reset, GOAWAY, timeout).

    ``unprocessed``: the server certainly did not act on it (never sent, above a GOAWAY's
    last_stream_id, or refused with REFUSED_STREAM), so it is safe to send again at once on another
    connection (RFC 9113 §8.7)."""

    def __init__(self, message: str, *, unprocessed: bool = False) -> None:
        super().__init__(message)
        self.unprocessed = unprocessed


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


def answered(results: list[Response | TransportError | None]) -> list[Response | TransportError]:
    """A batch's results once every item has one (each is set exactly once, by its answer, its
    error or the watchdog)."""
    out = [r for r in results if r is not None]
    if len(out) != len(results):
        raise RuntimeError(f"{len(results) - len(out)} batch item(s) left without a result")
    return out


# One request of a batch: (path, headers, body).
Item = tuple[bytes, list[tuple[bytes, bytes]], bytes]

# One batch's completion callback: (item index, its result).
_Done = Callable[[int, "Response | TransportError"], None]


class _Stream:
    __slots__ = ("body", "done", "headers", "index", "opened", "recv_window", "send_window", "status")

    def __init__(self, done: _Done, index: int, send_window: int, opened: float) -> None:
        self.done, self.index, self.opened = done, index, opened
        self.status = 0  # 0 until the (final) response HEADERS
        self.headers: dict[bytes, bytes] = {}
        self.body: bytes | bytearray = b""  # bytes while one DATA frame brought it all
        self.send_window = send_window
        self.recv_window = LOCAL_STREAM_WINDOW


class Connection(asyncio.Protocol):
    """One HTTP/2 connection that obeys its peer: no stream before the server's first SETTINGS,
    never more open streams than the server's current SETTINGS_MAX_CONCURRENT_STREAMS (or our own
    ``max_streams``, whichever is lower), request bodies only as far as the flow-control windows
    allow (connection and stream, SETTINGS_INITIAL_WINDOW_SIZE changes applied to open streams), our
    own windows reopened with WINDOW_UPDATE as response data arrives, PING answered, and on GOAWAY
    no new stream while the streams at or below last_stream_id finish.

    The frames are parsed in ``data_received`` straight from the bytes received; what a callback
    has to send (SETTINGS ACK, PING ACK, WINDOW_UPDATE, the next requests) goes out in one write
    at its end. A connection error of the peer (a frame that breaks RFC 9113) ends the connection
    with GOAWAY and fails its open streams."""

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        max_streams: int = 100,
        provider: str = "unknown",
        per_request: Sequence[bytes] = (),
    ) -> None:
        """``per_request``: header names whose values differ on every request (``HeaderEncoder``)."""
        self.host, self.port = host, port
        # notee_provider_response_seconds: counted per response, added to the histogram once per read
        self._latency = HistogramTally(metrics.provider_latency(provider))
        self._observe = self._latency.observe
        self._ssl, self._sni = ssl_context, server_hostname or host
        # RFC 9113 8.3.1 / RFC 3986 3.2: the port belongs in :authority unless it is https' 443 (a
        # push service on another port checks a VAPID audience of https://host:port against it).
        named = f"[{self._sni}]" if ":" in self._sni else self._sni
        self._authority = (named if port == 443 else f"{named}:{port}").encode()
        self._max_streams = max_streams
        self._limit = 0  # streams we may have open: min(max_streams, the peer's current limit)
        self._peer_streams = MAX_STREAM_ID  # the peer's SETTINGS_MAX_CONCURRENT_STREAMS (unlimited until said)
        self._transport: asyncio.Transport | None = None
        self._buffer = b""  # the start of a frame whose end has not arrived yet
        self._out: list[bytes] = []  # frames to send at the next flush
        self._encoder = HeaderEncoder(per_request)
        self._decoder = HeaderDecoder()
        self._next_id = 1
        self._streams: dict[int, _Stream] = {}
        self._unsent: dict[int, memoryview] = {}  # stream id -> body bytes still waiting for window
        self._send_window = DEFAULT_WINDOW  # the connection window we may still send into
        self._peer_stream_window = DEFAULT_WINDOW  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self._max_frame = DEFAULT_FRAME_SIZE  # the peer's SETTINGS_MAX_FRAME_SIZE
        self._recv_window = LOCAL_CONNECTION_WINDOW  # what the peer may still send us
        self._continuation: tuple[int, int, list[bytes]] | None = None  # (stream, HEADERS flags, fragments)
        self._settled: asyncio.Future[None] | None = None  # the server's first SETTINGS arrived
        self._closed: asyncio.Future[None] | None = None  # the transport is gone
        self._closing = ""  # why we are closing it ourselves
        self._flush_pending = False
        self._pumps: set[Callable[[], None]] = set()  # batches waiting for a free stream or window
        self.usable = False

    @property
    def stream_limit(self) -> int:
        return self._limit

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    # ------------------------------------------------------------------------------ connection life
    async def connect(self, timeout: float = 10.0) -> None:
        """Open the connection and wait for the server's first SETTINGS (its stream limit and
        windows): a stream opened before them could exceed a limit we have not read yet."""
        loop = asyncio.get_running_loop()
        self._settled, self._closed = loop.create_future(), loop.create_future()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: self, self.host, self.port, ssl=self._ssl, server_hostname=self._sni),
                timeout,
            )
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            raise TransportError(f"connect to {self.host}:{self.port} failed: {exc!r}", unprocessed=True) from exc
        assert self._transport is not None
        ssl_object = self._transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if alpn not in (None, "h2"):  # None: a server without ALPN, spoken to as HTTP/2 (prior knowledge)
            await self.close()
            raise TransportError(f"{self.host}:{self.port} negotiated {alpn}, not HTTP/2", unprocessed=True)
        try:
            await asyncio.wait_for(asyncio.shield(self._settled), timeout)
        except TimeoutError as exc:
            await self.close()
            raise TransportError(
                f"{self.host}:{self.port} sent no SETTINGS within {timeout} s", unprocessed=True
            ) from exc
        if not self.usable:
            await self.close()
            raise TransportError(f"{self.host}:{self.port} closed the connection before its SETTINGS", unprocessed=True)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports (the API process runs on uvloop) are not asyncio.Transport subclasses
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(client_preface())

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self._closing or (f"connection error: {exc!r}" if exc else "connection closed by the server")
        self._teardown(TransportError(reason))
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def _teardown(self, error: TransportError) -> None:
        """The connection is over: every open stream fails with ``error``, the batches hand back
        what they had not opened yet (unprocessed)."""
        self.usable = False
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(None)
        streams, self._streams = list(self._streams.values()), {}
        self._unsent.clear()
        for stream in streams:
            stream.done(stream.index, error)
        for pump in list(self._pumps):
            pump()

    def _fail(self, error: ProtocolError) -> None:
        """The peer broke the protocol: GOAWAY with its error code, close, fail the open streams."""
        self._out.append(frame(GOAWAY, 0, 0, GOAWAY_PAYLOAD.pack(0, error.code) + str(error).encode()[:200]))
        self._flush()
        self._closing = f"connection error: {error}"
        if self._transport is not None:
            self._transport.close()
        self._teardown(TransportError(f"connection error: {error}"))

    async def close_when_done(self) -> None:
        """Close once the server has closed (it does after its GOAWAY'd streams)."""
        if self._closed is not None:
            await asyncio.shield(self._closed)
        await self.close()

    async def close(self) -> None:
        self.usable = False
        transport = self._transport
        if transport is None or self._closed is None:
            return
        if not transport.is_closing():
            self._closing = self._closing or "connection closed"
            self._out.append(frame(GOAWAY, 0, 0, GOAWAY_PAYLOAD.pack(0, NO_ERROR)))
            self._flush()
            transport.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._closed), 5.0)
        except TimeoutError:
            transport.abort()

    # ------------------------------------------------------------------------------------- writing
    def _flush_soon(self) -> None:
        """Coalesce the frames of every request started in this loop tick into one TLS write."""
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        if self._out:
            transport = self._transport
            if transport is not None and not transport.is_closing():
                transport.write(b"".join(self._out))
            self._out.clear()

    def _open(self, method: bytes, authority: bytes, item: Item, done: _Done, index: int) -> int:
        """HEADERS (+ CONTINUATION) and as much of the body as the windows allow, for a new stream."""
        path, headers, body = item
        stream_id = self._next_id
        self._next_id = stream_id + 2
        block = self._encoder.encode_request(method, path, authority, headers)
        out, head = self._out, FRAME_HEAD.pack
        end = 0 if body else END_STREAM
        size = len(block)
        if size <= self._max_frame:
            out.append(head(size << 8 | HEADERS, END_HEADERS | end, stream_id))
            out.append(block)
        else:
            step = self._max_frame
            out.append(head(step << 8 | HEADERS, end, stream_id))
            out.append(block[:step])
            for at in range(step, size, step):
                part = block[at : at + step]
                last = END_HEADERS if at + step >= size else 0
                out.append(head(len(part) << 8 | CONTINUATION, last, stream_id))
                out.append(part)
        stream = self._streams[stream_id] = _Stream(done, index, self._peer_stream_window, time.monotonic())
        if body:
            n = len(body)
            if n <= stream.send_window and n <= self._send_window and n <= self._max_frame:
                out.append(head(n << 8 | DATA, END_STREAM, stream_id))
                out.append(body)
                stream.send_window -= n
                self._send_window -= n
            else:
                self._unsent[stream_id] = memoryview(body)
                self._send_unsent()
        return stream_id

    def _send_unsent(self) -> None:
        """Send the rest of bodies that were waiting for flow-control window."""
        out = self._out
        for stream_id, view in list(self._unsent.items()):
            stream = self._streams[stream_id]
            while view:
                n = min(len(view), stream.send_window, self._send_window, self._max_frame)
                if n <= 0:
                    break
                chunk, view = view[:n], view[n:]
                out.append(frame(DATA, 0 if view else END_STREAM, stream_id, bytes(chunk)))
                stream.send_window -= n
                self._send_window -= n
            if view:
                self._unsent[stream_id] = view
            else:
                del self._unsent[stream_id]

    def _reset(self, stream_id: int, code: int, error: TransportError) -> None:
        """End one stream from our side with RST_STREAM ``code``; its item gets ``error``."""
        stream = self._streams.pop(stream_id, None)
        self._unsent.pop(stream_id, None)
        self._out.append(frame(RST_STREAM, 0, stream_id, U32.pack(code)))
        if stream is not None:
            stream.done(stream.index, error)

    # ------------------------------------------------------------------------------------- reading
    def data_received(self, data: bytes) -> None:
        if self._buffer:
            data = self._buffer + data
        try:
            self._buffer = self._frames(data)
        except ProtocolError as exc:
            self._buffer = b""
            self._fail(exc)
            return
        finally:
            self._latency.flush()
        if self._unsent:
            self._send_unsent()
        for pump in list(self._pumps):  # streams ended, limit or window grew: open more
            pump()
        if not self.usable and not self._streams and self._settled is not None and self._settled.done():
            # after GOAWAY (or with stream ids used up) and the last answer in: nothing more to come
            self._closing = self._closing or "connection closed after GOAWAY"
            self._out.append(frame(GOAWAY, 0, 0, GOAWAY_PAYLOAD.pack(0, NO_ERROR)))
            if self._transport is not None:
                self._flush()
                self._transport.close()
        self._flush()

    def _frames(self, data: bytes) -> bytes:
        """Handle every whole frame of ``data``; returns the incomplete rest."""
        pos, end = 0, len(data)
        unpack = FRAME_HEAD.unpack_from
        while end - pos >= 9:
            head, flags, stream_id = unpack(data, pos)
            length = head >> 8
            if length > DEFAULT_FRAME_SIZE:
                raise ProtocolError(FRAME_SIZE_ERROR, f"a frame of {length} bytes (SETTINGS_MAX_FRAME_SIZE 16384)")
            stop = pos + 9 + length
            if stop > end:
                break
            kind = head & 0xFF
            stream_id &= MAX_STREAM_ID
            payload = data[pos + 9 : stop]
            pos = stop
            if self._continuation is not None and kind != CONTINUATION:
                raise ProtocolError(PROTOCOL_ERROR, "a header block interrupted before its END_HEADERS")
            if kind == HEADERS:
                self._on_headers(flags, stream_id, payload)
            elif kind == DATA:
                self._on_data(flags, stream_id, payload)
            elif kind == WINDOW_UPDATE:
                self._on_window_update(stream_id, payload)
            elif kind == SETTINGS:
                self._on_settings(flags, stream_id, payload)
            elif kind == PING:
                if stream_id or len(payload) != 8:
                    raise ProtocolError(FRAME_SIZE_ERROR if stream_id == 0 else PROTOCOL_ERROR, "malformed PING")
                if not flags & ACK:
                    self._out.append(frame(PING, ACK, 0, payload))
            elif kind == RST_STREAM:
                self._on_rst_stream(stream_id, payload)
            elif kind == GOAWAY:
                self._on_goaway(stream_id, payload)
            elif kind == CONTINUATION:
                self._on_continuation(flags, stream_id, payload)
            elif kind == PUSH_PROMISE:
                raise ProtocolError(PROTOCOL_ERROR, "PUSH_PROMISE though SETTINGS_ENABLE_PUSH is 0")
            # PRIORITY and unknown frame types are ignored (RFC 9113 §5.5, §6.3)
        return data[pos:]

    def _known(self, stream_id: int) -> _Stream | None:
        """The open stream, or None for one we ended (reset, timed out): its late frames are
        dropped. A frame on a stream we never opened is a connection error."""
        stream = self._streams.get(stream_id)
        if stream is None and (stream_id == 0 or stream_id >= self._next_id or not stream_id & 1):
            raise ProtocolError(PROTOCOL_ERROR, f"a frame on stream {stream_id}, which we never opened")
        return stream

    @staticmethod
    def _unpad(flags: int, payload: bytes, extra: int = 0) -> bytes:
        if flags & PADDED:
            if not payload or payload[0] + 1 + extra > len(payload):
                raise ProtocolError(PROTOCOL_ERROR, "padding longer than the frame")
            return payload[1 : len(payload) - payload[0]]
        return payload

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ProtocolError(PROTOCOL_ERROR, "HEADERS on stream 0")
        priority = 5 if flags & PRIORITY_FLAG else 0
        payload = self._unpad(flags, payload, priority)
        if priority:
            if len(payload) < 5:
                raise ProtocolError(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            payload = payload[5:]
        if flags & END_HEADERS:
            self._on_header_block(flags, stream_id, payload)
        else:
            self._continuation = (stream_id, flags, [payload])

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        started = self._continuation
        if started is None or started[0] != stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        started[2].append(payload)
        if sum(len(part) for part in started[2]) > MAX_HEADER_BLOCK:
            raise ProtocolError(PROTOCOL_ERROR, f"a header block over {MAX_HEADER_BLOCK} bytes")
        if flags & END_HEADERS:
            self._continuation = None
            self._on_header_block(started[1], stream_id, b"".join(started[2]))

    def _on_header_block(self, flags: int, stream_id: int, block: bytes) -> None:
        headers = self._decoder.decode(block)  # always: the decoder's table must follow the server's
        stream = self._known(stream_id)
        if stream is None:
            return
        if stream.status == 0:  # the response's HEADERS
            name, value, _ = headers[0] if headers else (b"", b"", False)
            status = int(value) if name == b":status" and value.isdigit() else 0
            if not 100 <= status <= 999:
                self._reset(stream_id, PROTOCOL_ERROR, TransportError("response without a valid :status"))
                return
            if status < 200:  # informational (100 Continue, 103 Early Hints): the real answer follows
                return
            stream.status = status
            stream.headers = {n: v for n, v, _ in headers[1:]}
        elif flags & END_STREAM:  # trailers: kept beside the headers (a header of the same name wins)
            for n, v, _ in headers:
                stream.headers.setdefault(n, v)
        else:
            self._reset(stream_id, PROTOCOL_ERROR, TransportError("a second header block without END_STREAM"))
            return
        if flags & END_STREAM:
            self._end(stream_id, stream)

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        length = len(payload)  # padding included: it counts against the windows
        self._recv_window -= length
        if self._recv_window < 0:
            raise ProtocolError(FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        if self._recv_window < LOCAL_CONNECTION_WINDOW // 2:
            self._out.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(LOCAL_CONNECTION_WINDOW - self._recv_window)))
            self._recv_window = LOCAL_CONNECTION_WINDOW
        stream = self._known(stream_id)
        if stream is None:
            return
        data = self._unpad(flags, payload)
        if stream.status == 0:
            self._reset(stream_id, PROTOCOL_ERROR, TransportError("DATA before the response HEADERS"))
            return
        stream.recv_window -= length
        if stream.recv_window < 0:
            self._reset(stream_id, FLOW_CONTROL_ERROR, TransportError("DATA beyond the stream window"))
            return
        body = stream.body
        if not body:
            stream.body = data
        elif body.__class__ is bytes:
            stream.body = bytearray(body) + data
        else:
            body += data
        if flags & END_STREAM:
            self._end(stream_id, stream)
        elif stream.recv_window < LOCAL_STREAM_WINDOW // 2:
            self._out.append(frame(WINDOW_UPDATE, 0, stream_id, U32.pack(LOCAL_STREAM_WINDOW - stream.recv_window)))
            stream.recv_window = LOCAL_STREAM_WINDOW

    def _end(self, stream_id: int, stream: _Stream) -> None:
        """The server ended the stream: its response is complete."""
        del self._streams[stream_id]
        if self._unsent and self._unsent.pop(stream_id, None) is not None:
            # answered before its whole body was sent: end our side too, so the stream is closed for
            # both peers as it is in our count (RFC 9113 §8.1)
            self._out.append(frame(RST_STREAM, 0, stream_id, U32.pack(NO_ERROR)))
        self._observe(time.monotonic() - stream.opened)
        body = stream.body
        stream.done(
            stream.index, Response(stream.status, stream.headers, body if body.__class__ is bytes else bytes(body))
        )

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes")
        increment = U32.unpack(payload)[0] & MAX_WINDOW
        if stream_id == 0:
            if increment == 0:
                raise ProtocolError(PROTOCOL_ERROR, "connection WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise ProtocolError(FLOW_CONTROL_ERROR, "connection window above 2^31-1")
            return
        stream = self._known(stream_id)
        if stream is None:
            return
        if increment == 0:
            self._reset(stream_id, PROTOCOL_ERROR, TransportError("stream WINDOW_UPDATE of 0"))
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._reset(stream_id, FLOW_CONTROL_ERROR, TransportError("stream window above 2^31-1"))

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ProtocolError(FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ProtocolError(FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes")
        for at in range(0, len(payload), 6):
            code, value = SETTING.unpack_from(payload, at)
            if code == MAX_CONCURRENT_STREAMS:
                self._peer_streams = value
            elif code == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1")
                delta, self._peer_stream_window = value - self._peer_stream_window, value
                for stream in self._streams.values():  # applies to the open streams too (RFC 9113 §6.9.2)
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise ProtocolError(FLOW_CONTROL_ERROR, "a stream window above 2^31-1")
            elif code == MAX_FRAME_SIZE:
                if not DEFAULT_FRAME_SIZE <= value <= 16_777_215:
                    raise ProtocolError(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value}")
                self._max_frame = value
            elif code == HEADER_TABLE_SIZE:
                self._encoder.set_peer_table_size(value)
            elif code == ENABLE_PUSH and value > 1:
                raise ProtocolError(PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH {value}")
        self._limit = min(self._max_streams, self._peer_streams)
        self._out.append(SETTINGS_ACK)
        if self._settled is not None and not self._settled.done():
            self.usable = True
            self._settled.set_result(None)

    def _on_rst_stream(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes")
        stream = self._known(stream_id)
        if stream is None:
            return
        code = U32.unpack(payload)[0]
        del self._streams[stream_id]
        self._unsent.pop(stream_id, None)
        stream.done(stream.index, TransportError(f"stream reset (error {code})", unprocessed=code == REFUSED_STREAM))

    def _on_goaway(self, stream_id: int, payload: bytes) -> None:
        # No new stream here. Streams above last_stream_id were not processed and are handed back
        # for another connection; the ones at or below it still get their answers.
        if stream_id or len(payload) < 8:
            raise ProtocolError(PROTOCOL_ERROR, "malformed GOAWAY")
        last, code = GOAWAY_PAYLOAD.unpack_from(payload)
        last &= MAX_STREAM_ID
        self.usable = False
        for above in [s for s in self._streams if s > last]:
            self._unsent.pop(above, None)
            stream = self._streams.pop(above)
            stream.done(stream.index, TransportError(f"GOAWAY (error {code})", unprocessed=True))
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(None)

    # ------------------------------------------------------------------------------------- batches
    async def request_batch(
        self,
        method: bytes,
        items: Sequence[Item],
        timeout: float = 30.0,
    ) -> list[Response | TransportError]:
        """Send every (path, headers, body) of ``items`` on this connection and return one response or
        TransportError per item, in order.

        The push senders' hot path: the next stream is opened from the callback that completes the
        previous one, so a batch costs one future in all instead of a task, a future and a timeout
        per message (docs/BENCHMARKS.md, send path). At most ``stream_limit`` streams are open on
        the connection, whoever opened them; the limit follows the server's SETTINGS, so waiting for
        a free stream is normal, not a failure. A body larger than the flow-control window is sent
        as WINDOW_UPDATEs arrive. Items that get no response while the batch makes no progress for
        ``timeout`` seconds fail with TransportError; items never opened because the connection
        closed or went away fail with ``TransportError(unprocessed=True)`` (``Pool`` resends them)."""
        n = len(items)
        results: list[Response | TransportError | None] = [None] * n
        if n == 0:
            return []
        loop = asyncio.get_running_loop()
        finished = loop.create_future()
        authority = self._authority
        nxt, left = 0, n
        last_progress = time.monotonic()

        def complete(i: int, result: Response | TransportError) -> None:
            nonlocal left, last_progress
            if results[i] is None:
                results[i] = result
                left -= 1
                last_progress = time.monotonic()
                if left == 0 and not finished.done():
                    finished.set_result(None)

        # No callback here names itself (a pump that removed itself from ``_pumps``, a watchdog
        # that re-armed its own timer): each such closure is a reference cycle, which kept the whole
        # batch (its items' bodies, every response) alive until a full garbage collection, some 40
        # batches at a time in a worker, and drove its RSS up (docs/BENCHMARKS.md, "Worker memory").
        def pump() -> None:
            nonlocal nxt
            streams, open_stream = self._streams, self._open
            while nxt < n:
                if self.usable and self._next_id > MAX_STREAM_ID:
                    self.usable = False  # stream ids used up: a new connection takes over
                if not self.usable:
                    complete(nxt, TransportError("connection closed before the request was sent", unprocessed=True))
                    nxt += 1
                    continue
                if len(streams) >= self._limit or self._unsent:
                    return  # data_received pumps again when a stream ends or the window grows
                open_stream(method, authority, items[nxt], complete, nxt)
                nxt += 1

        self._pumps.add(pump)
        try:
            pump()
            self._flush_soon()
            # The watchdog: wait while the batch makes progress; after ``timeout`` s without any,
            # end what is still open.
            while not finished.done():
                idle = time.monotonic() - last_progress
                if idle < timeout:
                    await asyncio.wait((finished,), timeout=timeout - idle)
                    continue
                for stream_id, stream in list(self._streams.items()):
                    if stream.done is complete:
                        self._reset(stream_id, CANCEL, TransportError(f"no response within {timeout} s"))
                for i in range(nxt, n):
                    complete(i, TransportError(f"no stream available within {timeout} s", unprocessed=True))
                self._flush_soon()
        finally:
            self._pumps.discard(pump)
        return answered(results)
