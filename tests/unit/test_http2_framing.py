"""Notee's own HTTP/2 framing (notee/providers/http2.py) against a real HTTP/2 peer: a scripted
server on the plain ``h2`` state machine over an in-memory wire (tests/support/loopback.py: no
socket, no TLS; h2 checks every frame it receives and fails the connection on any protocol or
flow-control violation), for the frames the emulator
never sends: CONTINUATION, padding, trailers, PING, RST_STREAM, the server's WINDOW_UPDATEs and
SETTINGS changes on open streams, our WINDOW_UPDATEs for large responses, and the peer's protocol
errors. Each test's scenario is driven by the server, and the client is Notee's ``Pool`` /
``Connection`` as the senders use it."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import DataFrame, HeadersFrame

from notee.providers.http2 import Connection, Response, TransportError
from notee.providers.http2_pool import Pool, client_ssl_context
from tests.support.loopback import Wire
from tests.support.waiting import until

Handler = Callable[["ScriptedPeer", int, dict[bytes, bytes], bytes], None]


def answer(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
    """200 with the request's body size and path."""
    peer.conn.send_headers(stream_id, [(b":status", b"200"), (b"content-type", b"application/json")])
    peer.conn.send_data(
        stream_id, json.dumps({"size": len(body), "path": headers[b":path"].decode()}).encode(), end_stream=True
    )


class ScriptedPeer(asyncio.Protocol):
    """One server connection: h2's state machine; complete requests go to the server's handler."""

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=True)
        )
        self.requests: dict[int, tuple[dict[bytes, bytes], bytearray]] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.peers.append(self)
        if self.server.settings:
            self.conn.local_settings = h2.settings.Settings(client=False, initial_values=self.server.settings)
        self.conn.initiate_connection()
        self.flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:  # the client broke HTTP/2: what these tests catch
            self.server.errors.append(exc)
            self.flush()
            assert self.transport is not None
            self.transport.close()
            return
        for event in events:
            self.server.events.append(event)
            if isinstance(event, h2.events.RequestReceived):
                self.requests[event.stream_id] = (dict(event.headers), bytearray())
            elif isinstance(event, h2.events.DataReceived):
                self.requests[event.stream_id][1].extend(event.data)
                if self.server.acknowledge:
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id in self.requests:
                headers, body = self.requests.pop(event.stream_id)
                self.server.handler(self, event.stream_id, headers, bytes(body))
            elif isinstance(event, h2.events.WindowUpdated) and self.server.on_window:
                self.server.on_window(self)
        self.flush()

    def write_raw(self, data: bytes) -> None:
        """Bytes outside h2's state machine (frames h2 would not send)."""
        self.flush()
        assert self.transport is not None
        self.transport.write(data)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class ScriptedServer:
    def __init__(self, handler: Handler = answer, *, settings: dict[int, int] | None = None) -> None:
        self.handler = handler
        self.settings = settings
        self.acknowledge = True  # WINDOW_UPDATE for the request data it receives
        self.on_window: Callable[[ScriptedPeer], None] | None = None
        self.peers: list[ScriptedPeer] = []
        self.events: list[Any] = []
        self.errors: list[Exception] = []
        self.wire: Wire | None = None

    def start(self) -> str:
        """Every connection the loop opens from now on reaches a new peer of this server."""
        self.wire = Wire.install(asyncio.get_running_loop(), lambda: ScriptedPeer(self))
        return "https://localhost:443"

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    async def close(self) -> None:
        for peer in self.peers:
            if peer.transport is not None:
                peer.transport.close()
        await until(lambda: self.wire is None or self.wire.idle, timeout=5, what="the wire drained")


def _items(n: int, body: bytes = b"{}", headers: list[tuple[bytes, bytes]] | None = None) -> list[Any]:
    return [(f"/p/{i}".encode(), headers or [(b"authorization", b"Bearer x")], body) for i in range(n)]


def run(server: ScriptedServer, scenario: Callable[[Pool, ScriptedServer], Any]) -> None:
    async def main() -> None:
        url = server.start()
        pool = Pool(url, client_ssl_context())
        try:
            await scenario(pool, server)
        finally:
            await pool.close()
            await server.close()

    asyncio.run(main())


