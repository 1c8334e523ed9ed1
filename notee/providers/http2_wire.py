"""HTTP/2 on the wire, as Notee's client (notee.providers.http2) speaks it: the frame layout, types,
flags, error codes and settings of RFC 9113, the connection preface, and HPACK (RFC 7541): request
header blocks encoded by ``HeaderEncoder`` (no Huffman, constant headers indexed once per
connection), response header blocks decoded by jh2's native decoder (``jh2._hazmat``, pinned:
tests/unit/test_http2_pins.py). The connection imports these names into its own module, so a frame
costs the same lookups as when they were defined beside it.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Sequence

from jh2._hazmat import Decoder as _NativeHpackDecoder
from jh2.hpack.table import HeaderTable

# hpack codecs in Python (the emulator's h2) log every header at DEBUG, bearer tokens and JWTs
# included: never let them.
logging.getLogger("jh2.hpack").setLevel(logging.INFO)
logging.getLogger("hpack").setLevel(logging.INFO)

# ------------------------------------------------------------------------------ HTTP/2 framing (RFC 9113)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = (
    0x0,
    0x1,
    0x3,
    0x6,
    0x7,
    0x8,
    0x9,
)
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 1, 2, 3, 4, 5
MAX_WINDOW = 2**31 - 1
MAX_STREAM_ID = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_FRAME_SIZE = 16_384  # what we accept (we never raise SETTINGS_MAX_FRAME_SIZE) and send until told more
MAX_HEADER_BLOCK = 1 << 20  # a response header block (HEADERS + CONTINUATION) larger than this fails the connection
# What we advertise: responses are small, so generous windows mean a WINDOW_UPDATE only every few
# thousand responses (sent once half a window is used).
LOCAL_STREAM_WINDOW = 1 << 20
LOCAL_CONNECTION_WINDOW = DEFAULT_WINDOW + (1 << 24)
LOCAL_SETTINGS = ((ENABLE_PUSH, 0), (INITIAL_WINDOW_SIZE, LOCAL_STREAM_WINDOW), (MAX_CONCURRENT_STREAMS, 100))

FRAME_HEAD = struct.Struct(">IBI")  # (length << 8 | type), flags, stream id: the 9-byte frame header
U32 = struct.Struct(">I")
SETTING = struct.Struct(">HI")
GOAWAY_PAYLOAD = struct.Struct(">II")


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return FRAME_HEAD.pack(len(payload) << 8 | kind, flags, stream_id) + payload


def client_preface() -> bytes:
    """The connection preface, our SETTINGS and the connection window raised to LOCAL_CONNECTION_WINDOW."""
    settings = b"".join(SETTING.pack(code, value) for code, value in LOCAL_SETTINGS)
    grow = U32.pack(LOCAL_CONNECTION_WINDOW - DEFAULT_WINDOW)
    return PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, grow)


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


class ProtocolError(Exception):
    """The peer broke HTTP/2: the connection ends with GOAWAY ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------------- HPACK (RFC 7541)
STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = HeaderTable.STATIC_TABLE
_STATIC_PAIRS: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAMES: dict[bytes, int] = {}
for _i, (_name, _value) in enumerate(STATIC_TABLE, 1):
    _STATIC_PAIRS.setdefault((_name, _value), _i)
    _STATIC_NAMES.setdefault(_name, _i)


def hpack_int(value: int, bits: int, flags: int) -> bytes:
    """An HPACK integer with a ``bits``-bit prefix, the prefix byte's other bits set to ``flags``."""
    limit = (1 << bits) - 1
    if value < limit:
        return bytes((flags | value,))
    out = bytearray((flags | limit,))
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_string(s: bytes) -> bytes:
    return hpack_int(len(s), 7, 0) + s  # raw octets: Huffman coding costs more CPU than the bytes it saves here


