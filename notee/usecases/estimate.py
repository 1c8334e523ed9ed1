"""Audience estimates (docs/AUDIENCES.md "Estimates"): how many users and devices a publish's target
would reach now. A filter, segments and a user list are counted exactly in MySQL
(notee/store/audience_sql.py); a topic and a condition from Cassandra's per-topic subscriber counters,
which count users (not devices) and may drift: ``exact`` is False, ``devices`` unknown (None).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from notee.core.audience import Audience
from notee.core.errors import InvalidInput
from notee.domain import segments
from notee.domain.conditions import parse_condition
from notee.domain.filters import parse_filter
from notee.domain.rules import TYPE_RE
from notee.domain.schedule import validate_topic
from notee.store import audience_sql
from notee.store.audience_sql import AudienceQuery, Reach
from notee.store.cql.counters import Counters
from notee.store.mysql import db_now

MAX_USERS = 20_000
TARGETS = ("filter", "segments", "users", "topic", "condition")


@dataclass(frozen=True, slots=True)
class EstimateTarget:
    """A publish's target as a request names it: exactly one of ``filter`` (raw JSON), ``segments``
    ({include, exclude}), ``users`` (service user ids), ``topic`` or ``condition`` (both with ``type``),
    and the ``platforms`` it is narrowed to (None: all)."""

    filter: Any = None
    segments: dict[str, list[str]] | None = None
    users: list[str] | None = None
    topic: str | None = None
    condition: str | None = None
    type: str | None = None
    platforms: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Estimate:
    """``users``/``devices`` None: unknown for this method. ``unknown_users``: ids of a user list that
    name no user of the service (None for other targets)."""

    users: int | None
    devices: int | None
    devices_by_platform: dict[str, int] | None
    exact: bool
    method: str
    unknown_users: int | None = None
    topics: dict[str, int] = field(default_factory=dict)


def _invalid(loc: list[str | int], msg: str, type_: str = "value_error") -> InvalidInput:
    return InvalidInput(msg, details=[{"loc": loc, "type": type_, "msg": msg}])


def _exact(reach: Reach, unknown: int | None = None) -> Estimate:
    return Estimate(reach.users, reach.devices, dict(reach.devices_by_platform), True, "mysql_count", unknown)


def _type_of(target: EstimateTarget) -> str:
    if not isinstance(target.type, str) or not TYPE_RE.fullmatch(target.type):
        raise _invalid(["body", "type"], "a topic or condition estimate names the TOPIC template's type", "missing")
    return target.type


def estimate(session: Session, counters: Counters, service: str, target: EstimateTarget) -> Estimate:
    """What ``target`` reaches now; InvalidInput (422) naming the offending part of the request."""
    named = [name for name in TARGETS if getattr(target, name) is not None]
    if len(named) != 1:
        raise _invalid(["body"], f"name exactly one target of {', '.join(TARGETS)} (got {len(named) or 'none'})")
    kind = named[0]
    if kind in ("filter", "segments"):
        if kind == "filter":
            audience = Audience((parse_filter(target.filter, ("body", "filter")),))
        else:
            chosen = target.segments or {}
            audience = segments.audience_of(session, service, chosen.get("include", []), chosen.get("exclude", []))
        query = AudienceQuery(audience, target.platforms, db_now(session))
        return _exact(audience_sql.count(session, service, query))
    if kind == "users":
        ids = target.users or []
        if not 1 <= len(ids) <= MAX_USERS:
            raise _invalid(["body", "users"], f"a list of 1-{MAX_USERS} service user ids", "too_long")
        found = audience_sql.count_users_list(session, service, ids, target.platforms)
        return _exact(found.reach, len(set(ids)) - found.known)
    type_ = _type_of(target)
    if kind == "topic":
        topic = validate_topic(target.topic)  # type: ignore[arg-type]  # not None: the target named
        users = counters.topic_subscriber_count(service, type_, topic)
        return Estimate(users, None, None, False, "topic_counter", topics={topic: users})
    condition = parse_condition(target.condition)  # type: ignore[arg-type]
    counts = {t: counters.topic_subscriber_count(service, type_, t) for t in condition.topics}
    # Every recipient is in one of the topics the job walks: their subscribers together bound it.
    walked = condition.walked_topics(counts)
    return Estimate(sum(counts[t] for t in walked), None, None, False, "topic_counters_upper_bound", topics=counts)
