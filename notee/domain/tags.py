"""A user's tags, pure: the rules of a tag patch or replacement and the stored form (docs/AUDIENCES.md "Tags").

A tag is one typed value per key. The API's JSON and the stored row (``user_tag``) map one to one:

=========  =========================================  ====================================
type       JSON                                       stored (kind, value_str, value_num)
=========  =========================================  ====================================
string     ``"pro"``                                  ``s``, the string, NULL
number     ``31``, ``4.5``                            ``n``, NULL, the number
boolean    ``true``                                   ``b``, NULL, 1 or 0
timestamp  ``{"timestamp": "2026-12-31T00:00:00Z"}``  ``t``, NULL, seconds since the epoch (UTC)
=========  =========================================  ====================================

A failed check raises ``InvalidInput`` with one detail whose ``loc`` names the key: the caller's
prefix (``("body",)`` for the tags routes, ``("body", "tags")`` inside a user's PUT) plus the key.
Nothing here reads a store: the callers (the tags routes, bulk import) bring the existing keys.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from notee.core.errors import InvalidInput
from notee.domain.rules import control_free

TAG_KEY_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
TAG_KEY_RE = re.compile(TAG_KEY_PATTERN)
MAX_TAG_STR_LEN = 255
# RFC 3339's date-time (section 5.6) with its offset; at most microseconds, which the stored double keeps.
_RFC3339_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,6})?([Zz]|[+-]\d{2}:\d{2})$", re.ASCII
)
# Integers up to 2**53 survive a double exactly: such numbers go back out as JSON integers.
_EXACT_INT = 2**53

KIND_STRING = "s"
KIND_NUMBER = "n"
KIND_BOOLEAN = "b"
KIND_TIMESTAMP = "t"

Loc = Sequence[str | int]


@dataclass(frozen=True)
class StoredTag:
    """A tag value as ``user_tag`` keeps it: ``kind`` and exactly one of the two value columns."""

    kind: str
    value_str: str | None = None
    value_num: float | None = None


@dataclass(frozen=True)
class TagPatch:
    """A validated merge patch: keys to set (with their stored values) and keys to remove."""

    set: dict[str, StoredTag]
    remove: frozenset[str]


def _bad(loc: Loc, key: str, msg: str, type_: str) -> InvalidInput:
    return InvalidInput(f"tag {key!r}: {msg}", details=[{"loc": [*loc, key], "type": type_, "msg": msg}])


def check_key(key: Any, loc: Loc = ("body",)) -> str:
    """A tag key: 1-64 of ``A-Z a-z 0-9 _ . : -``."""
    if not isinstance(key, str) or not TAG_KEY_RE.fullmatch(key):
        raise _bad(loc, str(key), f"a tag key must match {TAG_KEY_PATTERN}", "tag_key")
    return key


def parse_timestamp(text: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 date-time with its offset; None when ``text`` is not one."""
    if not isinstance(text, str) or not _RFC3339_RE.fullmatch(text):
        return None
    try:
        moment = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:  # a month 13, a 30th of February, an offset beyond 24 h
        return None
    return moment.timestamp()


def format_timestamp(seconds: float) -> str:
    """The RFC 3339 text (UTC, ``Z``) of epoch seconds; a fraction only when there is one."""
    moment = datetime.fromtimestamp(seconds, UTC)
    text = moment.replace(tzinfo=None).isoformat(timespec="seconds")
    fraction = f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else ""
    return f"{text}{fraction}Z"


