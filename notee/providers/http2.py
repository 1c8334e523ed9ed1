"""A lean HTTP/2 client on ``h2`` + asyncio over TLS: the transport of the FCM and APNs senders.

Why not the SDKs' transports: firebase-admin costs ~2,400 µs CPU per message and httpx's HTTP/2
~2,000 µs; this client multiplexes up to ``max_streams`` requests per connection at a fraction of
that (docs/PROVIDERS.md has the measurements). It does only what the two push APIs need: small
POSTs, whole responses, flow control, GOAWAY, reconnect.

CPU notes: outbound header validation/normalisation is off (we build the headers ourselves) and
HPACK Huffman coding is off, so the constant ``authorization`` header is indexed once per
connection instead of being Huffman-coded in pure Python on every request.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

log = logging.getLogger(__name__)
# hpack logs every header it encodes at DEBUG, bearer tokens and JWTs included: never let it.
logging.getLogger("hpack").setLevel(logging.INFO)


class TransportError(Exception):
    """The request may not have reached the server (connect failure, reset, GOAWAY, timeout)."""


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


@dataclass(slots=True)
class _Stream:
    done: Callable[[Response | TransportError], None]  # called once, with the response or the error
    headers: list = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)


def _future_done(future: asyncio.Future) -> Callable[[Response | TransportError], None]:
    def done(result: Response | TransportError) -> None:
        if not future.done():
            if isinstance(result, TransportError):
                future.set_exception(result)
            else:
                future.set_result(result)
    return done


# One request of a batch: (path, headers, body).
Item = tuple[bytes, list[tuple[bytes, bytes]], bytes]


class Connection:
    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                 max_streams: int = 100) -> None:
        self.host, self.port = host, port
        self._ssl, self._sni = ssl_context, server_hostname or host
        self._max_streams = max_streams
        self._conn: h2.connection.H2Connection | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._streams: dict[int, _Stream] = {}
        self._window = asyncio.Event()
        self._slots = asyncio.Semaphore(max_streams)
        self._flush_pending = False
        self._pumps: set[Callable[[], None]] = set()  # batches waiting for a free stream or window
        self.usable = False

    def _flush_soon(self) -> None:
        """Coalesce the frames of every request started in this loop tick into one TLS write."""
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        if self._conn is not None and self._writer is not None and not self._writer.is_closing():
            data = self._conn.data_to_send()
            if data:
                self._writer.write(data)

    async def connect(self, timeout: float = 10.0) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self._ssl, server_hostname=self._sni), timeout)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            raise TransportError(f"connect to {self.host}:{self.port} failed: {exc!r}") from exc
        config = h2.config.H2Configuration(client_side=True, header_encoding=None, validate_outbound_headers=False,
                                           normalize_outbound_headers=False, validate_inbound_headers=False)
        conn = h2.connection.H2Connection(config=config)
        encode = conn.encoder.encode
        conn.encoder.encode = lambda headers, huffman=True: encode(headers, huffman=False)  # see module doc
        conn.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20,
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100})
        conn.initiate_connection()
        conn.increment_flow_control_window(1 << 24)
        writer.write(conn.data_to_send())
        self._conn, self._writer, self.usable = conn, writer, True
        self._reader_task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        conn = self._conn
        error: BaseException = TransportError("connection closed by the server")
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                events = conn.receive_data(data)
                for event in events:
                    self._on_event(event)
                for pump in list(self._pumps):  # streams ended or window grew: open more
                    pump()
                self._flush_soon()
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError) as exc:
            error = TransportError(f"connection error: {exc!r}")
        except asyncio.CancelledError:
            error = TransportError("connection closed")
        finally:
            self.usable = False
            streams, self._streams = list(self._streams.values()), {}
            for stream in streams:
                stream.done(error)
            for pump in list(self._pumps):  # fails what the batches had not opened yet
                pump()
            self._window.set()

    def _on_event(self, event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            stream = self._streams.get(event.stream_id)
            if stream:
                stream.headers = event.headers
        elif isinstance(event, h2.events.DataReceived):
            self._conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            stream = self._streams.get(event.stream_id)
            if stream:
                stream.body += event.data
        elif isinstance(event, h2.events.StreamEnded):
            stream = self._streams.pop(event.stream_id, None)
            if stream:
                headers = dict(stream.headers)
                stream.done(Response(int(headers.pop(b":status", 0)), headers, bytes(stream.body)))
        elif isinstance(event, h2.events.StreamReset):
            stream = self._streams.pop(event.stream_id, None)
            if stream:
                stream.done(TransportError(f"stream reset (error {event.error_code})"))
        elif isinstance(event, h2.events.WindowUpdated):
            self._window.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            # GOAWAY: streams above last_stream_id were not processed and are safe to retry.
            self.usable = False
            last = event.last_stream_id if event.last_stream_id is not None else 0
            for stream_id in [s for s in self._streams if s > last]:
                self._streams.pop(stream_id).done(TransportError(f"GOAWAY (error {event.error_code})"))

    async def request(self, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], body: bytes,
                      timeout: float = 30.0) -> Response:
        async with self._slots:
            if not self.usable:
                raise TransportError("connection not usable")
            conn = self._conn
            try:
                stream_id = conn.get_next_available_stream_id()
                conn.send_headers(stream_id, [(b":method", method), (b":scheme", b"https"), (b":path", path),
                                              (b":authority", self._sni.encode()), *headers], end_stream=not body)
            except h2.exceptions.H2Error as exc:
                self.usable = False
                raise TransportError(f"cannot open a stream: {exc!r}") from exc
            future = asyncio.get_running_loop().create_future()
            self._streams[stream_id] = _Stream(_future_done(future))
            try:
                view = memoryview(body)
                while view:
                    window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
                    if window <= 0:
                        self._flush()
                        self._window.clear()
                        await asyncio.wait_for(self._window.wait(), timeout)
                        if not self.usable:
                            raise TransportError("connection closed while sending")
                        continue
                    conn.send_data(stream_id, bytes(view[:window]), end_stream=len(view) <= window)
                    view = view[window:]
                self._flush_soon()
                async with asyncio.timeout(timeout):  # cheaper than wait_for: no task per request
                    return await future
            except asyncio.TimeoutError as exc:
                self._streams.pop(stream_id, None)
                try:
                    conn.reset_stream(stream_id)
                    self._flush()
                except h2.exceptions.H2Error:
                    pass
                raise TransportError(f"no response within {timeout} s") from exc
            except h2.exceptions.H2Error as exc:
                self._streams.pop(stream_id, None)
                raise TransportError(f"HTTP/2 error: {exc!r}") from exc

    async def request_batch(self, method: bytes, items: Sequence[Item], timeout: float = 30.0,
                            ) -> list[Response | TransportError]:
        """Send every (path, headers, body) of ``items`` on this connection and return one response or
        TransportError per item, in order.

        Why not ``request`` per item: the push senders' hot path. Here the next stream is opened from
        the callback that completes the previous one, so a batch costs one future in all instead of a
        task, a semaphore turn, a future and a timeout per message (docs/BENCHMARKS.md, send path).
        At most ``max_streams`` streams are open on the connection, whoever opened them; a body waits
        for flow-control window. Items that get no response while the batch makes no progress for
        ``timeout`` seconds fail with TransportError (retryable), as do items never opened because
        the connection closed."""
        n = len(items)
        results: list[Response | TransportError | None] = [None] * n
        if n == 0:
            return []
        loop = asyncio.get_running_loop()
        finished = loop.create_future()
        conn = self._conn
        authority = self._sni.encode()
        mine: dict[int, int] = {}  # stream id -> item index, for the timeout
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

        def on_done(i: int) -> Callable[[Response | TransportError], None]:
            return lambda result: complete(i, result)

        def pump() -> None:
            nonlocal nxt
            while nxt < n:
                if not self.usable:
                    complete(nxt, TransportError("connection closed before the request was sent"))
                    nxt += 1
                    continue
                if len(self._streams) >= self._max_streams:
                    return
                path, headers, body = items[nxt]
                try:
                    if len(body) > min(conn.outbound_flow_control_window, conn.remote_settings.initial_window_size):
                        return  # wait for WINDOW_UPDATE; the reader pumps again
                    stream_id = conn.get_next_available_stream_id()
                    conn.send_headers(stream_id, [(b":method", method), (b":scheme", b"https"), (b":path", path),
                                                  (b":authority", authority), *headers], end_stream=not body)
                    frame = conn.max_outbound_frame_size
                    for start in range(0, len(body), frame):
                        conn.send_data(stream_id, body[start:start + frame], end_stream=start + frame >= len(body))
                except h2.exceptions.H2Error as exc:
                    self.usable = False
                    complete(nxt, TransportError(f"cannot open a stream: {exc!r}"))
                    nxt += 1
                    continue
                self._streams[stream_id] = _Stream(on_done(nxt))
                mine[stream_id] = nxt
                nxt += 1
            self._pumps.discard(pump)

        def watchdog() -> None:
            if finished.done():
                return
            idle = time.monotonic() - last_progress
            if idle < timeout:
                timer[0] = loop.call_later(timeout - idle, watchdog)
                return
            for stream_id, i in list(mine.items()):
                if results[i] is None and self._streams.pop(stream_id, None) is not None:
                    try:
                        conn.reset_stream(stream_id)
                    except h2.exceptions.H2Error:
                        pass
                    complete(i, TransportError(f"no response within {timeout} s"))
            for i in range(nxt, n):
                complete(i, TransportError(f"no stream available within {timeout} s"))
            self._pumps.discard(pump)
            self._flush_soon()

        self._pumps.add(pump)
        pump()
        self._flush_soon()
        timer = [loop.call_later(timeout, watchdog)]
        try:
            await finished
        finally:
            timer[0].cancel()
            self._pumps.discard(pump)
        return results  # type: ignore[return-value]

    async def close(self) -> None:
        self.usable = False
        if self._conn is not None and self._writer is not None and not self._writer.is_closing():
            try:
                self._conn.close_connection()
                self._writer.write(self._conn.data_to_send())
            except (h2.exceptions.H2Error, OSError, RuntimeError):
                pass
        if self._reader_task is not None:
            self._reader_task.cancel()
            try:
                await self._reader_task
            except (asyncio.CancelledError, Exception):
                pass
        if self._writer is not None and not self._writer.is_closing():
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass


class Pool:
    """``size`` connections to one origin, (re)opened lazily, used round-robin."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext, *, size: int = 1, max_streams: int = 100) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme != "https":
            raise ValueError("HTTP/2 push transport needs an https:// URL")
        self.host, self.port = parts.hostname, parts.port or 443
        self._ssl = ssl_context
        self._conns: list[Connection | None] = [None] * size
        self._locks = [asyncio.Lock() for _ in range(size)]
        self._max_streams = max_streams
        self._next = 0

    async def _get(self) -> Connection:
        i = self._next = (self._next + 1) % len(self._conns)
        conn = self._conns[i]
        if conn is not None and conn.usable:
            return conn
        async with self._locks[i]:
            conn = self._conns[i]
            if conn is None or not conn.usable:
                if conn is not None:
                    await conn.close()
                conn = Connection(self.host, self.port, self._ssl, max_streams=self._max_streams)
                await conn.connect()
                self._conns[i] = conn
            return conn

    async def request(self, path: str, headers: list[tuple[bytes, bytes]], body: bytes,
                      timeout: float = 30.0) -> Response:
        conn = await self._get()
        return await conn.request(b"POST", path.encode(), headers, body, timeout)

    async def request_batch(self, items: Sequence[Item], timeout: float = 30.0) -> list[Response | TransportError]:
        """POST every item, spread over the pool's connections (see ``Connection.request_batch``)."""
        k = len(self._conns)
        if k == 1 or len(items) < 2:
            try:
                conn = await self._get()
            except TransportError as exc:
                return [exc] * len(items)
            return await conn.request_batch(b"POST", items, timeout)

        async def part(j: int) -> list[Response | TransportError]:
            try:
                conn = await self._get()
            except TransportError as exc:
                return [exc] * len(items[j::k])
            return await conn.request_batch(b"POST", items[j::k], timeout)

        parts = await asyncio.gather(*(part(j) for j in range(k)))
        results: list[Response | TransportError] = [None] * len(items)  # type: ignore[list-item]
        for j, part_results in enumerate(parts):
            results[j::k] = part_results
        return results

    async def close(self) -> None:
        for conn in self._conns:
            if conn is not None:
                await conn.close()
        self._conns = [None] * len(self._conns)


def client_ssl_context(ca_file: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    ctx.set_alpn_protocols(["h2"])
    return ctx
