"""The one cursor style of every list in the API: a page answers ``next_cursor`` (null at the end),
the client passes it back as ``cursor``. A cursor is opaque: base64url of the position after which
the next page starts (keyset paging, stable while items are added). One this API did not return is
a 422 ``invalid_cursor``, never a guess."""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from typing import Any

from fastapi import Query

from notee.core.errors import InvalidInput

# What every cursor is made of (base64url, padded), as the OpenAPI document states it. ``decode``
# refuses anything else before decoding: base64 decoding alone would skip characters it does not know.
PATTERN = r"^[A-Za-z0-9_-]*={0,2}$"
_CURSOR_RE = re.compile(PATTERN)

_INVALID = InvalidInput(
    "cursor is not one this API returned",
    details=[{"loc": ["query", "cursor"], "type": "invalid_cursor", "msg": "use next_cursor of a previous page"}],
)


def query(max_length: int, description: str = "From the previous page.") -> Any:
    """The ``cursor`` query parameter of a listing: at most ``max_length`` characters (every cursor
    the listing answers fits), of the cursor alphabet (documented; ``decode`` refuses the rest)."""
    return Query(max_length=max_length, description=description, json_schema_extra={"pattern": PATTERN})


def encode(*parts: str) -> str:
    # UTF-8 rather than \u escapes: a (type, topic) position of 50 non-ASCII characters stays
    # within its listing's max_length (an escaped astral character takes 12 bytes, UTF-8 four).
    return base64.urlsafe_b64encode(json.dumps(list(parts), ensure_ascii=False).encode()).decode()


def decode(cursor: str, count: int) -> tuple[str, ...]:
    """The ``count`` strings a cursor of ``encode`` holds; InvalidInput otherwise."""
    if not _CURSOR_RE.fullmatch(cursor):
        raise _invalid()
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error, UnicodeError):
        raise _invalid() from None
    if isinstance(value, list) and len(value) == count and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _invalid()


def encode_position(at: datetime, key: str) -> str:
    """A (created_at, id) position: the order of jobs and users."""
    return encode(at.isoformat(), key)


def decode_position(cursor: str) -> tuple[datetime, str]:
    at, key = decode(cursor, 2)
    try:
        return datetime.fromisoformat(at), key
    except ValueError:
        raise _invalid() from None


def encode_id(last: int) -> str:
    """An id position: the order of dead letters and webhook deliveries (newest first)."""
    return encode(str(last))


def decode_id(cursor: str) -> int:
    (last,) = decode(cursor, 1)
    if not last.isdigit():
        raise _invalid()
    return int(last)


def _invalid() -> InvalidInput:
    return InvalidInput(_INVALID.message, details=_INVALID.details)
