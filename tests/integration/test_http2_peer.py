"""Notee's HTTP/2 client obeys its peer (issue 13, item 1), against the emulator's own HTTP/2 server
(notee/emulator/peer.py) run in the test's event loop: a real h2 server over TLS on loopback that
enforces the stream limit it advertised (a client opening one stream too many gets GOAWAY
PROTOCOL_ERROR and loses the connection), changes it mid-connection, sends GOAWAY and answers only
the streams at or below its last_stream_id, and keeps its flow-control windows small.

Before the fix the client delivered 5 of 20 (limit 5), 1 of 20 (limit 1), then 0 of 20 on the new
connection, because it opened 20 streams before reading the server's SETTINGS."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from notee.emulator.peer import PeerRules, PeerServer, server_ssl_context
from notee.emulator.tls import TlsFiles, ensure_tls
from notee.providers.http2 import Connection, Response, TransportError
from notee.providers.http2_pool import Pool, client_ssl_context

Handler = Callable[[dict[str, Any], bytes], tuple[int, list[tuple[bytes, bytes]], bytes]]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return ensure_tls(tmp_path_factory.mktemp("peer-tls"), ["localhost"])


class Recorder:
    """Answers 200 with the request's body size, and counts how often each path was processed."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def __call__(self, scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        self.seen[scope["path"]] += 1
        return 200, [(b"content-type", b"application/json")], json.dumps({"size": len(body)}).encode()


async def _serve(tls: TlsFiles, handler: Handler, rules: PeerRules) -> tuple[PeerServer, str]:
    server = PeerServer(handler, rules)
    port = await server.start("127.0.0.1", 0, server_ssl_context(str(tls.server_cert), str(tls.server_key)))
    return server, f"https://localhost:{port}"


def _items(n: int, body: bytes = b"{}", prefix: str = "t") -> list[tuple[bytes, list[tuple[bytes, bytes]], bytes]]:
    return [(f"/3/device/{prefix}{i}".encode(), [(b"authorization", b"bearer x")], body) for i in range(n)]


def _ok(results: list[Response | TransportError]) -> int:
    return sum(1 for r in results if isinstance(r, Response) and r.status == 200)


@pytest.mark.parametrize("limit", [5, 1])
def test_never_more_streams_than_the_server_allows(tls: TlsFiles, limit: int) -> None:
    async def run() -> None:
        recorder = Recorder()
        server, url = await _serve(
            tls, recorder, PeerRules(first_streams=limit, max_streams=limit, answer_delay_s=0.005)
        )
        pool = Pool(url, client_ssl_context(str(tls.ca_cert)))
        try:
            for round_ in range(3):  # a fresh connection, then a warm one, then again
                results = await pool.request_batch(_items(20, prefix=f"r{round_}-"), timeout=10)
                assert _ok(results) == 20, results
            assert server.stats.protocol_errors == 0
            assert server.stats.max_open == limit  # used the limit fully, never beyond it
            assert server.stats.connections == 1
        finally:
            await pool.close()
            await server.close()

    asyncio.run(run())


def test_no_stream_before_the_servers_first_settings_on_a_new_connection(tls: TlsFiles) -> None:
    """The server enforces its first SETTINGS (limit 1) from the first frame on: a client that opens
    streams before reading them loses the connection. Every reconnect must wait again."""

    async def run() -> None:
        recorder = Recorder()
        server, url = await _serve(tls, recorder, PeerRules(first_streams=1, max_streams=1, goaway_after=3))
        pool = Pool(url, client_ssl_context(str(tls.ca_cert)))
        try:
            results = await pool.request_batch(_items(20), timeout=10)
            assert _ok(results) == 20
            assert server.stats.protocol_errors == 0
            assert server.stats.connections >= 7  # GOAWAY every 3 requests: new connections, each obeyed
            assert set(recorder.seen.values()) == {1}
        finally:
            await pool.close()
            await server.close()

    asyncio.run(run())


def test_connect_waits_for_settings_and_reports_a_server_that_sends_none(tls: TlsFiles) -> None:
    test_over = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)  # reads the preface, never answers
        await test_over.wait()  # the connection stays open, silent, until the test has its answer
        writer.close()

    async def run() -> None:
        srv = await asyncio.start_server(
            silent, "127.0.0.1", 0, ssl=server_ssl_context(str(tls.server_cert), str(tls.server_key))
        )
        port = srv.sockets[0].getsockname()[1]
        conn = Connection("localhost", port, client_ssl_context(str(tls.ca_cert)))
        try:
            with pytest.raises(TransportError) as err:
                await conn.connect(timeout=0.5)
            assert err.value.unprocessed and "SETTINGS" in str(err.value)
            assert not conn.usable
        finally:
            test_over.set()
            srv.close()

    asyncio.run(run())