def test_the_first_settings_carry_ours_and_no_stream_opens_before_the_servers() -> None:
    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        results = await pool.request_batch(_items(3), timeout=5)
        assert all(isinstance(r, Response) and r.status == 200 for r in results)
        changed = server.of(h2.events.RemoteSettingsChanged)[0].changed_settings
        sent = {code: s.new_value for code, s in changed.items()}
        assert sent[h2.settings.SettingCodes.ENABLE_PUSH] == 0
        assert sent[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] == 1 << 20
        assert sent[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 100
        kinds = [type(e) for e in server.events]
        # our SETTINGS ACK of the server's SETTINGS arrives before our first request
        assert kinds.index(h2.events.SettingsAcknowledged) < kinds.index(h2.events.RequestReceived)
        assert not server.errors

    run(ScriptedServer(), scenario)


def test_constant_headers_are_indexed_and_every_header_arrives_intact() -> None:
    secret = b"Bearer indexed-" + b"x" * 200

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        headers = [(b"authorization", secret), (b"content-type", b"application/json"), (b"x-custom", b"v")]
        for _ in range(3):
            assert all(isinstance(r, Response) for r in await pool.request_batch(_items(5, headers=headers)))
        received = server.of(h2.events.RequestReceived)
        assert len(received) == 15 and not server.errors
        for event in received:
            got = dict(event.headers)
            assert got[b"authorization"] == secret and got[b"x-custom"] == b"v" and got[b":method"] == b"POST"
        conn = pool._conns[0]
        assert conn is not None and conn._encoder.table_size > len(secret)  # the bearer sits in the table

    run(ScriptedServer(), scenario)


def test_a_header_table_size_of_zero_is_obeyed() -> None:
    """The server allows no dynamic table: h2 fails the connection if the client's encoder indexes."""

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        for _ in range(3):
            results = await pool.request_batch(_items(5), timeout=5)
            assert all(isinstance(r, Response) and r.status == 200 for r in results), results
        assert not server.errors and len(server.peers) == 1
        assert len(server.peers[0].conn.decoder.header_table.dynamic_entries) == 0  # nothing was indexed
        conn = pool._conns[0]
        assert conn is not None and conn._encoder.table_size == 0

    run(ScriptedServer(settings={h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0}), scenario)


def test_large_header_blocks_use_continuation_both_ways() -> None:
    big = b"v" * 40_000  # > 16,384: HEADERS + CONTINUATION frames on the wire, each way

    def echo_header(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
        peer.conn.send_headers(stream_id, [(b":status", b"200"), (b"x-echo", headers[b"x-big"])])
        peer.conn.send_data(stream_id, b"ok", end_stream=True)

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        results = await pool.request_batch(_items(3, headers=[(b"x-big", big)]), timeout=5)
        assert [r.headers[b"x-echo"] for r in results if isinstance(r, Response)] == [big] * 3
        assert not server.errors

    run(ScriptedServer(echo_header), scenario)


def test_padded_frames_priority_flags_informational_responses_and_trailers_are_read() -> None:
    def padded(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
        if headers[b":path"] == b"/p/0":  # HEADERS padded and with the PRIORITY flag, written raw
            block = peer.conn.encoder.encode([(b":status", b"200"), (b"x-raw", b"1")])
            frame = HeadersFrame(stream_id, block, flags=["END_HEADERS", "PADDED", "PRIORITY"], pad_length=7)
            frame.depends_on, frame.stream_weight = 0, 15
            data = DataFrame(stream_id, b"padded body", flags=["PADDED", "END_STREAM"], pad_length=20)
            peer.write_raw(frame.serialize() + data.serialize())
            return
        peer.conn.send_headers(stream_id, [(b":status", b"103"), (b"link", b"</a>")])  # informational first
        peer.conn.send_headers(stream_id, [(b":status", b"200")])
        peer.conn.send_data(stream_id, b"part one, ", pad_length=30)
        peer.conn.send_data(stream_id, b"part two", pad_length=0)
        peer.conn.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)  # trailers

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        first, second = await pool.request_batch(_items(2), timeout=5)
        assert isinstance(first, Response) and first.body == b"padded body" and first.headers[b"x-raw"] == b"1"
        assert isinstance(second, Response) and second.status == 200 and b"link" not in second.headers
        assert second.body == b"part one, part two"
        assert second.headers[b"grpc-status"] == b"0"
        again = await pool.request_batch(_items(2), timeout=5)  # the connection (and its HPACK state) is intact
        assert all(isinstance(r, Response) and r.status == 200 for r in again)
        assert not server.errors and len(server.peers) == 1

    run(ScriptedServer(padded), scenario)


def test_ping_is_answered_with_its_payload() -> None:
    def ping_first(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
        peer.conn.ping(b"notee-pg")
        answer(peer, stream_id, headers, body)

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        await pool.request_batch(_items(1), timeout=5)
        await until(lambda: server.of(h2.events.PingAckReceived), timeout=5, what="the PING ACK")
        assert [e.ping_data for e in server.of(h2.events.PingAckReceived)] == [b"notee-pg"]

    run(ScriptedServer(ping_first), scenario)


def test_rst_stream_refused_is_resent_and_other_resets_are_not() -> None:
    seen: dict[bytes, int] = {}

    def reset(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
        path = headers[b":path"]
        seen[path] = seen.get(path, 0) + 1
        if path == b"/p/0" and seen[path] == 1:
            peer.conn.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)  # not processed: resend
        elif path == b"/p/1":
            peer.conn.reset_stream(stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)  # maybe processed: no resend
        else:
            answer(peer, stream_id, headers, body)

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        results = await pool.request_batch(_items(3), timeout=5)
        assert isinstance(results[0], Response) and results[0].status == 200
        assert isinstance(results[1], TransportError) and not results[1].unprocessed
        assert "error 2" in str(results[1])
        assert isinstance(results[2], Response)
        assert seen == {b"/p/0": 2, b"/p/1": 1, b"/p/2": 1}
        assert not server.errors

    run(ScriptedServer(reset), scenario)


def test_responses_larger_than_our_windows_get_window_updates() -> None:
    """3 responses of 6 MiB: more than our stream window (1 MiB) each and than our connection window
    (16 MiB) together. h2 never sends beyond the windows we give: without our WINDOW_UPDATEs the
    responses would stall and the batch time out."""
    size = 6 << 20
    pending: dict[tuple[ScriptedPeer, int], memoryview] = {}

    def push(peer: ScriptedPeer) -> None:
        for (owner, stream_id), view in list(pending.items()):
            if owner is not peer:
                continue
            while view:
                n = min(len(view), peer.conn.local_flow_control_window(stream_id), peer.conn.max_outbound_frame_size)
                if n <= 0:
                    break
                view, chunk = view[n:], view[:n]
                peer.conn.send_data(stream_id, bytes(chunk), end_stream=not view)
            pending[(peer, stream_id)] = view
            if not view:
                del pending[(peer, stream_id)]

    def big(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
        peer.conn.send_headers(stream_id, [(b":status", b"200")])
        pending[(peer, stream_id)] = memoryview(bytes(size))
        push(peer)

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        server.on_window = push
        results = await pool.request_batch(_items(3), timeout=10)
        assert [len(r.body) for r in results if isinstance(r, Response)] == [size] * 3
        updates = server.of(h2.events.WindowUpdated)
        assert any(e.stream_id == 0 for e in updates) and any(e.stream_id != 0 for e in updates)
        assert not server.errors

    run(ScriptedServer(big), scenario)


def test_a_larger_initial_window_in_mid_stream_applies_to_the_open_streams() -> None:
    """The server starts with 1,000-byte stream windows and never sends a WINDOW_UPDATE: a 50 KB body
    can only finish because its SETTINGS_INITIAL_WINDOW_SIZE change (RFC 9113 §6.9.2) grows the
    window of the stream already open. h2 fails the connection if the client sends beyond a window."""

    def raise_window_on_first_data(
        peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes
    ) -> None:
        answer(peer, stream_id, headers, body)

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        server.acknowledge = False
        task = asyncio.ensure_future(pool.request_batch(_items(1, body=b"y" * 50_000), timeout=5))
        await until(lambda: server.of(h2.events.DataReceived), timeout=5, what="the first DATA")

        def blocked() -> bool:  # the rest of the body waits for window and nothing more is on the wire
            conn = pool._conns[0]
            return conn is not None and bool(conn._unsent) and server.wire is not None and server.wire.idle

        await until(blocked, timeout=5, what="the client waiting for window")
        received = sum(len(e.data) for e in server.of(h2.events.DataReceived))
        assert received == 1000  # held by the stream window
        peer = server.peers[0]
        peer.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 60_000})
        peer.flush()
        (result,) = await task
        assert isinstance(result, Response) and json.loads(result.body)["size"] == 50_000
        assert not server.errors

    run(
        ScriptedServer(raise_window_on_first_data, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000}),
        scenario,
    )


def test_a_late_answer_to_a_stream_we_reset_is_dropped_and_the_connection_lives_on() -> None:
    """A timed-out request is reset (RST_STREAM CANCEL) while its answer is on the wire: the answer
    (HEADERS included, so the HPACK state must follow it) is dropped, and the next requests go over
    the same connection. No record of closed streams is kept."""

    held: list[tuple[ScriptedPeer, bytes]] = []

    def slow_first(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
        if headers[b":path"] == b"/late":
            peer.conn.send_headers(stream_id, [(b":status", b"200"), (b"x-late", b"yes" * 30)])
            peer.conn.send_data(stream_id, b"too late", end_stream=True)
            held.append((peer, peer.conn.data_to_send()))  # produced now, delivered after the client gave up
            return
        answer(peer, stream_id, headers, body)

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        (gave_up,) = await pool.request_batch([(b"/late", [(b"authorization", b"Bearer x")], b"{}")], timeout=0.3)
        assert isinstance(gave_up, TransportError) and "no response" in str(gave_up)
        for peer, late in held:
            peer.write_raw(late)
        assert server.wire is not None
        await until(lambda: server.wire.idle, timeout=5, what="the late answer delivered")
        for _ in range(3):
            results = await pool.request_batch(_items(50), timeout=5)
            assert all(isinstance(r, Response) and r.status == 200 for r in results)
        assert pool.connections_opened == 1
        conn = pool._conns[0]
        assert conn is not None and conn.open_streams == 0 and not conn._streams and not conn._unsent
        assert not server.errors

    run(ScriptedServer(slow_first), scenario)


def test_a_peer_protocol_error_ends_the_connection_with_goaway() -> None:
    def stray_data(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
        peer.write_raw(DataFrame(stream_id + 100, b"stray", flags=["END_STREAM"]).serialize())  # a stream never opened

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        (result,) = await pool.request_batch(_items(1), timeout=5)
        assert isinstance(result, TransportError) and "never opened" in str(result)
        await until(lambda: server.of(h2.events.ConnectionTerminated), timeout=5, what="the GOAWAY")
        (goaway,) = server.of(h2.events.ConnectionTerminated)
        assert goaway.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR

    run(ScriptedServer(stray_data), scenario)


def test_connection_objects_stay_small_over_many_requests() -> None:
    """Nothing per request outlives its answer (the per-connection record of closed streams that h2
    and jh2 keep cost the worker ~7.5 MiB per connection)."""

    def unique_header(peer: ScriptedPeer, stream_id: int, headers: dict[bytes, bytes], body: bytes) -> None:
        answer(peer, stream_id, headers, body)

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        for round_ in range(30):
            items = [
                (f"/3/device/{round_}-{i}".encode(), [(b"apns-id", f"{round_}-{i}".encode())], b"{}")
                for i in range(100)
            ]
            assert all(isinstance(r, Response) for r in await pool.request_batch(items, timeout=5))
        conn = pool._conns[0]
        assert isinstance(conn, Connection)
        assert not conn._streams and not conn._unsent and conn._buffer == b""
        assert len(conn._encoder._seen) <= conn._encoder.SEEN_KEPT and conn._encoder.table_size <= 4096
        assert not server.errors

    run(ScriptedServer(unique_header), scenario)


def test_a_finished_batch_is_freed_without_the_garbage_collector() -> None:
    """Once a batch has its answers, nothing of it (items, bodies, responses) waits for a garbage
    collection: a reference cycle per batch (the pump naming itself) kept every batch's items and
    responses until a full collection and drove the worker's RSS up by ~10 % in a fan-out."""

    class Items(list[Any]):  # a list that can be weakly referenced
        pass

    async def scenario(pool: Pool, server: ScriptedServer) -> None:
        gc.disable()  # only reference counting frees anything from here on
        try:
            for n in (1, 50):
                items = Items(_items(n, body=b'{"message": {}}'))
                batch = weakref.ref(items)
                results = await pool.request_batch(items, timeout=5)
                assert len(results) == n and all(isinstance(r, Response) for r in results)
                del items, results
                assert batch() is None, "the batch's items outlived it (a reference cycle)"
        finally:
            gc.enable()
        assert not server.errors

    run(ScriptedServer(), scenario)
