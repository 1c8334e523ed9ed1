"""The emulator's request header blocks decoded by their shape (notee/emulator/h2blocks.py
``HeadShape``, issue 35): a block of indexed fields and literals that are not indexed (Notee's
APNs sender: the device's path and the apns-id change per request) is matched against the shapes
kept while the HPACK table stays, and must decode to what the decoder reads; its scope is the one
built header by header (notee/emulator/peer.py ``ScopeShape``); an APNs 200's block is the one
built field by field."""

from __future__ import annotations

from typing import Any

import pytest

from notee.emulator import h2blocks
from notee.emulator.front import FrontServer
from notee.emulator.h2blocks import HeadCache, head_shape, response_block
from notee.emulator.peer import PeerConnection, PeerServer
from notee.providers.http2_wire import HeaderDecoder, HeaderEncoder

TOPIC = [(b"apns-topic", b"com.example.app"), (b"apns-push-type", b"alert"), (b"authorization", b"bearer j.w.t")]


def _apns(i: int, *, path: bytes | None = None) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"https"),
        (b":authority", b"localhost:1"),
        (b":path", path or b"/3/device/%064x" % i),
        *TOPIC,
        (b"apns-id", b"%08x-0000-4000-8000-000000000000" % i),
    ]


def _plain(headers: Any) -> list[tuple[bytes, bytes]]:
    return [(h[0], h[1]) for h in headers]


def _counted(cache: HeadCache) -> list[bytes]:
    seen: list[bytes] = []
    real = cache.decoder.decode

    def decode(block: bytes) -> Any:
        seen.append(block)
        return real(block)

    cache.decoder.decode = decode  # type: ignore[method-assign]
    return seen


def test_blocks_of_one_shape_decode_to_what_the_decoder_reads_once_the_first_is_decoded() -> None:
    encoder, reference, cache = HeaderEncoder(per_request=(b":path", b"apns-id")), HeaderDecoder(), HeadCache()
    seen = _counted(cache)
    for i in range(40):
        block = encoder.encode(_apns(i))
        assert cache.decode(block) == _plain(reference.decode(block)) == _apns(i)
    # the first two enter headers into the table; the third and fourth (its length a second time)
    # make a shape; from the fifth on, no decoding
    assert len(seen) == 4
    assert cache.shaped is not None and cache.shaped[1] == (
        b"/3/device/%064x" % 39,
        b"%08x-0000-4000-8000-000000000000" % 39,
    )


def test_a_value_of_another_length_or_in_huffman_is_another_shape() -> None:
    cache, reference = HeadCache(), HeaderDecoder()
    seen = _counted(cache)

    def block(path: bytes) -> bytes:  # :method POST, :path as a literal without indexing (raw)
        return b"\x83\x04" + bytes([len(path)]) + path

    for path in (b"/3/device/aa", b"/3/device/bb", b"/3/device/abc", b"/3/device/cc"):
        assert (
            cache.decode(block(path))
            == _plain(reference.decode(block(path)))
            == [(b":method", b"POST"), (b":path", path)]
        )
    assert len(seen) == 3  # /aa, /bb (its length again: a shape), /abc (another length); /cc matched
    # a value in Huffman stays in the fixed bytes: a block of such values only has nothing to cut
    # :method POST, then :authority never indexed, "www.example.com" in Huffman (RFC 7541 C.4.1)
    huffman = b"\x83\x11\x8c" + bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")
    assert head_shape(huffman, _plain(reference.decode(huffman))) is None
    assert cache.decode(huffman) == [(b":method", b"POST"), (b":authority", b"www.example.com")]


def test_a_shape_is_forgotten_once_a_block_may_have_changed_the_table() -> None:
    encoder = HeaderEncoder(per_request=(b":path", b"apns-id"))
    reference, cache = HeaderDecoder(), HeadCache()
    blocks = [encoder.encode(_apns(i)) for i in range(4)]
    for block in blocks:
        assert cache.decode(block) == _plain(reference.decode(block))
    assert cache.shapes
    # a header seen twice enters the table and moves every dynamic index: the old bytes mean other headers
    for extra in (encoder.encode([(b"x-new", b"1")]), encoder.encode([(b"x-new", b"1")])):
        cache.decode(extra)
        reference.decode(extra)
    assert cache.decode(blocks[3]) == _plain(reference.decode(blocks[3])) != _apns(3)


@pytest.mark.parametrize("server", ["apns", "front"])
def test_a_shaped_scope_is_the_scope_built_header_by_header(server: str) -> None:
    peer = PeerServer(None) if server == "apns" else FrontServer(None, 100, "/nowhere.sock", lambda: 0.0)
    conn = peer.connection()
    assert isinstance(conn, PeerConnection)
    conn.client = ("127.0.0.1", 1)
    encoder = HeaderEncoder(per_request=(b":path", b"apns-id", b"x-twice"))
    for i in range(6):
        headers = [*_apns(i, path=b"/3/device/%064x?q=%d" % (i, i)), (b"x-twice", b"a%d" % i), (b"x-twice", b"b%d" % i)]
        got = conn.heads.decode(encoder.encode(headers))
        assert got == headers
        built = conn.scope(got)
        if conn.heads.shaped is not None:
            assert conn.shaped_scope(conn.heads.shaped) == built
    assert conn.heads.shaped is not None  # the later blocks went through their shape


def test_an_apns_answer_block_is_the_one_built_field_by_field() -> None:
    for status in (200, 400, 410, 429):
        headers = [(b"apns-id", b"a" * 36)]
        assert response_block(status, headers) == h2blocks._block(status, headers)


def test_a_client_whose_literals_change_length_every_time_gets_no_shapes() -> None:
    cache, reference = HeadCache(), HeaderDecoder()
    for n in range(1, 60):
        block = b"\x83\x04" + bytes([n]) + b"/" * n
        assert cache.decode(block) == _plain(reference.decode(block))
    assert not cache.shapes and cache.made == 0  # no pattern compiled for blocks never seen again


def test_a_connection_whose_shapes_are_not_matched_again_gets_no_more() -> None:
    cache = HeadCache()
    for i in range(200):  # the same length, other fixed bytes each time (an indexed field that moves)
        cache.decode(b"\x83\x04\x02/a" + bytes([0x80 | (2 + i % 60)]) * (1 + i // 60 % 2))
    assert cache.made == 32 and cache.hits < 32 * 8
