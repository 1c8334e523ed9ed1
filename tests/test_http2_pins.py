"""h2, hpack and hyperframe are pinned to exact versions because notee/providers/http2.py reaches
past h2's documented API (``new_h2_connection``): it replaces the connection's own HPACK ``encoder``
with one that never Huffman-codes, wraps the GOAWAY handler in its private ``_frame_dispatch_table``
(keyed by hyperframe's frame classes) to keep its ``state_machine`` open after a GOAWAY, and
replaces ``local_settings`` before ``initiate_connection``.

These tests fail loudly, naming the versions and the internal concerned, when the installed
versions differ from the pins or when one of those internals stops working as relied on. After an
upgrade: check each internal below against the new release, then move both pins together.
"""

from __future__ import annotations

import inspect
import logging
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
from hyperframe.frame import GoAwayFrame

from notee.providers import http2

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
PINNED = ("h2", "hpack", "hyperframe")
INTERNALS = (
    "H2Connection.encoder is a plain hpack.Encoder, replaced per connection, and its encode(headers, "
    "huffman=...) is what h2 calls for every header block; H2Connection._frame_dispatch_table[GoAwayFrame] "
    "handles GOAWAY and H2Connection.state_machine.state can be set back to CLIENT_OPEN after it; "
    "H2Connection.local_settings, replaced before initiate_connection(), is what the first SETTINGS frame sends"
)


def _pins() -> dict[str, str]:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pins = {}
    for dep in deps:
        m = re.fullmatch(r"(h2|hpack|hyperframe)==([\w.]+)", dep)
        if m:
            pins[m[1]] = m[2]
    return pins


def _loud(what: str) -> str:
    installed = ", ".join(f"{name} {version(name)}" for name in PINNED)
    return (
        f"notee/providers/http2.py relies on h2/hpack/hyperframe internals ({INTERNALS}). {what}. "
        f"Installed: {installed}; pinned in pyproject.toml: {_pins()}. Check new_h2_connection() against "
        "the new release before changing the pins."
    )


def _client_and_server() -> tuple[h2.connection.H2Connection, h2.connection.H2Connection]:
    client = http2.new_h2_connection()
    client.initiate_connection()
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    return client, server


def test_h2_hpack_hyperframe_are_pinned_exactly_to_the_installed_versions():
    pins = _pins()
    assert set(pins) == set(PINNED), _loud("pyproject.toml must pin h2, hpack and hyperframe with ==")
    for name, pinned in pins.items():
        assert version(name) == pinned, _loud(f"{name} {version(name)} is installed, not the pinned {pinned}")


def test_the_connection_encoder_is_a_replaceable_hpack_encoder():
    fresh = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    assert type(getattr(fresh, "encoder", None)) is hpack.Encoder, _loud(
        "H2Connection no longer keeps a plain hpack.Encoder in .encoder"
    )
    assert "huffman" in inspect.signature(hpack.Encoder.encode).parameters, _loud(
        "hpack.Encoder.encode has no 'huffman' parameter any more"
    )
    assert isinstance(http2.new_h2_connection().encoder, hpack.Encoder)


def test_header_blocks_are_sent_without_huffman_coding():
    client, server = _client_and_server()
    server.receive_data(client.data_to_send())
    secret = b"Bearer plain-literal-" + b"x" * 40
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
    # Huffman coding would have turned the value into other bytes: the replaced encoder was not used.
    assert secret in wire, _loud("h2 no longer encodes header blocks with the connection's .encoder")
    events = server.receive_data(wire)
    received = next(e for e in events if isinstance(e, h2.events.RequestReceived))
    assert (b"authorization", secret) in received.headers


def test_responses_after_goaway_are_still_accepted():
    fresh = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    table = getattr(fresh, "_frame_dispatch_table", None)
    assert isinstance(table, dict) and GoAwayFrame in table, _loud(
        "H2Connection has no _frame_dispatch_table keyed by hyperframe's GoAwayFrame"
    )
    assert fresh.state_machine.state == h2.connection.ConnectionState.IDLE, _loud("no state_machine.state")
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
    # on the wire: GOAWAY, then the answer to a stream it covers (unwrapped, h2 raises ProtocolError)
    try:
        events = client.receive_data(server.data_to_send() + answer)
    except h2.exceptions.ProtocolError as exc:
        raise AssertionError(_loud(f"a response after GOAWAY was refused: {exc}")) from exc
    kinds = [type(e) for e in events]
    assert h2.events.ConnectionTerminated in kinds and h2.events.ResponseReceived in kinds, _loud(
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
    # hpack logs each encoded header block at DEBUG under its module logger; http2.py raises the
    # "hpack" logger to INFO so bearer tokens never reach a log even when the root logs DEBUG.
    logger = logging.getLogger(hpack.hpack.log.name)
    assert logger.name.startswith("hpack"), _loud(f"hpack now logs as {logger.name!r}, outside 'hpack'")
    assert not logger.isEnabledFor(logging.DEBUG)
