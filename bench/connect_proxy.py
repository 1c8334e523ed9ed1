"""An HTTP CONNECT proxy that sends the providers' host names to the emulator, for a program that
cannot be pointed at another FCM or APNs address (bench/gorush.py: gorush talks to
``fcm.googleapis.com``, ``oauth2.googleapis.com`` and ``api.sandbox.push.apple.com`` and nothing else).

It only relays bytes: the client's TLS runs end to end with the emulator, whose certificate holds
those names (``notee.emulator.control.PROVIDER_HOSTS``) and whose CA the client trusts (``SSL_CERT_FILE``). It runs
on a thread of the bench process, so its CPU is not the measured program's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Mapping

Address = tuple[str, int]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class ConnectProxy:
    """``routes``: (host, port) the client asks for -> where it really goes; any other target is
    relayed as asked (the emulator's own loopback address, say)."""

    def __init__(self, routes: Mapping[Address, Address]) -> None:
        self.routes = dict(routes)
        self.port = 0
        self.tunnels = 0  # CONNECTs served: a check that the client really came through here
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="connect-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        target = rest.split(" ", 1)[0]
        host, _, port = target.rpartition(":")
        if method != "CONNECT" or not port.isdigit():
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        to = self.routes.get((host, int(port)), (host, int(port)))
        try:
            up_reader, up_writer = await asyncio.open_connection(*to)
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        self.tunnels += 1
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    @contextlib.contextmanager
    def running(self) -> Iterator[ConnectProxy]:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the CONNECT proxy did not start")
        try:
            yield self
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
