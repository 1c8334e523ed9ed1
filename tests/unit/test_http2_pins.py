"""jh2 is pinned to an exact version because notee/providers/http2_wire.py uses two of its parts that are
not its documented API: the native (Rust) HPACK decoder ``jh2._hazmat.Decoder``, which decodes the
servers' response header blocks, and the HPACK static table ``jh2.hpack.table.HeaderTable.STATIC_TABLE``,
which the request encoder (``HeaderEncoder``) indexes. The framing itself is Notee's own since issue
19 (jh2's ``H2Connection`` is no longer used: the pins of its internals -- the GOAWAY handler, the
replaced ``local_settings``, ``MAX_CLOSED_STREAMS``, ``open_outbound_streams`` -- gave way to tests of
the behaviour they bought, against plain-``h2`` servers: tests/unit/test_http2_framing.py (first SETTINGS
carry ours, constant headers indexed, late answers after a reset dropped, nothing kept per closed
stream) and tests/integration/test_http2_peer.py (answers after GOAWAY, stream limits)).

These tests fail loudly, naming the version and the internal concerned, when the installed version
differs from the pin or when one of those internals stops working as relied on. After an upgrade:
check each internal below against the new release, then move the pin. The encoder's blocks are
checked here against ``hpack``, the HPACK codec of plain ``h2``.
"""

from __future__ import annotations

import logging
import re
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import pytest

from notee.providers import http2_wire

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
PINNED = ("jh2",)
INTERNALS = (
    "jh2._hazmat.Decoder is jh2's native HPACK decoder: decode(bytes) returns (name, value, sensitive) "
    "tuples of bytes and raises on a malformed block; jh2.hpack.table.HeaderTable.STATIC_TABLE is RFC 7541's "
    "static table"
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
        f"notee/providers/http2_wire.py relies on jh2 internals ({INTERNALS}). {what}. "
        f"Installed: {installed}; pinned in pyproject.toml: {_pins()}. Check http2_wire.HeaderDecoder and http2_wire.HeaderEncoder against "
        "the new release before changing the pins."
    )


