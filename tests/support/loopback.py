"""An in-memory wire for asyncio protocols: a client protocol and a server protocol joined by two
transports on the running loop, no socket and no TLS. What one side writes reaches the other side's
``data_received`` in a later loop step (``call_soon``, in order, as a socket would deliver it);
closing either side ends both, after the bytes already written.

For unit tests of wire protocols (tests/unit/test_http2_framing.py): ``Wire.install(loop, accept)``
makes ``loop.create_connection`` connect to a new ``accept()`` protocol, whatever host and port it
was given (``ssl_object`` is then None: a client that checks ALPN sees a server spoken to by prior
knowledge).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["MemoryTransport", "Wire"]


class MemoryTransport(asyncio.Transport):
    """One end of the wire."""

    def __init__(self, wire: Wire, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._wire, self._protocol = wire, protocol
        self.peer: MemoryTransport | None = None
        self._closing = self._lost = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        assert self.peer is not None
        self._wire.in_flight += 1
        self._wire.loop.call_soon(self.peer._receive, bytes(data))

    def _receive(self, data: bytes) -> None:
        self._wire.in_flight -= 1
        self._wire.delivered += len(data)
        if not self._lost:
            self._protocol.data_received(data)  # type: ignore[attr-defined]

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._wire.loop.call_soon(self._lose)
        if self.peer is not None and not self.peer._closing:  # the other end reads end-of-stream
            self.peer._closing = True
            self._wire.loop.call_soon(self.peer._lose)

    def _lose(self) -> None:
        if not self._lost:
            self._lost = True
            self._protocol.connection_lost(None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_write_buffer_size(self) -> int:
        return 0


class Wire:
    """Every connection the loop opens while installed; ``idle`` once every written byte arrived."""

    def __init__(self, loop: asyncio.AbstractEventLoop, accept: Callable[[], asyncio.Protocol]) -> None:
        self.loop, self.accept = loop, accept
        self.in_flight = 0  # writes not yet delivered
        self.delivered = 0  # bytes delivered, both ways
        self.connections = 0

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop, accept: Callable[[], asyncio.Protocol]) -> Wire:
        wire = cls(loop, accept)
        loop.create_connection = wire.connect  # type: ignore[method-assign]
        return wire

    @property
    def idle(self) -> bool:
        return self.in_flight == 0

    async def connect(
        self,
        protocol_factory: Callable[[], asyncio.Protocol],
        host: str | None = None,
        port: int | None = None,
        **_: Any,
    ) -> tuple[asyncio.Transport, asyncio.Protocol]:
        client, server = protocol_factory(), self.accept()
        client_end, server_end = MemoryTransport(self, client), MemoryTransport(self, server)
        client_end.peer, server_end.peer = server_end, client_end
        self.connections += 1
        server.connection_made(server_end)
        client.connection_made(client_end)
        return client_end, client