def to_stored(key: str, value: Any, loc: Loc = ("body",)) -> StoredTag:
    """The stored form of one tag value as the API took it (``key`` already checked); 422 when the
    value is of no tag type or breaks its type's limits."""
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return StoredTag(KIND_BOOLEAN, value_num=1.0 if value else 0.0)
    if isinstance(value, str):
        if len(value) > MAX_TAG_STR_LEN:
            raise _bad(loc, key, f"a string tag is at most {MAX_TAG_STR_LEN} characters", "string_too_long")
        if not control_free(value):
            raise _bad(loc, key, "a string tag must not contain control characters", "control_characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _bad(loc, key, "a string tag must be valid Unicode", "unicode") from None
        return StoredTag(KIND_STRING, value_str=value)
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond a double's range
            number = math.inf
        if not math.isfinite(number):
            raise _bad(loc, key, "a number tag must be finite", "finite_number")
        return StoredTag(KIND_NUMBER, value_num=number)
    if isinstance(value, Mapping) and set(value) == {"timestamp"}:
        seconds = parse_timestamp(value["timestamp"])
        if seconds is None:
            msg = 'a timestamp tag is {"timestamp": RFC 3339 date-time with its offset}, e.g. 2026-12-31T00:00:00Z'
            raise _bad(loc, key, msg, "timestamp_format")
        return StoredTag(KIND_TIMESTAMP, value_num=seconds)
    msg = 'a tag value is a string, a number, a boolean or {"timestamp": "..."}'
    raise _bad(loc, key, msg, "tag_type")


def to_json(tag: StoredTag) -> Any:
    """The API's JSON of a stored tag (the inverse of :func:`to_stored`)."""
    if tag.kind == KIND_STRING:
        return tag.value_str
    number = tag.value_num if tag.value_num is not None else 0.0
    if tag.kind == KIND_BOOLEAN:
        return number != 0
    if tag.kind == KIND_TIMESTAMP:
        return {"timestamp": format_timestamp(number)}
    if number.is_integer() and abs(number) <= _EXACT_INT:
        return int(number)
    return number


def _object(body: Any, loc: Loc) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise InvalidInput(
            "tags must be a JSON object of key: value",
            details=[{"loc": list(loc), "type": "dict_type", "msg": "must be an object of key: value"}],
        )
    return body


def check_patch(body: Any, *, limit: int, loc: Loc = ("body",)) -> TagPatch:
    """A JSON merge patch (RFC 7396) of a user's tags: ``null`` removes a key, any other value sets it.
    At most ``limit`` keys set and ``limit`` removed (a user never holds more than ``limit``)."""
    patch = _object(body, loc)
    sets: dict[str, StoredTag] = {}
    removes: set[str] = set()
    for key, value in patch.items():
        check_key(key, loc)
        if value is None:
            removes.add(key)
        else:
            sets[key] = to_stored(key, value, loc)
    if len(sets) > limit or len(removes) > limit:
        raise too_many(limit, loc)
    return TagPatch(set=sets, remove=frozenset(removes))


def check_replacement(body: Any, *, limit: int, loc: Loc = ("body",)) -> dict[str, StoredTag]:
    """A user's whole set of tags (a PUT): every value given (``null`` means nothing here), at most ``limit``."""
    tags = _object(body, loc)
    stored: dict[str, StoredTag] = {}
    for key, value in tags.items():
        check_key(key, loc)
        if value is None:
            raise _bad(loc, key, "null removes a tag only in a PATCH; leave the key out", "tag_type")
        stored[key] = to_stored(key, value, loc)
    if len(stored) > limit:
        raise too_many(limit, loc)
    return stored


def keys_after(existing: Iterable[str], patch: TagPatch) -> set[str]:
    """The keys a user holds once ``patch`` is applied to ``existing``."""
    return (set(existing) - patch.remove) | set(patch.set)


def check_count(existing: Iterable[str], patch: TagPatch, *, limit: int, loc: Loc = ("body",)) -> None:
    """422 when applying ``patch`` to a user holding ``existing`` keys would leave more than ``limit``."""
    if len(keys_after(existing, patch)) > limit:
        raise too_many(limit, loc)


def too_many(limit: int, loc: Loc = ("body",)) -> InvalidInput:
    msg = f"a user holds at most {limit} tags (NOTEE_TAGS_PER_USER_MAX)"
    return InvalidInput(msg, details=[{"loc": list(loc), "type": "too_many_tags", "msg": msg, "ctx": {"limit": limit}}])


def tags_json(rows: Iterable[tuple[str, StoredTag]]) -> dict[str, Any]:
    """The API's ``tags`` object of stored rows, keys in order."""
    return {key: to_json(tag) for key, tag in sorted(rows, key=lambda row: row[0])}
