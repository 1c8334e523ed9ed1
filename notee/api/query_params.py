"""Query parameters the API parses itself (beyond what FastAPI's types do), with the error format."""

from __future__ import annotations

from datetime import datetime

from notee.core import clock
from notee.core.errors import InvalidInput


def query_instant(value: str | None, name: str) -> datetime | None:
    """A query parameter's RFC 3339 time (with its offset), as the naive UTC the stores keep. Strict:
    a number or a time without an offset is refused, not guessed."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value) if "T" in value.upper() else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidInput(
            f"{name} must be an RFC 3339 time with its offset, e.g. 2026-11-30T09:00:00Z",
            details=[{"loc": ["query", name], "type": "datetime_format", "msg": "RFC 3339 date-time with offset"}],
        )
    return clock.naive_utc(moment)
