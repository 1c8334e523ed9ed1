"""A pool of HTTP/2 connections to one origin (notee.providers.http2.Connection), used round-robin by
the FCM and APNs senders; requests the server certainly did not process are sent again on a new
connection."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from urllib.parse import urlsplit

from notee.core import metrics
from notee.providers.http2 import Connection, Item, Response, TransportError, answered


class Pool:
    """``size`` connections to one origin, (re)opened lazily, used round-robin."""

    def __init__(
        self,
        url: str,
        ssl_context: ssl.SSLContext,
        *,
        size: int = 1,
        max_streams: int = 100,
        provider: str = "unknown",
        per_request: Sequence[bytes] = (),
    ) -> None:
        """``provider``: the label of this pool's metrics (``fcm``, ``apns``). ``per_request``: header
        names whose values differ on every request (APNs' ``:path`` and ``apns-id``), sent as
        literals that never enter the HPACK table (``http2_wire.HeaderEncoder``)."""
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError("HTTP/2 push transport needs an https:// URL")
        self.host, self.port = parts.hostname, parts.port or 443
        self._ssl = ssl_context
        self._conns: list[Connection | None] = [None] * size
        self._locks = [asyncio.Lock() for _ in range(size)]
        self._max_streams = max_streams
        self._per_request = tuple(per_request)
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
                    self.host,
                    self.port,
                    self._ssl,
                    max_streams=self._max_streams,
                    provider=self._provider,
                    per_request=self._per_request,
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
        return answered(results)

    async def close(self) -> None:
        for conn in [*self._retired, *self._conns]:
            if conn is not None:
                await conn.close()
        self._conns = [None] * len(self._conns)


def client_ssl_context(ca_file: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    ctx.set_alpn_protocols(["h2"])
    return ctx