def test_a_limit_lowered_mid_connection_is_obeyed_and_waiting_is_not_a_failure(tls: TlsFiles) -> None:
    async def run() -> None:
        holder: dict[str, PeerServer] = {}

        def handler(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            if scope["path"] == "/3/device/t10":
                holder["server"].lower_limit(2)
            return 200, [], b""

        server, url = await _serve(tls, handler, PeerRules(first_streams=1, max_streams=50, answer_delay_s=0.002))
        holder["server"] = server
        pool = Pool(url, client_ssl_context(str(tls.ca_cert)))
        try:
            results = await pool.request_batch(_items(200), timeout=10)
            assert _ok(results) == 200
            assert server.stats.protocol_errors == 0  # every new stream respected the lowered limit
            assert server.stats.max_open > 2  # it really had more open before the change
            conn = pool._conns[0]
            assert conn is not None and conn.stream_limit == 2
            assert server.stats.connections == 1
        finally:
            await pool.close()
            await server.close()

    asyncio.run(run())


def test_goaway_resends_only_the_streams_above_last_stream_id(tls: TlsFiles) -> None:
    async def run() -> None:
        recorder = Recorder()
        server, url = await _serve(
            tls, recorder, PeerRules(first_streams=10, max_streams=10, goaway_after=7, answer_delay_s=0.002)
        )
        pool = Pool(url, client_ssl_context(str(tls.ca_cert)))
        try:
            results = await pool.request_batch(_items(50), timeout=10)
            assert _ok(results) == 50
            assert server.stats.goaways >= 7
            assert server.stats.ignored_after_goaway > 0  # some streams were above last_stream_id ...
            assert len(recorder.seen) == 50 and set(recorder.seen.values()) == {1}  # ... and none processed twice
            assert server.stats.protocol_errors == 0
        finally:
            await pool.close()
            await server.close()

    asyncio.run(run())


def test_goaway_on_demand_mid_batch(tls: TlsFiles) -> None:
    async def run() -> None:
        recorder = Recorder()
        holder: dict[str, PeerServer] = {}

        def handler(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            if scope["path"] == "/3/device/t30":
                holder["server"].goaway_all()
            return recorder(scope, body)

        server, url = await _serve(tls, handler, PeerRules(first_streams=20, max_streams=20, answer_delay_s=0.002))
        holder["server"] = server
        pool = Pool(url, client_ssl_context(str(tls.ca_cert)))
        try:
            results = await pool.request_batch(_items(100), timeout=10)
            assert _ok(results) == 100
            assert server.stats.goaways == 1 and server.stats.connections == 2
            assert set(recorder.seen.values()) == {1}
        finally:
            await pool.close()
            await server.close()

    asyncio.run(run())


def test_bodies_larger_than_the_window_wait_for_window_update(tls: TlsFiles) -> None:
    """The server's stream and connection windows are 65,535 bytes: a 150 KB body must be sent in
    parts as the server's WINDOW_UPDATEs arrive (h2 on the server side would fail the connection
    with FLOW_CONTROL_ERROR otherwise)."""

    async def run() -> None:
        recorder = Recorder()
        server, url = await _serve(tls, recorder, PeerRules(first_streams=4, max_streams=4))
        pool = Pool(url, client_ssl_context(str(tls.ca_cert)))
        big = b"x" * 150_000
        try:
            results = await pool.request_batch([*_items(3, big, "big"), *_items(10, b"{}", "small")], timeout=10)
            sizes = [json.loads(r.body)["size"] for r in results if isinstance(r, Response)]
            assert sizes == [150_000] * 3 + [2] * 10
            assert server.stats.protocol_errors == 0
        finally:
            await pool.close()
            await server.close()

    asyncio.run(run())


def test_unreachable_server_gives_unprocessed_transport_errors(tmp_path: Path, tls: TlsFiles) -> None:
    from notee.emulator.control import free_port

    async def run() -> None:
        pool = Pool(f"https://localhost:{free_port()}", client_ssl_context(str(tls.ca_cert)))
        try:
            results = await pool.request_batch(_items(3), timeout=2)
            assert all(isinstance(r, TransportError) and r.unprocessed for r in results)
        finally:
            await pool.close()

    asyncio.run(run())
