"""Audience SQL (docs/AUDIENCES.md "Design"): an ``Audience`` (notee/domain/filters.py) compiled to
one SQL condition over a device row ``d``, its user ``u`` and ``EXISTS`` lookups on ``user_tag``'s
primary key; the page reads of an audience walk (a service's devices in primary-key order, one
"slot" at a time) and the counts of an estimate.

A walk's slot is the first byte of the user id (a UUID's first two hex digits: 256 slots of about
equal size); a page is read after the (user_id, device_token) of the last row of the page before it,
so a walk resumes from a checkpoint exactly. Every query names the service: tags and devices of
another service are never read.

Every predicate compiles to a two-valued condition (a missing value is false, never NULL), so a
group's NOT (an excluded segment) means what it says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    and_,
    case,
    exists,
    false,
    func,
    literal,
    not_,
    or_,
    select,
)
from sqlalchemy.orm import Session

from notee.core.audience import (
    ATTRIBUTES,
    BOOLEAN,
    ELAPSED,
    PLATFORMS,
    STRING,
    TIMESTAMP,
    Audience,
    Filter,
    Predicate,
)
from notee.store.tags_sql import user_tag_t
from notee.store.users_sql import device_t, user_t

SLOTS = 256  # a walk's slots: the first byte of the user id


d = device_t.alias("d")
u = user_t.alias("u")

# attribute -> its column (user's ``u`` or device's ``d``)
_ATTRIBUTE_COLUMNS: dict[str, Any] = {
    "locale": u.c.locale,
    "timezone": u.c.timezone,
    "created_at": u.c.created_at,
    "platform": d.c.device_os,
    "app_version": d.c.app_version_key,
    "country": d.c.region,
    "last_seen": d.c.updated_at,
}


@dataclass(frozen=True, slots=True)
class AudienceQuery:
    """What a walk or a count selects: the audience (None: every device of the service), the
    platforms it is narrowed to (None: all), and ``now`` (naive UTC, the database's clock) for the
    elapsed-time predicates."""

    audience: Audience | None
    platforms: tuple[str, ...] | None
    now: datetime


def slot_bounds(slot: int) -> tuple[str, str]:
    """The user ids of a slot: [low, high) as strings (a UUID's first two hex digits)."""
    low = f"{slot:02x}"
    return low, (f"{slot + 1:02x}" if slot < SLOTS - 1 else "g")


def slot_of(user_id: str) -> int:
    return int(user_id[:2], 16)


# ------------------------------------------------------------------------------------- compiling
def _two_valued(condition: ColumnElement[bool]) -> ColumnElement[bool]:
    """NULL (a missing value) as false."""
    return func.coalesce(condition, false())


def _epoch_time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def _compare(column: Any, op: str, value: Any) -> ColumnElement[bool]:
    """``column op value`` for the ordering and equality ops, and in."""
    if op == "=":
        return column == value  # type: ignore[no-any-return]
    if op == "<":
        return column < value  # type: ignore[no-any-return]
    if op == "<=":
        return column <= value  # type: ignore[no-any-return]
    if op == ">":
        return column > value  # type: ignore[no-any-return]
    if op == ">=":
        return column >= value  # type: ignore[no-any-return]
    return column.in_(value)  # type: ignore[no-any-return]


_NEGATED = {"!=": "=", "not_in": "in", "not_exists": "exists"}


def _tag(p: Predicate, now: datetime, sets: str | None = None) -> ColumnElement[bool]:
    """A tag predicate: an EXISTS on user_tag's primary key (negated ops: NOT EXISTS of the positive,
    so a user without the tag matches ``!=`` and ``not_in``). With ``sets`` (the service, for a
    count): ``d.user_id [NOT] IN`` the set of the service's users whose tag matches, which MariaDB
    may read from ix_user_tag_str/_num and join to the devices (a semi-join) instead of testing every
    device (docs/AUDIENCES.md "Estimates")."""
    op = _NEGATED.get(p.op, p.op)
    t = user_tag_t
    where = [t.c.tag_key == p.tag]
    if op != "exists":
        where.append(t.c.kind == p.kind)
        if op in ELAPSED:
            cutoff = now.replace(tzinfo=UTC).timestamp() - float(p.value)  # type: ignore[arg-type]
            where.append(t.c.value_num < cutoff if op == "elapsed_gt" else t.c.value_num > cutoff)
        else:
            value: Any = p.value
            if p.kind == BOOLEAN:
                value = 1.0 if value else 0.0
            where.append(_compare(t.c.value_str if p.kind == STRING else t.c.value_num, op, value))
    if sets is not None:
        members = select(t.c.user_id).where(t.c.service == sets, *where)
        found: ColumnElement[bool] = d.c.user_id.in_(members)
    else:
        found = exists().where(t.c.service == d.c.service, t.c.user_id == d.c.user_id, *where)
    return not_(found) if p.op in _NEGATED else found


def _attribute(p: Predicate, now: datetime) -> ColumnElement[bool]:
    """A built-in attribute's predicate over its column; '' (a device without a region) is absent."""
    assert p.attribute is not None
    column = _ATTRIBUTE_COLUMNS[p.attribute]
    present = and_(column.is_not(None), column != "") if p.kind == STRING else column.is_not(None)
    op = _NEGATED.get(p.op, p.op)
    if op == "exists":
        positive: ColumnElement[bool] = present
    elif op in ELAPSED:
        cutoff = now - timedelta(seconds=float(p.value))  # type: ignore[arg-type]
        positive = column < cutoff if op == "elapsed_gt" else column > cutoff
    else:
        value: Any = p.value
        if p.kind == TIMESTAMP:
            value = _epoch_time(float(value))
        positive = _compare(column, op, value)
    positive = _two_valued(and_(present, positive))
    return not_(positive) if p.op in _NEGATED else positive


def _predicate(p: Predicate, now: datetime, sets: str | None) -> ColumnElement[bool]:
    return _tag(p, now, sets) if p.tag is not None else _attribute(p, now)


def _filter(f: Filter, now: datetime, sets: str | None) -> ColumnElement[bool]:
    return or_(*(and_(*(_predicate(p, now, sets) for p in group)) for group in f))


def audience_condition(audience: Audience, now: datetime, sets: str | None = None) -> ColumnElement[bool]:
    """The audience as one condition over ``d`` and ``u``: in an included filter, in no excluded one
    (``sets``: tag tests as sets of the service's users, for counts: ``_tag``)."""
    included = or_(*(_filter(f, now, sets) for f in audience.include))
    if not audience.exclude:
        return included
    return and_(included, not_(or_(*(_filter(f, now, sets) for f in audience.exclude))))


def _needs_user(audience: Audience | None) -> bool:
    if audience is None:
        return False
    filters = (*audience.include, *audience.exclude)
    return any(
        p.attribute is not None and not ATTRIBUTES[p.attribute][1] for f in filters for group in f for p in group
    )


def _where(service: str, query: AudienceQuery, *, counting: bool = False) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = [d.c.service == service]
    if query.platforms is not None:
        where.append(d.c.device_os.in_(query.platforms))
    if query.audience is not None:
        where.append(audience_condition(query.audience, query.now, service if counting else None))
    return where


def _from(query: AudienceQuery) -> Any:
    """The device table, joined to its user when a predicate reads the user's attributes (the join is
    a lookup on uq_user_user_id per device)."""
    if not _needs_user(query.audience):
        return d
    return d.join(u, and_(u.c.service == d.c.service, u.c.user_id == d.c.user_id))


# ------------------------------------------------------------------------------------- reading
d2 = device_t.alias("d2")

# Whether another user of the service holds the row's token: a probe of ix_device_token per row
# (index-only: the index carries the primary key), instead of a list of the page's tokens sent back
# afterwards (docs/AUDIENCES.md "Audience (MySQL) jobs": its parse and range analysis cost MariaDB
# as much as the page read).
# FORCE INDEX: on a small table MariaDB may pick the primary key's (service) prefix instead, a read of
# every device of the service per row once the table grows.
_SHARED = (
    select(literal(1))
    .select_from(d2)
    .with_hint(d2, "FORCE INDEX (ix_device_token)", "*")
    .where(d2.c.service == d.c.service, d2.c.device_token == d.c.device_token, d2.c.user_id != d.c.user_id)
    .exists()
    .label("shared")
)


def _page(service: str, query: AudienceQuery, slot: int, after: tuple[str, str] | None, limit: int) -> Any:
    low, high = slot_bounds(slot)
    where = [*_where(service, query), d.c.user_id >= low, d.c.user_id < high]
    if after is not None:
        where.append(or_(d.c.user_id > after[0], and_(d.c.user_id == after[0], d.c.device_token > after[1])))
    return (
        select(d.c.user_id, d.c.device_token, d.c.device_os)
        .select_from(_from(query))
        .where(*where)
        .order_by(d.c.user_id, d.c.device_token)
        .limit(limit)
    )


def device_page(
    session: Session, service: str, query: AudienceQuery, slot: int, after: tuple[str, str] | None, limit: int
) -> list[tuple[str, str, str]]:
    """At most ``limit`` (user_id, device_token, device_os) of the audience in ``slot``, in primary-key
    order, after the (user_id, device_token) ``after`` (None: from the slot's start)."""
    stmt = _page(service, query, slot, after, limit)
    return [(r.user_id, r.device_token, r.device_os) for r in session.execute(stmt)]


def marked_page(
    session: Session, service: str, query: AudienceQuery, slot: int, after: tuple[str, str] | None, limit: int
) -> list[tuple[str, str, str, bool]]:
    """``device_page``'s rows, each with whether another user of the service (in the audience or
    not) holds its token in the same read: a walk checks the first holder of those only."""
    stmt = _page(service, query, slot, after, limit).add_columns(_SHARED)
    return [(r.user_id, r.device_token, r.device_os, bool(r.shared)) for r in session.execute(stmt)]


@dataclass(frozen=True, slots=True)
class Reach:
    """What an audience reaches now: users with at least one matching device, and the devices by
    platform."""

    users: int
    devices_by_platform: dict[str, int]

    @property
    def devices(self) -> int:
        return sum(self.devices_by_platform.values())


def _tally(session: Session, source: Any, where: list[ColumnElement[bool]]) -> Reach:
    """Devices by platform and distinct users of the rows ``where`` selects, in one pass (a sum per
    platform beside COUNT(DISTINCT): no GROUP BY, so no sort of the matching rows)."""
    stmt = (
        select(
            *(func.sum(case((d.c.device_os == p, 1), else_=0)) for p in PLATFORMS),
            func.count(func.distinct(d.c.user_id)),
        )
        .select_from(source)
        .where(*where)
    )
    *devices, users = session.execute(stmt).one()
    return Reach(int(users), {p: int(n) for p, n in zip(PLATFORMS, devices, strict=True) if n})


def count(session: Session, service: str, query: AudienceQuery) -> Reach:
    """The audience's reach, counted exactly: one pass over the service's devices, or over the
    members of a tag when MariaDB finds that cheaper (``_tag``'s sets)."""
    return _tally(session, _from(query), _where(service, query, counting=True))


@dataclass(frozen=True, slots=True)
class ListReach:
    """What a list of users reaches now: ``reach`` (users with a device of the platforms asked for, their
    devices) and ``known``, how many of the ids name a user of the service."""

    reach: Reach
    known: int


def count_users_list(
    session: Session, service: str, service_user_ids: Sequence[str], platforms: tuple[str, ...] | None
) -> ListReach:
    """The devices of the users a service names by its own ids (a publish's ``users``), counted
    exactly: lookups on the user's primary key (service, service_user_id), then on the device's
    (service, user_id)."""
    ids = sorted(set(service_user_ids))
    if not ids:
        return ListReach(Reach(0, {}), 0)
    known = session.execute(
        select(func.count()).where(u.c.service == service, u.c.service_user_id.in_(ids))
    ).scalar_one()
    where = [u.c.service == service, u.c.service_user_id.in_(ids)]
    if platforms is not None:
        where.append(d.c.device_os.in_(platforms))
    joined = u.join(d, and_(d.c.service == u.c.service, d.c.user_id == u.c.user_id))
    return ListReach(_tally(session, joined, where), int(known))


def explain_page(session: Session, service: str, query: AudienceQuery) -> list[dict[str, Any]]:
    """MariaDB's plan of a walk's page read, its shared-token probe included (tests check it uses the
    indexes it should)."""
    stmt = _page(service, query, 0, None, 1000).add_columns(_SHARED)
    compiled = stmt.compile(session.get_bind(), compile_kwargs={"literal_binds": True})
    return [dict(r._mapping) for r in session.connection().exec_driver_sql(f"EXPLAIN {compiled}")]
