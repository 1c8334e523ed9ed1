"""Segments (docs/AUDIENCES.md "Segments"): a service's saved, named filters, what each reaches now,
and ``audience_of``, the audience a publish naming segments snapshots when its job is made.

A segment's filter is checked with ``parse_filter`` on every write and kept as the request gave it;
reads parse it again (cheap, pure) to count it. Each function works in the caller's transaction: the
caller commits. Every query names the service: another service's segment is NotFound.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from notee.core.audience import Audience, Filter
from notee.core.clock import aware_utc, stored_now
from notee.core.errors import Conflict, InvalidInput, NotFound
from notee.domain.filters import parse_filter
from notee.domain.rules import control_free
from notee.store import audience_sql
from notee.store import segments_sql as store
from notee.store.audience_sql import AudienceQuery, Reach
from notee.store.mysql import AnyRow, db_now

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
NAME_RE = re.compile(NAME_PATTERN)
MAX_DESCRIPTION = 500
MAX_NAMED = 20  # segments a publish or an estimate may name, included and excluded together


@dataclass(frozen=True, slots=True)
class Segment:
    """A saved filter as the API answers it; ``reach``: what it matches now (None: not counted)."""

    name: str
    description: str
    filter: Any
    created_at: datetime
    updated_at: datetime
    reach: Reach | None = None
    created: bool = False


@dataclass(frozen=True, slots=True)
class SegmentInput:
    """A segment write: its name (``name_loc``: where a bad name came from, body or path), description
    and filter as the request gave them."""

    name: str
    description: str | None
    filter: Any
    name_loc: tuple[str, ...] = ("body", "name")


def _invalid(loc: Sequence[str | int], msg: str, type_: str = "value_error") -> InvalidInput:
    return InvalidInput(f"{loc[-1]}: {msg}", details=[{"loc": list(loc), "type": type_, "msg": msg}])


def check_name(name: Any, loc: Sequence[str | int] = ("path", "name")) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise _invalid(loc, "a segment name is 1-64 of A-Z a-z 0-9 _ . -", "pattern")
    return name


def _checked(given: SegmentInput) -> tuple[str, str, Any]:
    """(name, description, filter) of a write, each checked; InvalidInput naming the first bad part."""
    name = check_name(given.name, given.name_loc)
    description = given.description or ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION or not control_free(description):
        raise _invalid(
            ("body", "description"), f"at most {MAX_DESCRIPTION} characters, no control characters", "string_type"
        )
    parse_filter(given.filter, ("body", "filter"))
    return name, description, given.filter


def _segment(row: AnyRow, reach: Reach | None = None, created: bool = False) -> Segment:
    return Segment(
        row.name, row.description, row.filter, aware_utc(row.created_at), aware_utc(row.updated_at), reach, created
    )


def reach_of(session: Session, service: str, raw_filter: Any, platforms: tuple[str, ...] | None = None) -> Reach:
    """What a stored filter reaches now, counted exactly."""
    parsed = parse_filter(raw_filter, ("filter",))
    return audience_sql.count(session, service, AudienceQuery(Audience((parsed,)), platforms, db_now(session)))


def _make_room(session: Session, service: str, limit: int) -> None:
    store.lock_service(session, service)  # creations of one service take turns: the limit holds
    if store.count_segments(session, service) >= limit:
        raise Conflict(
            f"a service may have at most {limit} segments (NOTEE_SEGMENTS_PER_SERVICE_MAX): delete one first",
            details=[{"loc": ["body"], "type": "segment_limit", "msg": f"at most {limit} segments"}],
        )


def create_segment(session: Session, service: str, given: SegmentInput, limit: int) -> Segment:
    """A new segment; 409 when the name is taken or the service has ``limit`` segments already."""
    name, description, raw = _checked(given)
    _make_room(session, service, limit)
    if not store.insert_segment(session, service, name, description, raw, stored_now()):
        raise Conflict(
            f"segment {name!r} exists (PUT /v1/segments/{name} replaces it)",
            details=[{"loc": ["body", "name"], "type": "segment_exists", "msg": "a segment of this name exists"}],
        )
    return get_segment(session, service, name, counted=False, created=True)


def put_segment(session: Session, service: str, given: SegmentInput, limit: int) -> Segment:
    """Replace a segment's description and filter, or create it when absent (``created``: True)."""
    name, description, raw = _checked(given)
    if store.update_segment(session, service, name, description, raw, stored_now()):
        return get_segment(session, service, name)
    _make_room(session, service, limit)
    if not store.insert_segment(session, service, name, description, raw, stored_now()):
        # made by a concurrent write since the update found none: replace it as asked
        store.update_segment(session, service, name, description, raw, stored_now())
        return get_segment(session, service, name)
    return get_segment(session, service, name, created=True)


def get_segment(session: Session, service: str, name: str, *, counted: bool = True, created: bool = False) -> Segment:
    """One segment, with what it reaches now unless ``counted`` is False."""
    row = store.get_segment(session, service, check_name(name))
    if row is None:
        raise NotFound("segment not found")
    return _segment(row, reach_of(session, service, row.filter) if counted else None, created)


def list_segments(session: Session, service: str, after: str | None, limit: int, *, counted: bool) -> list[Segment]:
    """A page of the service's segments in name order after ``after``; each counted when ``counted``."""
    rows = store.segments_page(session, service, after, limit)
    return [_segment(row, reach_of(session, service, row.filter) if counted else None) for row in rows]


def delete_segment(session: Session, service: str, name: str) -> None:
    if not store.delete_segment(session, service, check_name(name)):
        raise NotFound("segment not found")


def audience_of(session: Session, service: str, include: list[str], exclude: list[str]) -> Audience:
    """The audience of a publish (or an estimate) naming segments: users in any ``include``d segment
    and in none ``exclude``d, from the segments' definitions now (a job keeps what this answers: its
    snapshot). 422 naming each unknown or malformed name (``loc``: body, segments, include|exclude, i)."""
    if not include:
        raise _invalid(("body", "segments", "include"), "name at least one segment to include", "missing")
    if len(include) + len(exclude) > MAX_NAMED:
        raise _invalid(("body", "segments"), f"at most {MAX_NAMED} segments in all", "too_long")
    named = [("include", i, n) for i, n in enumerate(include)] + [("exclude", i, n) for i, n in enumerate(exclude)]
    problems: list[dict[str, Any]] = []
    for side, i, name in named:
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            problems.append({"loc": ["body", "segments", side, i], "type": "pattern", "msg": "not a segment name"})
    if not problems:
        found = store.get_segments(session, service, [n for _, _, n in named])
        problems = [
            {"loc": ["body", "segments", side, i], "type": "unknown_segment", "msg": f"no segment named {name!r}"}
            for side, i, name in named
            if name not in found
        ]
    if problems:
        raise InvalidInput(f"segments: {problems[0]['msg']}", details=problems)

    def filters(names: list[str]) -> tuple[Filter, ...]:
        return tuple(parse_filter(found[n].filter, ("segments", n)) for n in dict.fromkeys(names))

    return Audience(filters(include), filters(exclude))
