"""Platform user ids (``user.user_id``): UUIDs whose layout keeps both the audience walks' slots even
and MariaDB's inserts local (docs/AUDIENCES.md "What an imported user costs").

The id leads the primary keys of ``device`` and ``user_tag`` and the unique key ``uq_user_user_id``.
A random UUID (version 4) puts each new user on a random page of each of those indexes: once the
tables outgrow InnoDB's buffer pool, every insert reads, evicts and later flushes pages, and
MariaDB's CPU per imported user grew 3x with the tables. An id that is random in its first byte (the
walks' slot: ``audience_sql.slot_of``, 256 slots of equal size) and ordered by time after it lands
every new user at the end of its slot: 256 insertion points per index, whose pages stay in memory.

Layout (RFC 9562 version 8, "custom"), as hex digits of the 128-bit value:
``SS TTTTTTTTTT 8 t RR-...``: ``S`` 8 random bits (the slot), ``T`` the high 40 bits of the
Unix time in milliseconds, the version nibble ``8``, ``t`` its low 4 bits (44 bits of milliseconds:
until the year 2527), then 8 random bits, the variant ``10`` and 62 random bits: 78 random bits in
all, so ids made in the same millisecond in the same slot stay unique (and ``uq_user_user_id`` would
refuse a repeat). The ids are still opaque to every reader: nothing parses them but the slot.
"""

from __future__ import annotations

import os
import time

_VERSION = 0x8 << 76
_VARIANT = 0b10 << 62
_MS_BITS = 44


def new_user_id(now_ms: int | None = None) -> str:
    """A new platform user id (module doc); ``now_ms`` (Unix milliseconds) for tests."""
    ms = (time.time_ns() // 1_000_000 if now_ms is None else now_ms) & ((1 << _MS_BITS) - 1)
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits, 78 used
    value = (
        (rand >> 72) << 120  # slot: 8 bits
        | (ms >> 4) << 80  # 40 bits
        | _VERSION
        | (ms & 0xF) << 72
        | ((rand >> 62) & 0xFF) << 64  # 8 bits
        | _VARIANT
        | rand & ((1 << 62) - 1)  # 62 bits
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
