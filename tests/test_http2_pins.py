"""jh2 (the h2 fork with a native HPACK codec that notee/providers/http2.py drives) is pinned to an
exact version because ``new_h2_connection`` reaches past its documented API: it wraps the GOAWAY
handler in the connection's private ``_frame_dispatch_table`` (keyed by jh2's vendored hyperframe
frame classes) to keep its ``state_machine`` open after a GOAWAY, replaces ``local_settings``
before ``initiate_connection``, bounds the closed-stream record (``MAX_CLOSED_STREAMS``, read when
the connection is built), and overrides ``open_outbound_streams`` in a subclass so that the
per-request stream check reads the client's own count (the walk and cull of ``_open_streams`` run
every 64 streams). Its CPU advantage (docs/PROVIDERS.md, "HTTP/2 engines") is the
native HPACK encoder and decoder: jh2 silently falls back to pure Python without them.

These tests fail loudly, naming the version and the internal concerned, when the installed version
differs from the pin or when one of those internals stops working as relied on. After an upgrade:
check each internal below against the new release, then move the pin. The server side of these
tests is the plain ``h2`` state machine (the emulator's), so they also check that both interoperate.
"""

from __future__ import annotations

import logging
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.settings
import jh2.config
import jh2.connection
import jh2.events
import jh2.exceptions
from jh2.hyperframe.frame import GoAwayFrame

from notee.providers import http2

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
PINNED = ("jh2",)
INTERNALS = (
    "H2Connection.encoder/.decoder are jh2's native (jh2._hazmat) HPACK codec; "
    "H2Connection._frame_dispatch_table[GoAwayFrame] handles GOAWAY and H2Connection.state_machine.state "
    "can be set back to CLIENT_OPEN after it; H2Connection.local_settings, replaced before "
    "initiate_connection(), is what the first SETTINGS frame sends; H2Connection.MAX_CLOSED_STREAMS, a class "
    "attribute, sizes the record of closed streams (_closed_streams); send_headers checks the "
    "open_outbound_streams property (overridden by a subclass) against the peer's limit, and "
    "H2Connection._open_streams(remainder) counts and culls closed streams from H2Connection.streams"
)


def _pins() -> dict[str, str]:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pins = {}
    for dep in deps:
        m = re.fullmatch(r"(jh2)==([\w.]+)", dep)
        if m:
            pins[m[1]] = m[2]
    return pins


def _loud(what: str) -> str:
    installed = ", ".join(f"{name} {version(name)}" for name in PINNED)
    return (
        f"notee/providers/http2.py relies on jh2 internals ({INTERNALS}). {what}. "
        f"Installed: {installed}; pinned in pyproject.toml: {_pins()}. Check new_h2_connection() against "
        "the new release before changing the pins."
    )


def _client_and_server() -> tuple[jh2.connection.H2Connection, h2.connection.H2Connection]:
    client = http2.new_h2_connection()
    client.initiate_connection()
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    return client, server


def test_jh2_is_pinned_exactly_to_the_installed_version():
    pins = _pins()
    assert set(pins) == set(PINNED), _loud("pyproject.toml must pin jh2 with ==")
    for name, pinned in pins.items():
        assert version(name) == pinned, _loud(f"{name} {version(name)} is installed, not the pinned {pinned}")


def test_the_hpack_codec_is_jh2s_native_one():
    conn = http2.new_h2_connection()
    for side in ("encoder", "decoder"):
        module = type(getattr(conn, side, None)).__module__
        assert module == "jh2._hazmat", _loud(f"the connection's {side} comes from {module}, not jh2's native codec")


def test_header_blocks_index_the_constant_authorization_header():
    # a long bearer is sent in full once per connection, then as an index: what keeps the
    # per-request header cost flat (the pure-Python h2 needed Huffman coding turned off for it)
    client, server = _client_and_server()
    server.receive_data(client.data_to_send())
    secret = b"Bearer indexed-" + b"x" * 200
    sizes = []
    for _ in range(2):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(
            stream_id,
            [
                (b":method", b"POST"),
                (b":scheme", b"https"),
                (b":path", b"/p"),
                (b":authority", b"example.test"),
                (b"authorization", secret),
            ],
            end_stream=True,
        )
        wire = client.data_to_send()
        sizes.append(len(wire))
        events = server.receive_data(wire)
        received = next(e for e in events if isinstance(e, h2.events.RequestReceived))
        assert (b"authorization", secret) in received.headers
    assert sizes[1] < 50 < 150 < sizes[0], _loud(f"header blocks of {sizes} bytes: the bearer is not indexed")


