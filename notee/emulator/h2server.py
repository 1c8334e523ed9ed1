"""The emulator's own HTTP/2 server framing (``notee.emulator.peer``, ``.front``); the layout, codes
and HPACK decoder are Notee's client's (``notee.providers.http2_wire``, RFC 9113 / RFC 7541); the
header blocks are ``notee.emulator.h2blocks``'s. A read's requests (HEADERS, then DATA) are taken in
one loop (``_read``); every other frame, and a request frame with padding, priority or a CONTINUATION,
goes through ``_frame``."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from notee.emulator.h2blocks import HeadCache, Headers, Shaped, settings_payload, window_update
from notee.providers.http2_wire import (
    ACK,
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
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    RST_STREAM,
    SETTING,
    SETTINGS,
    U32,
    WINDOW_UPDATE,
    ProtocolError,
    frame,
)

# the emulator's SETTINGS besides its stream limit: h2's defaults, which the port advertised before
LOCAL_WINDOW = 65_535  # SETTINGS_INITIAL_WINDOW_SIZE and the connection window it grants
WINDOW_REFILL = LOCAL_WINDOW // 2  # a WINDOW_UPDATE once this much of a window was used
STREAM_CLOSED = 0x5
_PLAIN_HEADERS = PADDED | PRIORITY_FLAG  # HEADERS flags the read loop leaves to _frame
_unpack_head = FRAME_HEAD.unpack_from


@dataclass(slots=True)
class Stream:
    """A request stream: headers, body so far, receive and send windows, whether the client ended it."""

    headers: Headers
    send_window: int
    shaped: Shaped | None = None  # the block's shape and values, when a kept shape matched it
    parts: list[bytes] = field(default_factory=list)  # the body's DATA payloads
    recv_left: int = LOCAL_WINDOW
    unacked: int = 0  # received bytes not yet given back with a WINDOW_UPDATE
    ended: bool = False
    pending: bytes | None = None  # an answer's DATA waiting for window

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)  # one part (the usual case): that part itself, not a copy


class ServerConnection(asyncio.Protocol):
    """HTTP/2 server framing for one connection: preface, SETTINGS (a stream limit in force once
    acknowledged), HEADERS + CONTINUATION (jh2's native HPACK decoder), DATA within both receive
    windows (refilled by WINDOW_UPDATE), answers within the client's windows, PING, RST_STREAM,
    GOAWAY. A protocol breach raises ``ProtocolError`` (the subclass sends GOAWAY); the streams a
    read ended are in ``ready``, answered by the subclass through ``_respond``."""

    def __init__(self, first_limit: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.heads = HeadCache()
        self.buf = bytearray()
        self.preface_seen = False
        self.out: list[bytes] = []
        self.streams: dict[int, Stream] = {}  # streams not fully answered yet
        self.highest_in = 0  # the highest stream id the client opened
        # the stream limit in force, and the limits of SETTINGS sent but not acknowledged (None: no change)
        self.limit = first_limit
        self.unacked_settings: deque[int | None] = deque()
        self.continuing: tuple[int, int, list[bytes]] | None = None  # (stream, HEADERS flags, block parts)
        self.recv_left = LOCAL_WINDOW  # the connection's receive window
        self.unacked = 0
        self.send_window = DEFAULT_WINDOW  # the connection's send window, and each new stream's
        self.stream_window = DEFAULT_WINDOW
        self.max_frame = DEFAULT_FRAME_SIZE
        self.ready: list[int] = []  # streams ended in the current read, to answer after it
        self.refill: set[int] = set()  # streams owed a WINDOW_UPDATE once the read is done
        self.blocked: dict[int, Stream] = {}  # answers waiting for window

    def start(self, transport: asyncio.BaseTransport) -> None:
        """The server's first SETTINGS: the first stream limit, the receive window."""
        self.transport = transport  # type: ignore[assignment]
        self.unacked_settings.append(None)
        values = {MAX_CONCURRENT_STREAMS: self.limit, INITIAL_WINDOW_SIZE: LOCAL_WINDOW}
        self.out.append(frame(SETTINGS, 0, 0, settings_payload(values)))
        self._flush()

    def send_limit(self, limit: int) -> None:  # in force once the client acknowledges it
        self.unacked_settings.append(limit)
        self.out.append(frame(SETTINGS, 0, 0, settings_payload({MAX_CONCURRENT_STREAMS: limit})))
        self._flush()

    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def _ended(self, stream_id: int, stream: Stream) -> None:
        """Answered after the read (``ready``): one read's streams are open together, as with h2."""
        stream.ended = True
        self.ready.append(stream_id)

    def _read(self, data: bytes) -> None:
        """One read's frames. A request's HEADERS (a new stream, the whole block, no padding or
        priority) and its DATA are taken here; everything else goes through ``_frame``."""
        if self.buf:  # the frame a previous read cut, completed
            self.buf += data
            data = bytes(self.buf)
            self.buf.clear()
        pos = 0
        if not self.preface_seen:
            if len(data) < len(PREFACE):
                if not PREFACE.startswith(data):
                    raise ProtocolError(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                self.buf += data
                return
            if not data.startswith(PREFACE):
                raise ProtocolError(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
            self.preface_seen, pos = True, len(PREFACE)
        size, streams, ready = len(data), self.streams, self.ready
        while size - pos >= 9:
            head, flags, stream_id = _unpack_head(data, pos)
            length = head >> 8
            if length > DEFAULT_FRAME_SIZE:  # we never raise SETTINGS_MAX_FRAME_SIZE
                raise ProtocolError(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
            end = pos + 9 + length
            if end > size:
                break
            kind, stream_id = head & 0xFF, stream_id & 0x7FFFFFFF
            if self.continuing is not None:
                self._frame(kind, flags, stream_id, data[pos + 9 : end])
            elif kind == DATA and (stream := streams.get(stream_id)) is not None:
                self._data(stream_id, stream, flags, data[pos + 9 : end])
            elif kind == HEADERS and flags & END_HEADERS and not flags & _PLAIN_HEADERS and stream_id > self.highest_in:
                if not stream_id & 1:
                    raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
                if len(streams) + 1 > self.limit:
                    raise ProtocolError(PROTOCOL_ERROR, f"more than {self.limit} concurrent streams")
                self.highest_in = stream_id
                headers = self.heads.decode(data[pos + 9 : end])
                stream = streams[stream_id] = Stream(headers, self.stream_window, self.heads.shaped)
                if flags & END_STREAM:
                    stream.ended = True
                    ready.append(stream_id)
            else:
                self._frame(kind, flags, stream_id, data[pos + 9 : end])
                if self.closing():
                    return
            pos = end
        if pos < size:
            self.buf += data[pos:]
        self._give_back()

    def _data(self, stream_id: int, stream: Stream, flags: int, payload: bytes) -> None:
        """DATA on a stream the client opened."""
        size = len(payload)  # flow control counts the padding too
        self.recv_left -= size
        if self.recv_left < 0:
            raise ProtocolError(FLOW_CONTROL_ERROR, "the connection's receive window overrun")
        self.unacked += size
        if stream.ended:
            self.out.append(frame(RST_STREAM, 0, stream_id, U32.pack(STREAM_CLOSED)))
            return
        stream.recv_left -= size
        if stream.recv_left < 0:
            raise ProtocolError(FLOW_CONTROL_ERROR, f"stream {stream_id}'s receive window overrun")
        stream.parts.append(_unpad(flags, payload) if flags & PADDED else payload)
        if flags & END_STREAM:
            stream.ended = True
            self.ready.append(stream_id)
            return
        stream.unacked += size
        if stream.unacked >= WINDOW_REFILL:
            self.refill.add(stream_id)

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self.continuing is not None and kind != CONTINUATION:
            raise ProtocolError(PROTOCOL_ERROR, "a header block interrupted")
        if kind == HEADERS:
            self._on_headers(flags, stream_id, payload)
        elif kind == DATA:
            self._on_data(flags, stream_id, payload)
        elif kind == CONTINUATION:
            if self.continuing is None or self.continuing[0] != stream_id:
                raise ProtocolError(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
            self.continuing[2].append(payload)
            if flags & END_HEADERS:
                stream_id, flags, parts = self.continuing
                self.continuing = None
                self._on_block(stream_id, flags, b"".join(parts))
        else:
            control_frame(self, kind, flags, stream_id, payload)

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0 or not stream_id & 1:
            raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        block = _unpad(flags, payload)
        if flags & PRIORITY_FLAG:
            if len(block) < 5:
                raise ProtocolError(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            block = block[5:]
        if flags & END_HEADERS:
            self._on_block(stream_id, flags, block)
        else:
            self.continuing = (stream_id, flags, [block])

    def _on_block(self, stream_id: int, flags: int, block: bytes) -> None:
        stream = self.streams.get(stream_id)
        if stream is None and stream_id > self.highest_in:  # a new stream
            if len(self.streams) + 1 > self.limit:
                raise ProtocolError(PROTOCOL_ERROR, f"more than {self.limit} concurrent streams")
            headers = self.heads.decode(block)
            self.highest_in = stream_id
            stream = self.streams[stream_id] = Stream(headers, self.stream_window)
        else:
            self.heads.follow(block)  # trailers, or a closed stream's: the table must follow anyway
            if stream is None or stream.ended:
                self.out.append(frame(RST_STREAM, 0, stream_id, U32.pack(STREAM_CLOSED)))
                return
            if not flags & END_STREAM:
                raise ProtocolError(PROTOCOL_ERROR, "trailers that do not end the stream")
        if flags & END_STREAM:
            self._ended(stream_id, stream)

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ProtocolError(PROTOCOL_ERROR, "DATA on stream 0")
        stream = self.streams.get(stream_id)
        if stream is not None:
            self._data(stream_id, stream, flags, payload)
            return
        self.recv_left -= len(payload)  # flow control counts a refused frame too
        if self.recv_left < 0:
            raise ProtocolError(FLOW_CONTROL_ERROR, "the connection's receive window overrun")
        self.unacked += len(payload)
        if stream_id > self.highest_in:
            raise ProtocolError(PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
        self.out.append(frame(RST_STREAM, 0, stream_id, U32.pack(STREAM_CLOSED)))

    def _give_back(self) -> None:
        """WINDOW_UPDATEs for what a read used, once it is read: the client cannot have seen them
        before, so everything it sent meanwhile counts against the windows it had."""
        if self.unacked >= WINDOW_REFILL:
            self.out.append(window_update(0, self.unacked))
            self.recv_left += self.unacked
            self.unacked = 0
        for stream_id in self.refill:
            stream = self.streams.get(stream_id)
            if stream is not None and not stream.ended:
                self.out.append(window_update(stream_id, stream.unacked))
                stream.recv_left += stream.unacked
                stream.unacked = 0
        self.refill.clear()

    def _respond(self, stream_id: int, stream: Stream, block: bytes, body: bytes) -> None:
        if not body:
            self.out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream_id, block))
            del self.streams[stream_id]
            return
        size = len(body)
        if size <= self.send_window and size <= stream.send_window and size <= self.max_frame:  # the usual case
            self.out += (frame(HEADERS, END_HEADERS, stream_id, block), frame(DATA, END_STREAM, stream_id, body))
            self.send_window -= size
            del self.streams[stream_id]
            return
        self.out.append(frame(HEADERS, END_HEADERS, stream_id, block))
        stream.pending = body
        self._send_pending(stream_id, stream)

    def _send_pending(self, stream_id: int, stream: Stream) -> None:
        """As much of an answer's body as the windows allow; the stream closes with its last byte."""
        body = stream.pending
        while body:
            n = min(len(body), self.send_window, stream.send_window, self.max_frame)
            if n <= 0:
                break
            last = n == len(body)
            self.out.append(frame(DATA, END_STREAM if last else 0, stream_id, body[:n]))
            self.send_window -= n
            stream.send_window -= n
            body = body[n:]
        stream.pending = body
        if body:
            self.blocked[stream_id] = stream
        else:
            del self.streams[stream_id]
            self.blocked.pop(stream_id, None)

    def window_opened(self, stream_id: int) -> None:
        """A WINDOW_UPDATE or a larger initial window: send what was waiting for it."""
        for sid, stream in list(self.blocked.items()):
            if stream_id in (0, sid) and self.streams.get(sid) is stream:
                self._send_pending(sid, stream)
            elif sid not in self.streams:  # reset by the client meanwhile
                del self.blocked[sid]

    def _flush(self) -> None:
        out, transport = self.out, self.transport
        if out and transport is not None and not transport.is_closing():
            transport.write(b"".join(out))
        out.clear()

    def peer_goaway(self) -> None:
        if not self.closing():
            self.transport.close()  # type: ignore[union-attr]


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ProtocolError(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]


def control_frame(conn: ServerConnection, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
    """SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY, PRIORITY, PUSH_PROMISE and unknown frames."""
    if kind == SETTINGS:
        if stream_id:
            raise ProtocolError(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ProtocolError(FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            if conn.unacked_settings:  # one for nothing sent is ignored, as h2 ignored it
                limit = conn.unacked_settings.popleft()
                if limit is not None:
                    conn.limit = limit
            return
        _client_settings(conn, payload)
        conn.out.append(frame(SETTINGS, ACK, 0))
    elif kind == WINDOW_UPDATE:
        if len(payload) != 4:
            raise ProtocolError(FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size")
        increment = U32.unpack(payload)[0] & 0x7FFFFFFF
        if increment == 0:
            raise ProtocolError(PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
        if stream_id == 0:
            conn.send_window += increment
            if conn.send_window > MAX_WINDOW:
                raise ProtocolError(FLOW_CONTROL_ERROR, "the connection's send window over 2^31-1")
        elif (stream := conn.streams.get(stream_id)) is not None:
            stream.send_window += increment
        conn.window_opened(stream_id)
    elif kind == PING:
        if len(payload) != 8 or stream_id:
            raise ProtocolError(FRAME_SIZE_ERROR if len(payload) != 8 else PROTOCOL_ERROR, "a bad PING")
        if not flags & ACK:
            conn.out.append(frame(PING, ACK, 0, payload))
    elif kind == RST_STREAM:
        if stream_id == 0 or len(payload) != 4:
            raise ProtocolError(PROTOCOL_ERROR, "a bad RST_STREAM")
        conn.streams.pop(stream_id, None)
    elif kind == GOAWAY:
        conn.peer_goaway()
    elif kind == PUSH_PROMISE:
        raise ProtocolError(PROTOCOL_ERROR, "PUSH_PROMISE from a client")
    elif kind == PRIORITY and stream_id == 0:
        raise ProtocolError(PROTOCOL_ERROR, "PRIORITY on stream 0")
    # PRIORITY on a stream, and unknown frame types, are ignored (RFC 9113 §5.5)


def _client_settings(conn: ServerConnection, payload: bytes) -> None:
    if len(payload) % 6:
        raise ProtocolError(FRAME_SIZE_ERROR, "SETTINGS of the wrong size")
    for at in range(0, len(payload), 6):
        code, value = SETTING.unpack_from(payload, at)
        if code == INITIAL_WINDOW_SIZE:
            if value > MAX_WINDOW:
                raise ProtocolError(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1")
            delta, conn.stream_window = value - conn.stream_window, value
            for stream in conn.streams.values():
                stream.send_window += delta
            if delta > 0:
                conn.window_opened(0)
        elif code == MAX_FRAME_SIZE:
            if not DEFAULT_FRAME_SIZE <= value <= 16_777_215:
                raise ProtocolError(PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range")
            conn.max_frame = value
        elif code == ENABLE_PUSH and value > 1:
            raise ProtocolError(PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1")
