"""A lean HTTP/2 client on the ``jh2`` state machine + asyncio over TLS: the transport of the FCM
and APNs senders.

Why not the SDKs' transports: firebase-admin's senders cost ~1,060 µs CPU per message (requests)
and ~1,180 µs (its httpx HTTP/2 path); this client multiplexes up to ``max_streams`` requests per
connection (docs/PROVIDERS.md, "Measured CPU per message"). It does only what the two push APIs
need: small POSTs, whole responses, flow control, GOAWAY, reconnect.

Why jh2 and not h2 or libcurl (measured side by side, docs/PROVIDERS.md "HTTP/2 engines"): jh2 is
h2's API with a native HPACK codec, about a third less CPU per request than the pure-Python h2;
libcurl (pycurl) costs less still but opens up to 100 streams on a new connection before the
server's first SETTINGS, which a server starting at one stream (APNs) refuses.

CPU notes: outbound header validation/normalisation is off (we build the headers ourselves); the
constant ``authorization`` header is indexed once per connection by the HPACK encoder.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import jh2.config
import jh2.connection
import jh2.events
import jh2.exceptions
import jh2.settings
from jh2.hyperframe.frame import GoAwayFrame

from notee import metrics

log = logging.getLogger(__name__)
# hpack codecs in Python (jh2's fallback; h2's, in the emulator) log every header at DEBUG, bearer
# tokens and JWTs included: never let them.
logging.getLogger("jh2.hpack").setLevel(logging.INFO)
logging.getLogger("hpack").setLevel(logging.INFO)


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


@dataclass(slots=True)
class _Stream:
    done: Callable[[Response | TransportError], None]  # called once, with the response or the error
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)


def _answered(results: list[Response | TransportError | None]) -> list[Response | TransportError]:
    """A batch's results once every item has one (each is set exactly once, by its answer, its
    error or the watchdog)."""
    out = [r for r in results if r is not None]
    if len(out) != len(results):
        raise RuntimeError(f"{len(results) - len(out)} batch item(s) left without a result")
    return out


# One request of a batch: (path, headers, body).
Item = tuple[bytes, list[tuple[bytes, bytes]], bytes]
_REFUSED_STREAM = 0x7


def _answers_after_goaway(conn: jh2.connection.H2Connection) -> None:
    """jh2 (like h2) closes its connection state machine on receiving GOAWAY, and then rejects the responses
    the server still sends for the streams at or below last_stream_id (RFC 9113 §6.8 lets them
    finish). Keep the state open after a GOAWAY; ``Connection`` opens no stream after one."""
    table = conn._frame_dispatch_table
    receive_goaway = table[GoAwayFrame]

    def receive(frame: GoAwayFrame) -> Any:
        state = conn.state_machine.state
        out = receive_goaway(frame)
        if state == jh2.connection.ConnectionState.CLIENT_OPEN:
            conn.state_machine.state = state
        return out

    table[GoAwayFrame] = receive


# How many closed streams one connection remembers. jh2 (like h2) keeps the last 65,536 (~7.5 MiB
# of OrderedDict per connection: the worker's RSS climbed by that much over each long-lived
# connection's first 65,536 pushes, worker_rss_growth). It reads the record only to answer a frame
# that arrives for a stream it no longer has: RST_STREAM if the stream was reset, a connection
# error otherwise; such frames come within a round trip of the reset, while at most
# ``max_streams`` (100) streams are open, so ten windows of them are plenty.
CLOSED_STREAMS_KEPT = 1000
_CULL_EVERY = 64


class _H2Connection(jh2.connection.H2Connection):  # type: ignore[misc]  # jh2 ships no type hints
    """jh2 counts the open streams on every ``send_headers`` (to refuse one beyond the peer's limit)
    by walking every stream it still holds, culling the closed ones as it goes: ~60 checks per
    request at 100 in flight, about a fifth of the sender's time in this module (cProfile,
    docs/PROVIDERS.md). ``Connection`` already counts the streams it has open and never opens one
    beyond ``min(max_streams, the peer's limit)``; once it hands that count over (``counted``),
    jh2's check reads it, and the walk (exact count and cull) runs only every ``_CULL_EVERY``
    streams."""

    MAX_CLOSED_STREAMS = CLOSED_STREAMS_KEPT  # jh2's class attribute: the size of its closed-stream record
    counted: Callable[[], int] | None = None
    _since_cull = 0

    @property
    def open_outbound_streams(self) -> int:
        self._since_cull += 1
        if self.counted is None or self._since_cull >= _CULL_EVERY:
            self._since_cull = 0
            return int(self._open_streams(int(self.config.client_side)))
        return self.counted()


def new_h2_connection() -> jh2.connection.H2Connection:
    """A client-side jh2 state machine set up as this module needs it, not yet initiated.

    Four of its steps reach past jh2's (h2's) documented API, which is why jh2 is pinned to an
    exact version (pyproject.toml; tests/test_http2_pins.py fails loudly when it changes): it is a
    subclass whose ``open_outbound_streams`` reads our own count (``_H2Connection``); its GOAWAY
    handler in ``_frame_dispatch_table`` is wrapped to keep the state machine open
    (``_answers_after_goaway``); ``local_settings`` is replaced before ``initiate_connection``
    so that the first SETTINGS frame already carries ours (no second SETTINGS round trip); and its
    class sets ``MAX_CLOSED_STREAMS`` (``CLOSED_STREAMS_KEPT``)."""
    config = jh2.config.H2Configuration(
        client_side=True,
        header_encoding=None,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
        validate_inbound_headers=False,
    )
    conn = _H2Connection(config=config)
    _answers_after_goaway(conn)
    conn.local_settings = jh2.settings.Settings(
        client=True,
        initial_values={
            jh2.settings.SettingCodes.ENABLE_PUSH: 0,
            jh2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20,
            jh2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
        },
    )
    return conn


class Connection:
    """One HTTP/2 connection that obeys its peer: no stream before the server's first SETTINGS,
    never more open streams than the server's current SETTINGS_MAX_CONCURRENT_STREAMS (or our own
    ``max_streams``, whichever is lower), request bodies only as far as the flow-control windows
    allow, and on GOAWAY no new stream while the streams at or below last_stream_id finish."""

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        max_streams: int = 100,
        provider: str = "unknown",
    ) -> None:
        self.host, self.port = host, port
        self._latency = metrics.provider_latency(provider)  # notee_provider_response_seconds
        self._ssl, self._sni = ssl_context, server_hostname or host
        self._max_streams = max_streams
        self._limit = 0  # streams we may have open: min(max_streams, the peer's current limit)
        self._conn: jh2.connection.H2Connection | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._streams: dict[int, _Stream] = {}
        self._unsent: dict[int, memoryview] = {}  # stream id -> body bytes still waiting for window
        self._settled: asyncio.Future[None] | None = None  # the server's first SETTINGS arrived
        self._flush_pending = False
        self._pumps: set[Callable[[], None]] = set()  # batches waiting for a free stream or window
        self.usable = False

    @property
    def stream_limit(self) -> int:
        return self._limit

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
        """Open the connection and wait for the server's first SETTINGS (its stream limit and
        windows): a stream opened before them could exceed a limit we have not read yet."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self._ssl, server_hostname=self._sni), timeout
            )
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            raise TransportError(f"connect to {self.host}:{self.port} failed: {exc!r}", unprocessed=True) from exc
        conn = new_h2_connection()
        conn.counted = self._streams.__len__  # our own count of open streams (see _H2Connection)
        conn.initiate_connection()
        conn.increment_flow_control_window(1 << 24)
        writer.write(conn.data_to_send())
        self._conn, self._writer = conn, writer
        self._settled = asyncio.get_running_loop().create_future()
        self._reader_task = asyncio.create_task(self._read(reader))
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

    async def _read(self, reader: asyncio.StreamReader) -> None:
        conn = self._conn
        assert conn is not None
        error = TransportError("connection closed by the server")
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                events = conn.receive_data(data)
                for event in events:
                    self._on_event(event)
                if self._unsent:
                    self._send_unsent()
                for pump in list(self._pumps):  # streams ended, limit or window grew: open more
                    pump()
                self._flush_soon()
        except (OSError, ssl.SSLError, jh2.exceptions.ProtocolError) as exc:
            error = TransportError(f"connection error: {exc!r}")
        except asyncio.CancelledError:
            error = TransportError("connection closed")
        finally:
            self.usable = False
            if self._settled is not None and not self._settled.done():
                self._settled.set_result(None)
            streams, self._streams = list(self._streams.values()), {}
            self._unsent.clear()
            for stream in streams:
                stream.done(error)
            for pump in list(self._pumps):  # hands back what the batches had not opened yet
                pump()

    def _on_event(self, event: jh2.events.Event) -> None:
        if isinstance(event, jh2.events.ResponseReceived):
            stream = self._streams.get(event.stream_id)
            if stream:
                stream.headers = event.headers
        elif isinstance(event, jh2.events.DataReceived):
            assert self._conn is not None
            self._conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            stream = self._streams.get(event.stream_id)
            if stream:
                stream.body += event.data
        elif isinstance(event, jh2.events.StreamEnded):
            stream = self._streams.pop(event.stream_id, None)
            if stream:
                if self._unsent.pop(event.stream_id, None) is not None:
                    # answered before its whole body was sent: end our side too, so the stream is
                    # closed for both peers as it is in our count (RFC 9113 §8.1)
                    assert self._conn is not None
                    try:
                        self._conn.reset_stream(event.stream_id, 0)
                    except jh2.exceptions.H2Error:
                        pass
                headers = dict(stream.headers)
                stream.done(Response(int(headers.pop(b":status", 0)), headers, bytes(stream.body)))
        elif isinstance(event, jh2.events.StreamReset):
            stream = self._streams.pop(event.stream_id, None)
            self._unsent.pop(event.stream_id, None)
            if stream:
                stream.done(
                    TransportError(
                        f"stream reset (error {event.error_code})", unprocessed=event.error_code == _REFUSED_STREAM
                    )
                )
        elif isinstance(event, jh2.events.RemoteSettingsChanged):
            assert self._conn is not None
            self._limit = min(self._max_streams, self._conn.remote_settings.max_concurrent_streams)
            if self._settled is not None and not self._settled.done():
                self.usable = True
                self._settled.set_result(None)
        elif isinstance(event, jh2.events.ConnectionTerminated):
            # GOAWAY: no new stream here. Streams above last_stream_id were not processed and are
            # handed back for another connection; the ones at or below it still get their answers.
            self.usable = False
            last = event.last_stream_id if event.last_stream_id is not None else 0
            for stream_id in [s for s in self._streams if s > last]:
                self._unsent.pop(stream_id, None)
                self._streams.pop(stream_id).done(
                    TransportError(f"GOAWAY (error {event.error_code})", unprocessed=True)
                )
            if self._settled is not None and not self._settled.done():
                self._settled.set_result(None)

    def _send_unsent(self) -> None:
        """Send the rest of bodies that were waiting for flow-control window."""
        conn = self._conn
        assert conn is not None
        for stream_id, view in list(self._unsent.items()):
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            while window > 0 and view:
                chunk, view = view[:window], view[window:]
                conn.send_data(stream_id, bytes(chunk), end_stream=not view)
                window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if view:
                self._unsent[stream_id] = view
            else:
                del self._unsent[stream_id]

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
        conn = self._conn
        assert conn is not None
        authority = self._sni.encode()
        mine: dict[int, int] = {}  # stream id -> item index, for the timeout
        opened = [0.0] * n  # when each item's stream was opened (its response latency starts there)
        observe = self._latency.observe
        nxt, left = 0, n
        last_progress = time.monotonic()

        def complete(i: int, result: Response | TransportError) -> None:
            nonlocal left, last_progress
            if results[i] is None:
                results[i] = result
                left -= 1
                last_progress = time.monotonic()
                if result.__class__ is Response:
                    observe(last_progress - opened[i])
                if left == 0 and not finished.done():
                    finished.set_result(None)

        def on_done(i: int) -> Callable[[Response | TransportError], None]:
            return lambda result: complete(i, result)

        def pump() -> None:
            nonlocal nxt
            streams = self._streams
            while nxt < n:
                if not self.usable:
                    complete(nxt, TransportError("connection closed before the request was sent", unprocessed=True))
                    nxt += 1
                    continue
                if len(streams) >= self._limit or self._unsent:
                    return  # the reader pumps again when a stream ends or the window grows
                path, headers, body = items[nxt]
                try:
                    stream_id = conn.get_next_available_stream_id()
                    conn.send_headers(
                        stream_id,
                        [
                            (b":method", method),
                            (b":scheme", b"https"),
                            (b":path", path),
                            (b":authority", authority),
                            *headers,
                        ],
                        end_stream=not body,
                    )
                    if body:
                        window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
                        if len(body) <= window:
                            conn.send_data(stream_id, body, end_stream=True)
                        else:
                            self._unsent[stream_id] = memoryview(body)
                            self._send_unsent()
                except jh2.exceptions.H2Error as exc:
                    # our own bookkeeping should make this impossible; the server never saw the stream
                    self.usable = False
                    complete(nxt, TransportError(f"cannot open a stream: {exc!r}", unprocessed=True))
                    nxt += 1
                    continue
                streams[stream_id] = _Stream(on_done(nxt))
                mine[stream_id] = nxt
                opened[nxt] = time.monotonic()
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
                    self._unsent.pop(stream_id, None)
                    try:
                        conn.reset_stream(stream_id)
                    except jh2.exceptions.H2Error:
                        pass
                    complete(i, TransportError(f"no response within {timeout} s"))
            for i in range(nxt, n):
                complete(i, TransportError(f"no stream available within {timeout} s", unprocessed=True))
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
        return _answered(results)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    async def close_when_done(self) -> None:
        """Close once the reader has ended (the server closes after its GOAWAY'd streams)."""
        if self._reader_task is not None:
            try:
                await asyncio.shield(self._reader_task)
            except (asyncio.CancelledError, Exception):
                pass
        await self.close()

    async def close(self) -> None:
        self.usable = False
        if self._conn is not None and self._writer is not None and not self._writer.is_closing():
            try:
                self._conn.close_connection()
                self._writer.write(self._conn.data_to_send())
            except (jh2.exceptions.H2Error, OSError, RuntimeError):
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

    def __init__(
        self, url: str, ssl_context: ssl.SSLContext, *, size: int = 1, max_streams: int = 100, provider: str = "unknown"
    ) -> None:
        """``provider``: the label of this pool's metrics (``fcm``, ``apns``)."""
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError("HTTP/2 push transport needs an https:// URL")
        self.host, self.port = parts.hostname, parts.port or 443
        self._ssl = ssl_context
        self._conns: list[Connection | None] = [None] * size
        self._locks = [asyncio.Lock() for _ in range(size)]
        self._max_streams = max_streams
        self._next = 0
        self._retired: set[Connection] = set()
        self.connections_opened = 0
        self._provider = provider
        self._opened_metric = metrics.HTTP2_CONNECTIONS.labels(provider)
        metrics.SCRAPE_TIME.track_pool(self)  # notee_http2_open_streams, read when Prometheus scrapes

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def open_streams(self) -> int:
        """Streams open on this pool's connections now (retired ones finishing included)."""
        return sum(c.open_streams for c in [*self._conns, *self._retired] if c is not None)

    async def _get(self) -> Connection:
        i = self._next = (self._next + 1) % len(self._conns)
        conn = self._conns[i]
        if conn is not None and conn.usable:
            return conn
        async with self._locks[i]:
            conn = self._conns[i]
            if conn is None or not conn.usable:
                if conn is not None:
                    self._retire(conn)
                conn = Connection(
                    self.host, self.port, self._ssl, max_streams=self._max_streams, provider=self._provider
                )
                self._conns[i] = None
                await conn.connect()
                self.connections_opened += 1
                self._opened_metric.inc()
                self._conns[i] = conn
            return conn

    def _retire(self, conn: Connection) -> None:
        """Close a connection that is no longer usable. After a GOAWAY it still answers the streams
        at or below last_stream_id: close it only once the server has finished with it."""
        self._retired.add(conn)
        task = asyncio.ensure_future(conn.close() if not conn.open_streams else conn.close_when_done())
        task.add_done_callback(lambda _: self._retired.discard(conn))

    async def _batch(self, items: Sequence[Item], timeout: float) -> list[Response | TransportError]:
        try:
            conn = await self._get()
        except TransportError as exc:
            return [exc] * len(items)
        return await conn.request_batch(b"POST", items, timeout)

    async def request_batch(self, items: Sequence[Item], timeout: float = 30.0) -> list[Response | TransportError]:
        """POST every item, spread over the pool's connections (see ``Connection.request_batch``).
        Items the server certainly did not process are resent on a new connection."""
        results = await self._spread(items, timeout)
        while True:  # every round answers at least one item, or the loop ends
            again = [i for i, r in enumerate(results) if isinstance(r, TransportError) and r.unprocessed]
            if not again:
                break
            retried = await self._spread([items[i] for i in again], timeout)
            for i, r in zip(again, retried, strict=True):
                results[i] = r
            if all(isinstance(r, TransportError) for r in retried):
                break  # nothing got through: the origin is unreachable, let the caller back off
        return results

    async def _spread(self, items: Sequence[Item], timeout: float) -> list[Response | TransportError]:
        k = len(self._conns)
        if k == 1 or len(items) < 2:
            return await self._batch(items, timeout)
        parts = await asyncio.gather(*(self._batch(items[j::k], timeout) for j in range(k)))
        results: list[Response | TransportError | None] = [None] * len(items)
        for j, part_results in enumerate(parts):
            results[j::k] = part_results
        return _answered(results)

    async def close(self) -> None:
        for conn in [*self._retired, *self._conns]:
            if conn is not None:
                await conn.close()
        self._conns = [None] * len(self._conns)


def client_ssl_context(ca_file: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    ctx.set_alpn_protocols(["h2"])
    return ctx
