"""The emulator's public port (FCM HTTP v1, the browser push services, OAuth, ``/_emu`` and, outside
realistic mode, APNs): TLS, then HTTP/2 answered on the emulator's own framing
(``notee.emulator.peer``, ``notee.emulator.h2server``) in this worker's loop, and HTTP/1.1 relayed
byte for byte to granian on a Unix socket of its own (``notee.emulator.server``).

Why: granian's ASGI path cost ~65-80 µs of CPU per FCM request over HTTP/2 (its Rust HTTP/2 and
TLS, then a scope, two coroutines and two messages per request in Python), the emulator's own
framing ~30 (docs/BENCHMARKS.md, issue 35): at the fan-out bench's rate that is the difference
between the emulator taking a third of a core or more. HTTP/1.1 (requests-based SDKs, pywebpush,
curl) stays on granian: its parser and keep-alive are not worth rewriting for the few requests
that use it.

A connection is HTTP/2 when its first bytes are the HTTP/2 preface, whatever ALPN said (aioapns
offers none; gorush's OAuth client negotiates ``h2`` and speaks HTTP/1.1); anything else is
HTTP/1.1. HTTP/2 connections allow
``streams`` concurrent streams from the start (FCM's front ends: 100 in realistic mode, granian's
200 otherwise), with no provider-token gate; an answer waits ``State.latency_s`` like granian's app
(``/_emu`` paths excepted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from notee.emulator.peer import PeerConnection, PeerRules, PeerServer
from notee.providers.http2_wire import PREFACE

log = logging.getLogger(__name__)


def set_reading(transport: asyncio.Transport | None, on: bool) -> None:
    """Resume or pause reading one side of a relayed connection (backpressure from the other side)."""
    if transport is None or transport.is_closing():
        return
    if on:
        transport.resume_reading()
    else:
        transport.pause_reading()


class _Relay(asyncio.Protocol):
    """The granian side of an HTTP/1.1 connection: what granian writes goes back to the client.
    Backpressure both ways: while granian's side cannot take more, the client is not read; while
    the client's cannot, granian is not read (``FrontConnection.pause_writing``)."""

    def __init__(self, front: FrontConnection) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.front.client_write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.upstream_lost()

    def pause_writing(self) -> None:
        self.front.reading(False)

    def resume_writing(self) -> None:
        self.front.reading(True)

    def reading(self, on: bool) -> None:
        """Read granian's side again, or not until told."""
        set_reading(self.transport, on)


class FrontConnection(PeerConnection):
    """One client connection of the public port: HTTP/2 here, or HTTP/1.1 relayed to granian."""

    server: FrontServer

    def __init__(self, server: FrontServer) -> None:
        super().__init__(server)
        self.mode = ""  # "h2" | "http/1.1" once known
        self.relay: _Relay | None = None
        self.held: list[bytes] = []  # client bytes waiting for the relay's connection
        self.client_full = False  # the client's side cannot take more now (pause_writing)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # HTTP/2 or not is told by the first bytes, not by ALPN, as granian tells it: some clients
        # negotiate h2 and speak HTTP/1.1 (gorush's OAuth client through its proxy), aioapns offers
        # no ALPN and speaks HTTP/2; a client sends its preface without waiting for the server's
        self.transport = transport  # type: ignore[assignment]

    def _become_h2(self) -> None:
        self.mode = "h2"
        assert self.transport is not None
        super().connection_made(self.transport)

    def _become_relay(self) -> None:
        self.mode = "http/1.1"
        self.server.stats.relayed += 1
        self.reading(False)  # what the client sends waits in its socket until granian's side is up
        loop = asyncio.get_running_loop()
        task = loop.create_task(loop.create_unix_connection(lambda: _Relay(self), self.server.upstream))
        task.add_done_callback(self._relay_ready)

    def _relay_ready(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is not None:
            log.warning(
                "emulator front: granian's socket refused a relay: %r", None if task.cancelled() else task.exception()
            )
            self._close()
            return
        self.relay = task.result()[1]
        if self.closing():
            self.upstream_close()
            return
        for data in self.held:
            self._to_upstream(data)
        self.held.clear()
        if self.client_full:
            self.relay.reading(False)
        self.reading(True)

    def data_received(self, data: bytes) -> None:
        if not self.mode:  # the first bytes tell
            if len(data) < len(PREFACE) and PREFACE.startswith(data):
                self.held.append(data)  # too few to tell yet
                return
            data = b"".join((*self.held, data))
            self.held.clear()
            if data.startswith(PREFACE):
                self._become_h2()
            else:
                self._become_relay()
        if self.mode == "h2":
            super().data_received(data)
        elif self.relay is None:
            self.held.append(data)
        else:
            self._to_upstream(data)

    def _to_upstream(self, data: bytes) -> None:
        relay = self.relay
        if relay is not None and relay.transport is not None and not relay.transport.is_closing():
            relay.transport.write(data)

    def client_write(self, data: bytes) -> None:
        if not self.closing():
            self.transport.write(data)  # type: ignore[union-attr]

    def reading(self, on: bool) -> None:
        """Read the client again, or not until told."""
        set_reading(self.transport, on)

    def pause_writing(self) -> None:
        self.client_full = True
        if self.mode == "h2":
            super().pause_writing()
        elif self.relay is not None:
            self.relay.reading(False)

    def resume_writing(self) -> None:
        self.client_full = False
        if self.mode == "h2":
            super().resume_writing()
        elif self.relay is not None:
            self.relay.reading(True)

    def upstream_lost(self) -> None:
        self._close()

    def upstream_close(self) -> None:
        relay = self.relay
        if relay is not None and relay.transport is not None and not relay.transport.is_closing():
            relay.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.upstream_close()

    def complete(self, scope: dict[str, Any]) -> None:
        scope["server"] = self.server.address  # the port listened on (the web push VAPID audience)

    def delays(self) -> bool:
        return bool(self.server.latency())

    def delay(self, stream_id: int) -> float:
        latency = self.server.latency()
        if not latency:
            return 0.0
        stream = self.streams.get(stream_id)
        path = next((v for k, v in stream.headers if k == b":path"), b"") if stream is not None else b""
        return 0.0 if path.startswith(b"/_emu/") else latency


class FrontServer(PeerServer):
    """The public port's server: ``handle`` answers HTTP/2 requests, granian (at ``upstream``)
    HTTP/1.1 ones; ``latency()`` is the answer delay the control API set."""

    gated = False  # FCM's front ends advertise one limit for the whole connection
    authority_as_host = True  # as granian's ASGI scope had it (the web push persona reads it)

    def __init__(self, handle: Any, streams: int, upstream: str, latency: Callable[[], float]) -> None:
        super().__init__(handle, PeerRules(first_streams=streams, max_streams=streams))
        self.upstream = upstream
        self.latency = latency
        self.host = ""

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    async def start(self, host: str, port: int, ssl_context: Any) -> int:
        self.host = host
        return await super().start(host, port, ssl_context)

    def connection(self) -> asyncio.Protocol:
        return FrontConnection(self)
