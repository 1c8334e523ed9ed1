"""A TCP forwarder on a loopback port that can be switched off: while off, the port refuses
connections (ECONNREFUSED, the listening socket is closed) and every forwarded connection is cut.
Put in front of the emulator, it makes a provider outage at the transport level while the
emulator itself keeps its state (its delivery counts answer the census afterwards).

``freeze()`` is the other kind of outage: connections stay open and new ones are accepted, but no
byte is forwarded either way until ``thaw()`` (a peer frozen by SIGSTOP, a GC pause, a partition
that leaves TCP connections open). Only a client-side timeout can end a request then.

    with TcpSwitch("127.0.0.1", emulator_port) as switch:
        url = f"https://localhost:{switch.port}"
        switch.off(); ...; switch.on()
"""

from __future__ import annotations

import asyncio
import socket
import threading
from types import TracebackType

from notee.emulator.control import free_port


class TcpSwitch:
    def __init__(self, target_host: str, target_port: int, port: int | None = None) -> None:
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tcp-switch", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self.connections = 0  # accepted while on
        self.held = 0  # reads held back by a freeze (a request that waits for the peer)
        self._flowing = asyncio.Event()  # cleared while frozen
        self._flowing.set()

    def __enter__(self) -> TcpSwitch:
        self._thread.start()
        self.on()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.off()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)  # type: ignore[arg-type]

    def on(self) -> None:
        """Listen (again) on the same port."""
        self._call(self._listen())

    def off(self) -> None:
        """Close the port (new connections are refused) and cut every open connection."""
        self._call(self._close())

    def freeze(self) -> None:
        """Stop forwarding (bytes read are held back), keeping every connection open."""
        self._call(self._flow(False))

    def thaw(self) -> None:
        """Forward again, held-back bytes first."""
        self._call(self._flow(True))

    async def _flow(self, on: bool) -> None:
        if on:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._serve, "127.0.0.1", self.port, reuse_address=True, family=socket.AF_INET
            )

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._links.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if not self._flowing.is_set():
                        self.held += 1
                    await self._flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._links.difference_update((writer, up_writer))