def _h2_codec() -> tuple[Any, Any]:
    """The HPACK encoder and decoder of plain ``h2`` (the ``hpack`` package)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    return conn.encoder, conn.decoder


def test_jh2_is_pinned_exactly_to_the_installed_version() -> None:
    pins = _pins()
    assert set(pins) == set(PINNED), _loud("pyproject.toml must pin jh2 with ==")
    for name, pinned in pins.items():
        assert version(name) == pinned, _loud(f"{name} {version(name)} is installed, not the pinned {pinned}")


def test_the_response_decoder_is_jh2s_native_one_and_reads_huffman_coded_blocks() -> None:
    decoder = http2_wire.HeaderDecoder()
    module = type(decoder._decoder).__module__
    assert module == "jh2._hazmat", _loud(f"the decoder comes from {module}, not jh2's native codec")
    server, _ = _h2_codec()  # what h2 sends: Huffman-coded, indexed
    headers = [(b":status", b"200"), (b"content-type", b"application/json"), (b"apns-id", b"a-b-c")]
    for _ in range(3):
        got = decoder.decode(server.encode(headers, huffman=True))
        assert [(n, v) for n, v, _ in got] == headers, _loud(f"decoded {got}")


@pytest.mark.parametrize("block", [b"\xff\xff", b"\x82\x7f", b"\x40\x85abc"])
def test_a_malformed_header_block_is_a_compression_error_not_a_crash(block: bytes) -> None:
    # the native decoder panics (pyo3's PanicException, a BaseException) on some of these
    with pytest.raises(http2_wire.ProtocolError) as err:
        http2_wire.HeaderDecoder().decode(block)
    assert err.value.code == http2_wire.COMPRESSION_ERROR, _loud(f"{block!r} gave {err.value!r}")


def test_the_static_table_is_rfc_7541s() -> None:
    _, decoder = _h2_codec()
    hpack_static = type(decoder.header_table).STATIC_TABLE
    assert hpack_static == http2_wire.STATIC_TABLE, _loud("jh2's STATIC_TABLE differs from hpack's")
    assert len(http2_wire.STATIC_TABLE) == 61 and http2_wire.STATIC_TABLE[1] == (b":method", b"GET")


def test_header_blocks_index_the_constant_authorization_header() -> None:
    # a long bearer is sent in full on the connection's first two requests (the second adds it to
    # the dynamic table), then as an index: what keeps the per-request header cost flat
    encoder, decoder = http2_wire.HeaderEncoder(), _h2_codec()[1]
    secret = b"Bearer indexed-" + b"x" * 200
    sizes = []
    for i in range(4):
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":path", f"/p/{i}".encode()),
            (b"authorization", secret),
        ]
        block = encoder.encode(headers)
        sizes.append(len(block))
        assert decoder.decode(block, raw=True) == headers
    assert sizes[2] < 20 < 150 < min(sizes[:2]) and sizes[3] == sizes[2], sizes


def test_the_dynamic_table_follows_evictions_and_size_changes() -> None:
    """Thousands of blocks whose repeated headers overflow the 4,096-byte table (evictions), then the
    server's SETTINGS_HEADER_TABLE_SIZE lowered to 200 and to 0 and raised again: h2's decoder,
    which checks every index and every size update, reads every block back exactly."""
    encoder, decoder = http2_wire.HeaderEncoder(), _h2_codec()[1]
    for i in range(3000):
        if i == 1000:
            encoder.set_peer_table_size(200)
            decoder.max_allowed_table_size = 200
        elif i == 1500:
            encoder.set_peer_table_size(0)
            decoder.max_allowed_table_size = 0
        elif i == 2000:
            encoder.set_peer_table_size(8192)
            decoder.max_allowed_table_size = 8192
        headers = [
            (b":method", b"POST"),
            (b":path", f"/3/device/{i % 7}".encode()),
            (b"authorization", b"bearer " + bytes([97 + i // 500]) * 300),
            (b"apns-expiration", str(i // 10).encode()),
            (b"x-rotating", str(i % 40).encode() * 20),
            (b"apns-id", str(i).encode()),
        ]
        assert decoder.decode(encoder.encode(headers), raw=True) == headers, i
        assert encoder.table_size <= min(decoder.max_allowed_table_size, 4096)


def test_a_repeated_request_reuses_its_block_only_while_that_is_exact() -> None:
    """``encode_request``: runs of identical requests (a fan-out page to FCM) between requests that
    change the table (new headers, evictions) and the server's table size changing: h2's decoder
    reads every block back exactly, and a steady run reuses the very same bytes."""
    encoder, decoder = http2_wire.HeaderEncoder(), _h2_codec()[1]
    blocks: list[bytes] = []
    for i in range(2000):
        if i == 700:
            encoder.set_peer_table_size(300)
            decoder.max_allowed_table_size = 300
        elif i == 1400:
            encoder.set_peer_table_size(4096)
            decoder.max_allowed_table_size = 4096
        path = b"/v1/projects/p/messages:send" if i % 50 else f"/other/{i}".encode()
        rest = [(b"authorization", b"Bearer " + bytes([97 + i // 300]) * 120), (b"x-page", str(i // 25).encode())]
        block = encoder.encode_request(b"POST", path, b"fcm.example", rest)
        blocks.append(block)
        expected = [(b":method", b"POST"), (b":scheme", b"https"), (b":path", path), (b":authority", b"fcm.example")]
        assert decoder.decode(block, raw=True) == [*expected, *rest], i
    assert blocks[10] is blocks[11], "a steady run of one request is encoded once"


def test_per_request_headers_are_literals_around_a_reused_template() -> None:
    """APNs' encoder (``per_request``: ``:path`` and ``apns-id``): every block, across evictions and
    the server's table size changing, reads back through h2's decoder as the request's headers
    (pseudo-headers first), the per-request values never enter the table, and a steady run of a
    page's requests reuses the same fixed part (only the literals differ)."""
    encoder, decoder = http2_wire.HeaderEncoder((b":path", b"apns-id")), _h2_codec()[1]
    sizes = []
    for i in range(3000):
        if i == 1000:
            encoder.set_peer_table_size(200)
            decoder.max_allowed_table_size = 200
        elif i == 1500:
            encoder.set_peer_table_size(0)
            decoder.max_allowed_table_size = 0
        elif i == 2000:
            encoder.set_peer_table_size(4096)
            decoder.max_allowed_table_size = 4096
        path = f"/3/device/{i:064x}".encode()
        rest = [
            (b"authorization", b"bearer " + bytes([97 + i // 300]) * 200),
            (b"apns-id", f"id-{i}".encode()),
            (b"apns-expiration", str(i // 50).encode()),
        ]
        block = encoder.encode_request(b"POST", path, b"api.push.apple.com", rest)
        got = decoder.decode(block, raw=True)
        pseudo = [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", b"api.push.apple.com"),
            (b":path", path),
        ]
        assert got[:4] == pseudo, i
        assert sorted(got[4:]) == sorted(rest), i
        assert not any(name in (b":path", b"apns-id") for name, _ in decoder.header_table.dynamic_entries), i
        sizes.append(len(block))
    # steady: the bearer and expiration are indexes, the path and id literals of fixed length
    assert sizes[2998] == sizes[2999] < 120, sizes[-5:]


def test_hpack_debug_logging_of_header_values_stays_off() -> None:
    # the pure-Python hpack codecs (jh2's fallback; the emulator's h2) log each header block at
    # DEBUG under their hpack module loggers; http2_wire.py raises both to INFO so bearer tokens never
    # reach a log even when the root logs DEBUG.
    for name in ("jh2.hpack.hpack", "hpack.hpack"):
        assert not logging.getLogger(name).isEnabledFor(logging.DEBUG), name