def test_responses_after_goaway_are_still_accepted():
    fresh = jh2.connection.H2Connection(jh2.config.H2Configuration(client_side=True))
    table = getattr(fresh, "_frame_dispatch_table", None)
    assert isinstance(table, dict) and GoAwayFrame in table, _loud(
        "H2Connection has no _frame_dispatch_table keyed by hyperframe's GoAwayFrame"
    )
    assert fresh.state_machine.state == jh2.connection.ConnectionState.IDLE, _loud("no state_machine.state")
    client, server = _client_and_server()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    stream_id = client.get_next_available_stream_id()
    client.send_headers(
        stream_id,
        [(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/p"), (b":authority", b"example.test")],
        end_stream=True,
    )
    server.receive_data(client.data_to_send())
    server.send_headers(stream_id, [(b":status", b"200")], end_stream=True)
    answer = server.data_to_send()
    server.close_connection(last_stream_id=stream_id)
    # on the wire: GOAWAY, then the answer to a stream it covers (unwrapped, jh2 raises ProtocolError)
    try:
        events = client.receive_data(server.data_to_send() + answer)
    except jh2.exceptions.ProtocolError as exc:
        raise AssertionError(_loud(f"a response after GOAWAY was refused: {exc}")) from exc
    kinds = [type(e) for e in events]
    assert jh2.events.ConnectionTerminated in kinds and jh2.events.ResponseReceived in kinds, _loud(
        f"after GOAWAY the client got {kinds}"
    )


def test_the_first_settings_frame_carries_the_replaced_local_settings():
    client, server = _client_and_server()
    events = server.receive_data(client.data_to_send())
    changed = next(e for e in events if isinstance(e, h2.events.RemoteSettingsChanged)).changed_settings
    sent = {code: setting.new_value for code, setting in changed.items()}
    expected = {
        h2.settings.SettingCodes.ENABLE_PUSH: 0,
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20,
        h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
    }
    assert {code: sent.get(code) for code in expected} == expected, _loud(
        "initiate_connection() no longer sends the local_settings object set before it"
    )


def test_hpack_debug_logging_of_header_values_stays_off():
    # jh2's pure-Python fallback codec (and the emulator's h2) log each header block at DEBUG under
    # their hpack module loggers; http2.py raises both to INFO so bearer tokens never reach a log
    # even when the root logs DEBUG.
    for name in ("jh2.hpack.hpack", "hpack.hpack"):
        assert not logging.getLogger(name).isEnabledFor(logging.DEBUG), name


_HEADERS = [(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/p"), (b":authority", b"example.test")]


def _exchange(client: jh2.connection.H2Connection, server: h2.connection.H2Connection) -> None:
    """One request, answered by the server and read by the client."""
    stream_id = client.get_next_available_stream_id()
    client.send_headers(stream_id, _HEADERS, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(stream_id, [(b":status", b"200")])
    server.send_data(stream_id, b"{}", end_stream=True)
    client.receive_data(server.data_to_send())


def test_the_closed_stream_record_is_bounded_and_still_answers_a_late_frame_after_a_reset():
    """jh2 (like h2) remembers 65,536 closed streams per connection by default (~7.5 MiB; the worker's
    RSS grew by that much per connection over its first pushes). Ours keep CLOSED_STREAMS_KEPT, and
    an answer that arrives for a stream we reset meanwhile is still refused with RST_STREAM, not a
    connection error."""
    assert jh2.connection.H2Connection.MAX_CLOSED_STREAMS == 2**16, _loud("jh2's default MAX_CLOSED_STREAMS changed")
    client, server = _client_and_server()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    for _ in range(http2.CLOSED_STREAMS_KEPT + 500):
        _exchange(client, server)
    # a request reset by the client (a timeout) while the server's answer is on the wire
    reset = client.get_next_available_stream_id()
    client.send_headers(reset, _HEADERS, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(reset, [(b":status", b"200")])
    server.send_data(reset, b"late", end_stream=True)
    late = server.data_to_send()
    client.reset_stream(reset)
    client.data_to_send()  # the RST_STREAM crosses the answer on the wire
    _exchange(client, server)  # opening a stream is when jh2 moves the closed ones into its record
    assert len(client.streams) <= 2
    assert len(getattr(client, "_closed_streams", ())) == http2.CLOSED_STREAMS_KEPT, _loud(
        "H2Connection._closed_streams is not sized by the MAX_CLOSED_STREAMS class attribute"
    )
    try:
        client.receive_data(late)
    except jh2.exceptions.ProtocolError as exc:
        raise AssertionError(_loud(f"a late answer to a reset stream broke the connection: {exc}")) from exc
    assert client.data_to_send()  # the RST_STREAM refusing it


def test_the_open_stream_check_reads_the_clients_count_and_closed_streams_are_still_culled():
    client, server = _client_and_server()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    head = [(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/p"), (b":authority", b"example.test")]
    client.counted = lambda: 1 << 30  # more open streams than any peer allows
    try:
        client.send_headers(client.get_next_available_stream_id(), head, end_stream=True)
    except jh2.exceptions.TooManyStreamsError:
        return
    raise AssertionError(_loud("send_headers no longer checks open_outbound_streams against the peer's limit"))


def test_closed_streams_are_culled_though_the_count_is_the_clients():
    client, server = _client_and_server()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    head = [(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/p"), (b":authority", b"example.test")]
    open_now: set[int] = set()
    client.counted = open_now.__len__
    for _ in range(300):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, head, end_stream=True)
        open_now.add(stream_id)
        server.receive_data(client.data_to_send())
        server.send_headers(stream_id, [(b":status", b"200")], end_stream=True)
        for event in client.receive_data(server.data_to_send()):
            if isinstance(event, jh2.events.StreamEnded):
                open_now.discard(event.stream_id)
    assert not open_now
    assert len(client.streams) <= 64, _loud(f"{len(client.streams)} closed streams kept: _open_streams no longer culls")
