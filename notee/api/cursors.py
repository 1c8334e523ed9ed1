"""The one cursor style of every list in the API: a page answers ``next_cursor`` (null at the end),
the client passes it back as ``cursor``. A cursor is opaque: base64url of the position after which
the next page starts (keyset paging, stable while items are added). One this API did not return is
a 422 ``invalid_cursor``, never a guess."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from notee.core.errors import InvalidInput

_INVALID = InvalidInput(
    "cursor is not one this API returned",
    details=[{"loc": ["query", "cursor"], "type": "invalid_cursor", "msg": "use next_cursor of a previous page"}],
)


def encode(*parts: str) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode()


def decode(cursor: str, count: int) -> tuple[str, ...]:
    """The ``count`` strings a cursor of ``encode`` holds; InvalidInput otherwise."""
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