class HeaderEncoder:
    """HPACK for request header blocks. A header (name and value) seen a second time on the
    connection enters the dynamic table and is then sent as an index of one or two bytes: the
    bearer, content-type, the FCM path, APNs' topic... Values that change per request (an APNs
    device path, apns-id) are literals that never enter the table. The representation of each
    header is cached while the table does not change, so a steady-state block is a join of cached
    bytes. The table never exceeds the server's SETTINGS_HEADER_TABLE_SIZE (a change is signalled at
    the start of the next block, RFC 7541 §4.2)."""

    SEEN_KEPT = 512  # headers sighted once, remembered to index them on their second sighting

    def __init__(self, per_request: Sequence[bytes] = ()) -> None:
        """``per_request``: names whose value differs on every request (APNs' ``:path``, which holds
        the device token, and ``apns-id``): always sent as literals that never enter the table, so
        the rest of a request's block is the same bytes from one request to the next."""
        self._max = 4096  # RFC 7541's initial table size, until the server's SETTINGS say otherwise
        self._size = 0
        self._entries: deque[tuple[bytes, bytes]] = deque()  # the dynamic table, oldest first
        self._inserted = 0
        self._number: dict[tuple[bytes, bytes], int] = {}  # header -> its insertion number
        self._cached: dict[tuple[bytes, bytes], bytes] = {}  # header -> representation (table unchanged)
        self._seen: set[tuple[bytes, bytes]] = set()
        self._resized: list[int] = []
        # the last request's (pseudo-header values, headers, block) while that block changed nothing:
        # the same request again (every FCM request of a page) is the same bytes, not a new encoding
        self._memo: tuple[tuple[bytes, bytes, bytes], tuple[tuple[bytes, bytes], ...], bytes] | None = None
        # per_request name -> its literal's first bytes (without indexing, the name indexed when static)
        self._literal = {
            name: hpack_int(_STATIC_NAMES[name], 4, 0) if name in _STATIC_NAMES else b"\x00" + _hpack_string(name)
            for name in per_request
        }
        self._path_literal = self._literal.pop(b":path", None)
        # the last templated request's (method, authority, path or None, other headers) and its two
        # fixed parts (pseudo-headers, the other headers) while those changed nothing in the table
        self._template: tuple[tuple[object, ...], bytes, bytes] | None = None

    @property
    def table_size(self) -> int:
        return self._size

    def set_peer_table_size(self, size: int) -> None:
        """The server's SETTINGS_HEADER_TABLE_SIZE: our table is at most that (and at most 4096)."""
        new = min(size, 4096)
        if new != self._max:
            self._max = new
            self._resized.append(new)
            self._evict()

    def _evict(self) -> None:
        self._memo = self._template = None
        while self._size > self._max:
            header = self._entries.popleft()
            self._size -= len(header[0]) + len(header[1]) + 32
            del self._number[header]
            self._cached.pop(header, None)

    def encode_request(
        self, method: bytes, path: bytes, authority: bytes, headers: Sequence[tuple[bytes, bytes]]
    ) -> bytes:
        """A request's block: its pseudo-headers (``:scheme`` https), then ``headers``. A block made
        only of what the table already holds changes neither side's table, so the same request again
        is the same bytes (kept until the table changes)."""
        if self._literal or self._path_literal is not None:
            return self._encode_templated(method, path, authority, headers)
        memo, pseudo, rest = self._memo, (method, path, authority), tuple(headers)
        if memo is not None and memo[0] == pseudo and memo[1] == rest and not self._resized:
            return memo[2]
        steady = (self._inserted, len(self._seen), not self._resized)
        block = self.encode(
            [(b":method", method), (b":scheme", b"https"), (b":path", path), (b":authority", authority), *rest]
        )
        if steady == (self._inserted, len(self._seen), True):  # no insertion, no size update, nothing newly seen
            self._memo = (pseudo, rest, block)
        return block

    def _encode_templated(
        self, method: bytes, path: bytes, authority: bytes, headers: Sequence[tuple[bytes, bytes]]
    ) -> bytes:
        """``encode_request`` with the ``per_request`` headers as literals after the others (header
        order between different names carries no meaning, RFC 9110 §5.3), the rest reused as long
        as it and the table are unchanged: one APNs request differs from the next only there."""
        literal, fixed, tail = self._literal, [], []
        for header in headers:
            prefix = literal.get(header[0])
            if prefix is None:
                fixed.append(header)
            else:
                tail.append(prefix + _hpack_string(header[1]))
        path_literal = self._path_literal
        key = (method, authority, None if path_literal is not None else path, fixed)
        template = self._template
        if template is None or template[0] != key or self._resized:
            steady = (self._inserted, len(self._seen), not self._resized)
            pseudo = [(b":method", method), (b":scheme", b"https")]
            if path_literal is None:
                pseudo.append((b":path", path))
            head = self.encode([*pseudo, (b":authority", authority)])
            rest = self.encode(fixed)
            template = (key, head, rest)
            # kept only if the two blocks inserted nothing, resized nothing and sighted nothing new
            self._template = template if steady == (self._inserted, len(self._seen), True) else None
        if path_literal is not None:
            return b"".join((template[1], path_literal, _hpack_string(path), template[2], *tail))
        return b"".join((template[1], template[2], *tail))

    def encode(self, headers: Sequence[tuple[bytes, bytes]]) -> bytes:
        # whatever this block does to the table, the memos are not trusted past it
        self._memo = self._template = None
        out: list[bytes] = []
        if self._resized:  # the smallest size since the last block, then the current one
            smallest = min(self._resized)
            out.append(hpack_int(smallest, 5, 0x20))
            if self._max != smallest:
                out.append(hpack_int(self._max, 5, 0x20))
            self._resized.clear()
        cached = self._cached
        for header in headers:
            out.append(cached.get(header) or self._represent(header))
        return b"".join(out)

    def _represent(self, header: tuple[bytes, bytes]) -> bytes:
        static = _STATIC_PAIRS.get(header)
        if static is not None:
            rep = self._cached[header] = hpack_int(static, 7, 0x80)
            return rep
        number = self._number.get(header)
        if number is not None:
            rep = self._cached[header] = hpack_int(62 + self._inserted - number, 7, 0x80)
            return rep
        name, value = header
        name_index = _STATIC_NAMES.get(name, 0)
        size = len(name) + len(value) + 32
        if header in self._seen and size <= self._max:  # second sighting: literal with incremental indexing
            self._seen.discard(header)
            self._inserted += 1
            self._number[header] = self._inserted
            self._entries.append(header)
            self._size += size
            self._cached.clear()  # every index moved by one
            self._evict()
            return (hpack_int(name_index, 6, 0x40) if name_index else b"\x40" + _hpack_string(name)) + _hpack_string(
                value
            )
        if len(self._seen) >= self.SEEN_KEPT:
            self._seen.clear()
        self._seen.add(header)
        # literal without indexing
        return (hpack_int(name_index, 4, 0) if name_index else b"\x00" + _hpack_string(name)) + _hpack_string(value)


class HeaderDecoder:
    """jh2's native HPACK decoder (Rust), whose errors are turned into COMPRESSION_ERROR."""

    def __init__(self) -> None:
        self._decoder = _NativeHpackDecoder()

    def decode(self, block: bytes) -> list[tuple[bytes, bytes, bool]]:
        try:
            return self._decoder.decode(block)  # type: ignore[no-any-return]
        except Exception as exc:  # jh2._hazmat.HPACKError and friends
            raise ProtocolError(COMPRESSION_ERROR, f"undecodable header block: {exc!r}") from exc
        except BaseException as exc:  # a Rust panic (pyo3's PanicException) on some malformed blocks
            if type(exc).__name__ != "PanicException":
                raise
            raise ProtocolError(COMPRESSION_ERROR, f"undecodable header block: {exc!r}") from exc
