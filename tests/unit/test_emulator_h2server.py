"""The emulator's own HTTP/2 server framing (notee/emulator/h2server.py, peer.py) against h2 as the
client, without sockets: it must stay as strict as h2 was on the APNs port (a stream over the
acknowledged limit, a receive window overrun, a frame too large, a bad preface are connection
errors), answer in frames h2 reads back, and hold an answer's DATA until the client's window opens."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from notee.emulator.peer import PeerRules, PeerServer
from notee.providers.http2_wire import FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, PROTOCOL_ERROR, frame


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None


def _handler(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    if scope["path"].startswith("/empty"):
        return 200, [(b"apns-id", b"x")], b""
    return 400, [(b"content-type", b"application/json")], b'{"size": %d}' % len(body)


class Pair:
    """A server connection and an h2 client wired through byte buffers."""

    def __init__(self, rules: PeerRules, client_settings: dict[int, int] | None = None) -> None:
        self.server = PeerServer(_handler, rules)
        self.conn = self.server.connection()
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.client = h2.connection.H2Connection(config=config)
        self.client.initiate_connection()
        if client_settings:
            self.client.update_settings(client_settings)
        self.events: list[Any] = []
        self.pump()

    def pump(self, raw: bytes = b"") -> list[Any]:
        """Client -> server -> client until nothing moves; returns the client's new events."""
        new: list[Any] = []
        data = self.client.data_to_send() + raw
        while data or self.transport.written:
            if data:
                self.conn.data_received(data)
            out, self.transport.written = bytes(self.transport.written), bytearray()
            if out and self.client.state_machine.state.name != "CLOSED":
                new += self.client.receive_data(out)
            data = self.client.data_to_send()
        self.events += new
        return new

    def request(self, path: str, body: bytes = b"", end: bool = True) -> int:
        sid = self.client.get_next_available_stream_id()
        headers = [(b":method", b"POST"), (b":scheme", b"https"), (b":path", path.encode()), (b":authority", b"x")]
        self.client.send_headers(sid, headers, end_stream=not body and end)
        if body:
            self.client.send_data(sid, body, end_stream=end)
        return sid


def _goaway(events: list[Any]) -> int | None:
    codes = [int(e.error_code) for e in events if isinstance(e, h2.events.ConnectionTerminated)]
    return codes[0] if codes else None


def test_requests_are_answered_in_frames_h2_reads_back() -> None:
    pair = Pair(PeerRules(first_streams=10, max_streams=10))
    a = pair.request("/empty")
    b = pair.request("/x", b"a" * 5000)
    events = pair.pump()
    heads = {e.stream_id: dict(e.headers) for e in events if isinstance(e, h2.events.ResponseReceived)}
    assert heads[a] == {b":status": b"200", b"apns-id": b"x"}
    assert heads[b] == {b":status": b"400", b"content-type": b"application/json"}
    data = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived) and e.stream_id == b)
    assert data == b'{"size": 5000}'
    assert {e.stream_id for e in events if isinstance(e, h2.events.StreamEnded)} == {a, b}


def test_a_stream_over_the_limit_is_a_protocol_error() -> None:
    pair = Pair(PeerRules(first_streams=2, max_streams=2))
    for _ in range(2):
        pair.request("/x", b"{}", end=False)  # open, not ended: they stay open
    pair.pump()
    # h2 itself refuses to open a third: the HEADERS written by hand (static-table fields only)
    assert _goaway(pair.pump(frame(1, 0x4, 5, b"\x83\x87\x84"))) == PROTOCOL_ERROR
    assert pair.transport.closed and pair.server.stats.protocol_errors == 1


def test_a_raised_limit_holds_only_once_acknowledged() -> None:
    pair = Pair(PeerRules(first_streams=1, max_streams=1))
    conn = pair.conn
    assert conn.limit == 1
    conn.set_limit(5)  # type: ignore[attr-defined]
    assert conn.limit == 1  # sent, not yet acknowledged
    pair.pump()
    assert conn.limit == 5


def test_a_receive_window_overrun_is_a_flow_control_error() -> None:
    pair = Pair(PeerRules(first_streams=4, max_streams=4))
    sid = pair.request("/x", b"", end=False)
    pair.pump()
    chunk = frame(0, 0, sid, b"z" * 16_000)
    assert _goaway(pair.pump(chunk * 5)) == FLOW_CONTROL_ERROR  # 80,000 bytes into a 65,535 window


def test_a_frame_over_16384_bytes_is_a_frame_size_error() -> None:
    pair = Pair(PeerRules())
    assert _goaway(pair.pump(frame(6, 0, 0, b"p" * 20_000))) == FRAME_SIZE_ERROR


def test_a_connection_without_the_preface_is_refused() -> None:
    server = PeerServer(_handler, PeerRules())
    conn = server.connection()
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.closed and server.stats.protocol_errors == 1


@pytest.mark.parametrize("window", [0, 3])
def test_an_answer_waits_for_the_clients_window(window: int) -> None:
    pair = Pair(PeerRules(first_streams=4, max_streams=4), {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    sid = pair.request("/x", b"abc")
    events = pair.pump()
    got = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
    assert got == b'{"size": 3}'[:window] and not any(isinstance(e, h2.events.StreamEnded) for e in events)
    pair.client.increment_flow_control_window(100, stream_id=sid)
    events = pair.pump()
    got += b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
    assert got == b'{"size": 3}' and any(isinstance(e, h2.events.StreamEnded) for e in events)
    assert sid not in pair.conn.streams


def test_ping_is_acknowledged() -> None:
    pair = Pair(PeerRules())
    pair.client.ping(b"12345678")
    events = pair.pump()
    assert [e.ping_data for e in events if isinstance(e, h2.events.PingAckReceived)] == [b"12345678"]
