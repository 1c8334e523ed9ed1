"""The emulator's own HTTP/2 server (its own framing, ``notee.emulator.h2server``, on asyncio), for what APNs does at the connection level
and granian cannot: granian advertises one fixed SETTINGS_MAX_CONCURRENT_STREAMS for every
connection and sends GOAWAY only when it shuts down.

What this server does, per connection (``PeerRules``, changed at run time through ``/_emu/realistic``):
- advertises ``first_streams`` (APNs: 1) in its first SETTINGS and, once a request on the
  connection has passed the provider-token check, ``max_streams`` (APNs: 1000) in a new SETTINGS;
- lowering ``max_streams`` sends a new SETTINGS on every open connection;
- a client that opens more streams than the limit it has acknowledged (or, before its first ACK,
  than the first SETTINGS) gets GOAWAY PROTOCOL_ERROR and the connection is closed, as h2 does;
- ``goaway_after`` requests on one connection, or ``goaway()`` on demand, send GOAWAY with
  ``last_stream_id`` = the last stream it will answer: streams at or below it are answered, streams
  above it are ignored (the client must resend them on a new connection), then the connection closes;
- ``reset()`` on demand drops the connection with a TCP RST (SO_LINGER 0), mid-stream: the streams
  not answered yet are never answered (nor counted delivered), as when a front end or NAT drops it.

Requests are answered by the same functions as granian's ASGI app (``notee.emulator.app.handle``),
on the same ``State``, because this server runs in the ASGI worker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
from dataclasses import dataclass, field
from typing import Any

from notee.emulator.h2blocks import HeadCache, Headers, HeadShape, Shaped, response_block
from notee.emulator.h2server import ServerConnection
from notee.providers.http2_wire import GOAWAY, GOAWAY_PAYLOAD, NO_ERROR, ProtocolError, frame

log = logging.getLogger(__name__)


@dataclass
class PeerRules:
    first_streams: int = 1  # advertised until a request with a valid provider token
    max_streams: int = 1000  # advertised after it
    goaway_after: int = 0  # requests per connection before GOAWAY; 0 = never
    answer_delay_s: float = 0.0  # hold each answer this long (keeps streams open, like a slow server)


@dataclass
class PeerStats:
    connections: int = 0
    goaways: int = 0
    resets: int = 0
    protocol_errors: int = 0
    ignored_after_goaway: int = 0
    max_open: int = 0  # most streams a client had open at once on one connection
    relayed: int = 0  # the public port's front: HTTP/1.1 connections relayed to granian
    live: set[PeerConnection] = field(default_factory=set)


def _valid_for_limit(status: int, body: bytes) -> bool:
    """A response that shows the request carried a valid provider token (APNs lifts the one-stream
    limit only then)."""
    return not (status == 403 and (b"ProviderToken" in body or b"Certificate" in body))


@dataclass(frozen=True, slots=True)
class ScopeShape:
    """A request scope with holes where a ``HeadShape``'s values go: ``:path`` (the path and query)
    and plain headers (the header list and, for a name's last occurrence, ``header_map``)."""

    base: dict[str, Any]
    path_at: int | None  # which value is :path
    patches: tuple[tuple[int, bytes, int, bool], ...]  # (index in the header list, name, value, in header_map)

    @staticmethod
    def of(shape: HeadShape, scope: dict[str, Any]) -> ScopeShape | None:
        """The holes of ``scope`` (built from ``shape.headers``); None when a cut value is one the
        scope reads otherwise (:method, :authority, ...)."""
        rest: Headers = scope["headers"]
        path_at, patches = None, []
        plain = [at for at, header in enumerate(shape.headers) if header[0][:1] != b":"]
        for k, at in enumerate(shape.slots):
            name = shape.headers[at][0]
            if name == b":path":
                path_at = k
            elif name[:1] == b":":
                return None
            else:
                where = plain.index(at)  # the header list keeps the plain headers in order
                last = all(other[0] != name for other in rest[where + 1 :])
                patches.append((where, name, k, last))
        return ScopeShape(scope, path_at, tuple(patches))

    def fill(self, values: tuple[bytes, ...]) -> dict[str, Any]:
        scope = self.base.copy()
        if self.path_at is not None:
            path, _, query = values[self.path_at].decode().partition("?")
            scope["path"], scope["query_string"] = path, query.encode()
        if self.patches:
            rest, names = scope["headers"].copy(), scope["header_map"].copy()
            for where, name, k, last in self.patches:
                rest[where] = (name, values[k])
                if last:
                    names[name] = values[k]
            scope["headers"], scope["header_map"] = rest, names
        return scope


class PeerConnection(ServerConnection):
    """One client connection, on the emulator's own framing (``notee.emulator.h2server``): as strict
    as h2 was here (stream limits, flow control, frame sizes, HPACK), at a fraction of its cost."""

    def __init__(self, server: PeerServer) -> None:
        super().__init__(server.rules.first_streams)
        self.server = server
        self.answered = 0
        self.valid_seen = False
        self.goaway_last: int | None = None  # set once GOAWAY is sent
        self.highest_answered = 0
        self.answering = 0
        self.client: Any = None
        self.scopes: dict[int, tuple[Headers, dict[str, Any]]] = {}  # id of a kept header list -> its scope
        self.scope_shapes: dict[int, tuple[HeadShape, ScopeShape | None]] = {}  # id of a HeadShape -> its scope's

    # -- asyncio ------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = transport.get_extra_info("peername")  # identifies the connection to the handler
        self.server.stats.connections += 1
        self.server.stats.live.add(self)
        self.start(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.stats.live.discard(self)

    def pause_writing(self) -> None:
        # a client that does not read its answers is not read either, instead of being answered
        # into an ever longer buffer
        if not self.closing():
            self.transport.pause_reading()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        if not self.closing():
            self.transport.resume_reading()  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        try:
            self._read(data)
        except ProtocolError as exc:  # e.g. a stream too many
            self.server.stats.protocol_errors += 1
            log.info("emulator h2: closing a connection on a protocol error: %s", exc)
            self.out.append(frame(GOAWAY, 0, 0, GOAWAY_PAYLOAD.pack(self.highest_in, exc.code)))
            try:
                self._flush()
            finally:
                self._close()
            return
        if self.closing():
            return
        if len(self.streams) > self.server.stats.max_open:
            self.server.stats.max_open = len(self.streams)
        ready, self.ready = self.ready, []
        if not self.delays():
            for stream_id in ready:
                self._answer(stream_id)
        else:
            for stream_id in ready:
                if delay := self.delay(stream_id):
                    asyncio.get_running_loop().call_later(delay, self._answer_later, stream_id)
                else:
                    self._answer(stream_id)
        self._flush()
        if self.goaway_last is not None:
            self._maybe_finish_goaway()

    def delays(self) -> bool:
        """Whether any answer may be held now (read once per read, not per stream)."""
        return bool(self.server.rules.answer_delay_s)

    def delay(self, stream_id: int) -> float:
        """Seconds to hold this stream's answer."""
        return self.server.rules.answer_delay_s

    # -- requests -----------------------------------------------------------------------------------
    def _answer_later(self, stream_id: int) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self._answer(stream_id)
        self._flush()
        self._maybe_finish_goaway()

    def _answer(self, stream_id: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if self.goaway_last is not None and stream_id > self.goaway_last:
            del self.streams[stream_id]
            self.server.stats.ignored_after_goaway += 1  # the client must resend it elsewhere
            return
        self.answering = stream_id
        server = self.server
        shaped = stream.shaped
        scope = self.scope(stream.headers) if shaped is None else self.shaped_scope(shaped)
        try:
            status, out_headers, out = server.handle(scope, stream.body)
        except Exception:  # a handler bug must not take the connection down: 500, as granian does
            log.exception("emulator h2: handler failed for %s", scope["path"])
            status, out_headers, out = 500, [], b""
        self._respond(stream_id, stream, response_block(status, out_headers), out)
        self.answered += 1
        if stream_id > self.highest_answered:
            self.highest_answered = stream_id
        rules = server.rules
        if (
            server.gated
            and not self.valid_seen
            and _valid_for_limit(status, out)
            and scope["path"].startswith("/3/device/")
        ):
            self.valid_seen = True
            self.set_limit(rules.max_streams)
        if rules.goaway_after and self.answered >= rules.goaway_after and self.goaway_last is None:
            self.goaway(stream_id)

    def scope(self, headers: Headers) -> dict[str, Any]:
        """The request as the handlers read it (the part of an ASGI scope they use, and the headers
        as a dict: ``header_map``); with ``server.authority_as_host``, ``:authority`` as a ``host``
        header, as granian's ASGI has it. A header list the connection's ``HeadCache`` keeps (the
        same block again) gets the same scope again: the handlers only read it."""
        kept = self.scopes.get(id(headers))
        if kept is not None and kept[0] is headers:
            return kept[1]
        method, target, authority, rest = b"GET", b"/", None, []
        for header in headers:  # one pass: this runs for every request
            name = header[0]
            if name[:1] != b":":
                rest.append(header)
            elif name == b":path":
                target = header[1]
            elif name == b":method":
                method = header[1]
            elif name == b":authority":
                authority = header[1]
        if authority is not None and self.server.authority_as_host:
            rest.append((b"host", authority))  # after a client's own host, equal to it (RFC 9113 §8.3.1)
        path, _, query = target.decode().partition("?")
        scope = {
            "type": "http",
            "method": method.decode(),
            "path": path,
            "query_string": query.encode(),
            "headers": rest,
            "header_map": dict(rest),
            "client": self.client,
        }
        self.complete(scope)
        if self.heads.kept(headers):
            if len(self.scopes) >= self.heads.KEPT:
                self.scopes.clear()
            self.scopes[id(headers)] = (headers, scope)  # the list is held, so its id stays its own
        return scope

    def shaped_scope(self, shaped: Shaped) -> dict[str, Any]:
        """The scope of a block a kept ``HeadShape`` matched: the shape's first scope with this
        block's values put in (``ScopeShape``), not built again header by header."""
        shape, values = shaped
        kept = self.scope_shapes.get(id(shape))
        if kept is None or kept[0] is not shape:
            built = ScopeShape.of(shape, self.scope(shape.headers))
            if len(self.scope_shapes) >= HeadCache.SHAPES * 2:
                self.scope_shapes.clear()
            kept = self.scope_shapes[id(shape)] = (shape, built)  # the shape is held: its id stays its own
        if kept[1] is None:  # a shape whose values the scope cannot take in place (a cut :method, ...)
            return self.scope(shape.fill(values))
        return kept[1].fill(values)

    def complete(self, scope: dict[str, Any]) -> None:
        """What a subclass adds to a request's scope when it is built."""

    def set_limit(self, limit: int) -> None:
        if not self.closing():
            self.send_limit(limit)

    def goaway(self, last_stream_id: int | None = None) -> None:
        """GOAWAY(NO_ERROR): answer streams up to ``last_stream_id`` (default: every stream already
        started), ignore the ones above, close once the answered ones are out."""
        if self.goaway_last is not None or self.transport is None or self.transport.is_closing():
            return
        if last_stream_id is None:  # every stream started so far, including one being answered now
            last_stream_id = max([self.highest_answered, self.answering, *self.streams])
        self.goaway_last = last_stream_id
        self.server.stats.goaways += 1
        # the streams at or below last_stream_id can still be answered on this connection
        self.out.append(frame(GOAWAY, 0, 0, GOAWAY_PAYLOAD.pack(last_stream_id, NO_ERROR)))
        self._flush()
        asyncio.get_running_loop().call_soon(self._maybe_finish_goaway)  # after the answer in progress

    def reset(self) -> None:
        """Drop the connection now with a TCP RST: no GOAWAY, no answer to the open streams."""
        if self.transport is None or self.transport.is_closing():
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:  # linger 0: close() sends RST instead of FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.server.stats.resets += 1
        self.server.stats.live.discard(self)
        self.streams.clear()  # their delayed answers (answer_delay_s) find no request
        self.transport.abort()

    def peer_goaway(self) -> None:
        self._close()

    def _maybe_finish_goaway(self) -> None:
        if self.goaway_last is None or self.transport is None or self.transport.is_closing():
            return
        if not any(sid <= self.goaway_last for sid in self.streams):
            self.server.stats.ignored_after_goaway += len(self.streams)  # all above last_stream_id
            self.streams.clear()
            self._close()

    def _close(self) -> None:
        self.server.stats.live.discard(self)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class PeerServer:
    """One listening socket; ``handle(scope, body) -> (status, headers, body)`` answers requests."""

    gated = True  # APNs: ``first_streams`` until a request with a valid provider token
    authority_as_host = False  # the APNs handler's recorded headers stay what the client sent

    def __init__(self, handle: Any, rules: PeerRules | None = None) -> None:
        self.handle = handle
        self.rules = rules or PeerRules()
        self.stats = PeerStats()
        self.port = 0
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.connection, host, port, ssl=ssl_context)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def connection(self) -> asyncio.Protocol:
        return PeerConnection(self)

    def lower_limit(self, limit: int) -> None:
        """New ``max_streams`` for every connection from now on, sent at once to the open ones that
        are past their first valid request."""
        self.rules.max_streams = limit
        for peer in list(self.stats.live):
            if peer.valid_seen:
                peer.set_limit(limit)

    def goaway_all(self) -> int:
        peers = list(self.stats.live)
        for peer in peers:
            peer.goaway()
        return len(peers)

    def reset_all(self) -> int:
        """A TCP reset on every open connection now; returns how many."""
        peers = list(self.stats.live)
        for peer in peers:
            peer.reset()
        return len(peers)

    async def close(self) -> None:
        for peer in list(self.stats.live):
            peer._close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["h2"])  # aioapns offers no ALPN and still gets HTTP/2
    return ctx


def front_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """The public port's: offers both; the first bytes tell which is spoken (notee.emulator.front)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx
