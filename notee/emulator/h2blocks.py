"""HPACK for the emulator's own HTTP/2 server (``notee.emulator.h2server``): the answers' header
blocks, which never touch the dynamic table (``:status`` from the static table when it is there,
every other header a literal without indexing, RFC 7541 §6.2.2), and the requests' blocks that
leave the table alone, decoded once per connection and table (``HeadCache``): a block of indexed
fields by its bytes, a block with literals by its shape (``HeadShape``); and the two small frames
the server writes besides answers (SETTINGS' payload, WINDOW_UPDATE).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

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
_APNS_ID_NAME = b"\x00" + _string(b"apns-id")  # not in the static table (RFC 7541 Appendix A)
_FIXED: dict[tuple[bytes, bytes], bytes] = {}  # representations of headers that repeat (content-type)
_JSON_BLOCKS: dict[int, bytes] = {}  # status -> the block of status + JSON_HEADERS (the list itself)


def response_block(status: int, headers: Headers) -> bytes:
    """A response's header block: ``:status`` then ``headers``, touching no dynamic table; the
    block of ``JSON_HEADERS`` itself (the common answers) is built once per status, and an answer
    of only an apns-id (APNs' 200) from its kept parts."""
    if headers is JSON_HEADERS:
        block = _JSON_BLOCKS.get(status)
        if block is None:
            block = _JSON_BLOCKS[status] = _block(status, headers)
        return block
    if len(headers) == 1 and headers[0][0] == b"apns-id" and len(value := headers[0][1]) < 127:
        status_part = _STATUS_INDEX.get(status)
        if status_part is not None:
            return b"".join((status_part, _APNS_ID_NAME, _LENGTHS[len(value)], value))
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


@dataclass(frozen=True, slots=True)
class HeadShape:
    """A header block of indexed fields and literals that are not indexed (RFC 7541 §6.1, §6.2.2,
    §6.2.3), with the literals' raw (not Huffman) values cut out: every block of the same bytes
    around values of the same lengths decodes, while the table stays, to the first one's headers
    with its own values (the field kinds and lengths are in the fixed bytes, so it is parsed the
    same way). ``match(block)``: the values, in order; ``slots``: which header each one is."""

    match: Callable[[bytes], re.Match[bytes] | None]
    headers: Headers
    slots: tuple[int, ...]

    def fill(self, values: tuple[bytes, ...]) -> Headers:
        headers = self.headers.copy()
        for at, value in zip(self.slots, values, strict=True):
            headers[at] = (headers[at][0], value)
        return headers


def _int(block: bytes, pos: int, bits: int) -> tuple[int, int]:
    """An HPACK integer with a ``bits``-bit prefix at ``pos`` (RFC 7541 §5.1), and where it ends;
    IndexError when the block ends inside it."""
    mask = (1 << bits) - 1
    value = block[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        octet = block[pos]
        pos += 1
        value += (octet & 0x7F) << shift
        shift += 7
        if not octet & 0x80:
            return value, pos


def head_shape(block: bytes, headers: Headers) -> HeadShape | None:
    """The shape of ``block`` (decoded: ``headers``) when it leaves the table alone and has raw
    literal values to cut; None otherwise (a field that adds to the table or resizes it, a value in
    Huffman, no literal)."""
    parts: list[bytes] = []
    slots: list[int] = []
    pos = fixed = fields = 0
    try:
        while pos < len(block):
            first = block[pos]
            if first & 0x80:  # indexed
                pos = _int(block, pos, 7)[1]
            elif first < 0x20:  # a literal without indexing or never indexed
                index, pos = _int(block, pos, 4)
                if not index:  # its name as a string: fixed bytes
                    length, pos = _int(block, pos, 7)
                    pos += length
                if block[pos] & 0x80:  # a value in Huffman: each request's may code differently
                    return None
                length, pos = _int(block, pos, 7)
                if length:
                    parts += (re.escape(block[fixed:pos]), b"(.{%d})" % length)
                    slots.append(fields)
                    fixed = pos + length
                pos += length
            else:
                return None
            fields += 1
    except IndexError:
        return None
    if pos != len(block) or fields != len(headers) or not slots:
        return None
    match = re.compile(b"".join((*parts, re.escape(block[fixed:]))), re.DOTALL).fullmatch
    found = match(block)
    if found is None or found.groups() != tuple(headers[at][1] for at in slots):
        return None  # not what the decoder read: this block alone
    return HeadShape(match, headers, tuple(slots))


Shaped = tuple[HeadShape, tuple[bytes, ...]]  # a block matched by a shape: the shape, the block's values


class HeadCache:
    """A connection's request header blocks decoded, by their bytes or their shape. A block made
    only of indexed fields neither reads nor changes anything but the table, so the same bytes
    decode to the same headers until a block that is not such a block (a literal, a table size
    update) may have changed the table: then every kept block is forgotten. A client that sends
    the same request head again (Notee's FCM sender: one block for every request of a connection)
    is decoded once. A block with literals that are not indexed (Notee's APNs sender: the device's
    path and the apns-id) changes nothing either: it is matched against the kept shapes of its
    length (``HeadShape``), so only the first blocks of a shape go through the decoder. A shape is
    made (a pattern compiled: ~0.1 ms) only once a second block of its length missed, so a client
    whose literals change length on every request costs what it did without shapes."""

    KEPT = 64
    SHAPES = 16  # per block length
    LENGTHS = 64  # block lengths with shapes or misses kept

    def __init__(self) -> None:
        self.decoder = HeaderDecoder()
        self.heads: dict[bytes, Headers] = {}
        self.shapes: dict[int, list[HeadShape]] = {}  # block length -> its shapes, the last matched first
        self.missed: dict[int, int] = {}  # block length -> blocks of it decoded since its last shape was made
        self.shaped: Shaped | None = None  # how the block decode() returned last was matched, if by a shape
        self.made = self.hits = 0  # shapes made, blocks matched by one

    def decode(self, block: bytes) -> Headers:
        """The block's headers; ``shaped`` says whether a kept shape gave them, and with what values."""
        self.shaped = None
        heads = self.heads
        headers = heads.get(block)
        if headers is not None:
            return headers
        size = len(block)
        shapes = self.shapes.get(size)
        if shapes is not None:
            for at, shape in enumerate(shapes):
                found = shape.match(block)
                if found is not None:
                    if at:
                        shapes.insert(0, shapes.pop(at))
                    values = found.groups()
                    self.shaped = (shape, values)
                    self.hits += 1
                    return shape.fill(values)
        headers = [(h[0], h[1]) for h in self.decoder.decode(block)]
        if len(block.translate(None, _NOT_INDEXED)) == size:  # indexed fields only
            if len(heads) >= self.KEPT:
                heads.clear()
            heads[block] = headers
        elif (self.heads or self.shapes) and not _table_kept(block):  # walked only when something is kept
            self.forget()
        else:
            self._note(block, headers)
        return headers

    def _note(self, block: bytes, headers: Headers) -> None:
        """A block decoded that changed nothing kept: a shape of it once its length missed twice
        (``head_shape`` says whether it leaves the table alone). A connection whose shapes are
        rarely matched again gets no more of them."""
        size = len(block)
        missed = self.missed.get(size, 0) + 1
        if missed < 2:
            if len(self.missed) >= self.LENGTHS:
                self.missed.clear()
            self.missed[size] = missed
            return
        self.missed[size] = 0
        if self.made >= 32 and self.hits < self.made * 8:
            return
        shape = head_shape(block, headers)
        if shape is None:
            return
        self.made += 1
        if len(self.shapes) >= self.LENGTHS and size not in self.shapes:
            self.shapes.clear()
        shapes = self.shapes.setdefault(size, [])
        del shapes[self.SHAPES - 1 :]
        shapes.insert(0, shape)

    def forget(self) -> None:
        """The table may have changed: every kept block and shape is forgotten."""
        self.heads.clear()
        self.shapes.clear()

    def kept(self, headers: Headers) -> bool:
        """Whether ``headers`` is a list this cache gives again for the same block."""
        return bool(self.heads) and any(h is headers for h in self.heads.values())

    def follow(self, block: bytes) -> None:
        """A block whose headers are not wanted (trailers, a closed stream's): the table follows it."""
        self.decoder.decode(block)
        if not _table_kept(block):
            self.forget()


def _table_kept(block: bytes) -> bool:
    """Whether ``block`` is made only of fields that leave the dynamic table as it is: indexed
    fields and literals without indexing or never indexed (no literal entering the table, no size
    update). Walked field by field, values skipped."""
    pos, size = 0, len(block)
    try:
        while pos < size:
            first = block[pos]
            if first & 0x80:
                pos = _int(block, pos, 7)[1]
            elif first < 0x20:
                index, pos = _int(block, pos, 4)
                if not index:
                    length, pos = _int(block, pos, 7)
                    pos += length
                length, pos = _int(block, pos, 7)
                pos += length
            else:
                return False
    except IndexError:
        return False
    return pos == size


def settings_payload(values: dict[int, int]) -> bytes:
    return b"".join(SETTING.pack(code, value) for code, value in values.items())


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, U32.pack(increment))
