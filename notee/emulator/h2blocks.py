"""HPACK for the emulator's own HTTP/2 server (``notee.emulator.h2server``): the answers' header
blocks, which never touch the dynamic table (``:status`` from the static table when it is there,
every other header a literal without indexing, RFC 7541 §6.2.2), and the requests' blocks made only
of indexed fields, decoded once per connection and table (``HeadCache``); and the two small frames
the server writes besides answers (SETTINGS' payload, WINDOW_UPDATE).
"""

from __future__ import annotations

from notee.providers.http2_wire import SETTING, STATIC_TABLE, U32, WINDOW_UPDATE, HeaderDecoder, frame, hpack_int

Headers = list[tuple[bytes, bytes]]

_STATUS_INDEX = {
    int(value): hpack_int(i, 7, 0x80) for i, (name, value) in enumerate(STATIC_TABLE, 1) if name == b":status"
}
_STATIC_NAMES: dict[bytes, int] = {}
for _i, (_name, _value) in enumerate(STATIC_TABLE, 1):
    _STATIC_NAMES.setdefault(_name, _i)
# the bytes of an indexed field's first octet (RFC 7541 §6.1), index 0 (an error) excepted
_NOT_INDEXED = bytes(range(0x81))


_LENGTHS = [hpack_int(n, 7, 0) for n in range(127)]  # a string's length prefix, when one octet holds it
_NAMES: dict[bytes, bytes] = {}  # a literal's name part, by name (apns-id: one per answer)


def _string(s: bytes) -> bytes:
    n = len(s)
    return (_LENGTHS[n] if n < 127 else hpack_int(n, 7, 0)) + s  # raw octets, no Huffman


def _literal(name: bytes, value: bytes) -> bytes:
    """A literal header field without indexing (RFC 7541 §6.2.2)."""
    head = _NAMES.get(name)
    if head is None:
        index = _STATIC_NAMES.get(name)
        head = hpack_int(index, 4, 0) if index else b"\x00" + _string(name)
        if len(_NAMES) < 64:
            _NAMES[name] = head
    return head + _string(value)


JSON_HEADERS = [(b"content-type", b"application/json; charset=UTF-8")]  # the personas' JSON answers' headers
_FIXED: dict[tuple[bytes, bytes], bytes] = {}  # representations of headers that repeat (content-type)
_JSON_BLOCKS: dict[int, bytes] = {}  # status -> the block of status + JSON_HEADERS (the list itself)


def response_block(status: int, headers: Headers) -> bytes:
    """A response's header block: ``:status`` then ``headers``, touching no dynamic table; the
    block of ``JSON_HEADERS`` itself (the common answers) is built once per status."""
    if headers is JSON_HEADERS:
        block = _JSON_BLOCKS.get(status)
        if block is None:
            block = _JSON_BLOCKS[status] = _block(status, headers)
        return block
    return _block(status, headers)


def _block(status: int, headers: Headers) -> bytes:
    parts = [_STATUS_INDEX.get(status) or _literal(b":status", str(status).encode())]
    for header in headers:
        rep = _FIXED.get(header)
        if rep is None:
            rep = _literal(*header)
            if header[0] != b"apns-id" and len(_FIXED) < 64:
                _FIXED[header] = rep
        parts.append(rep)
    return b"".join(parts)


class HeadCache:
    """A connection's request header blocks decoded, by their bytes. A block made only of indexed
    fields neither reads nor changes anything but the table, so the same bytes decode to the same
    headers until a block that is not such a block (a literal, a table size update) may have changed
    the table: then every kept block is forgotten. A client that sends the same request head again
    (Notee's FCM sender: one block for every request of a connection) is decoded once."""

    KEPT = 64

    def __init__(self) -> None:
        self.decoder = HeaderDecoder()
        self.heads: dict[bytes, Headers] = {}

    def decode(self, block: bytes) -> Headers:
        heads = self.heads
        headers = heads.get(block)
        if headers is not None:
            return headers
        headers = [(h[0], h[1]) for h in self.decoder.decode(block)]
        if len(block.translate(None, _NOT_INDEXED)) == len(block):  # indexed fields only
            if len(heads) >= self.KEPT:
                heads.clear()
            heads[block] = headers
        elif heads:
            heads.clear()
        return headers

    def kept(self, headers: Headers) -> bool:
        """Whether ``headers`` is a list this cache gives again for the same block."""
        return any(h is headers for h in self.heads.values())

    def follow(self, block: bytes) -> None:
        """A block whose headers are not wanted (trailers, a closed stream's): the table follows it."""
        self.decoder.decode(block)
        if len(block.translate(None, _NOT_INDEXED)) != len(block):
            self.heads.clear()


def settings_payload(values: dict[int, int]) -> bytes:
    return b"".join(SETTING.pack(code, value) for code, value in values.items())


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, U32.pack(increment))
