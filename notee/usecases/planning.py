"""The planning of a publish job's work: its task ranges, and for a topic publish planned by its
recipients' clocks (local time, quiet hours) the parts it is released in.

``task_plan`` lays a topic or cycle-bucket job out in tasks of slot ranges (from the target's
occupancy when known); ``plan_parts``, ``placement`` and ``zone_groups`` decide when each recipient
is due and which task set sends it; the worker reads a task's share back with ``task_slots``,
``task_unit`` and ``in_part``. Pure functions of their arguments (``task_plan`` reads Cassandra's
occupancy through the statements it is given); ``create_job`` (notee/usecases/publish.py) writes what
they decide (docs/FANOUT.md, "Local-time publishes (`local_time`) and quiet hours").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from notee.core import clock
from notee.core.errors import InvalidInput
from notee.core.vocabulary import CycleTarget, TopicTarget, pack_slots, slot_ranges
from notee.domain.conditions import Condition
from notee.domain.schedule import parse_local_time
from notee.store.cql.counters import max_slot
from notee.store.cql.rows import slot_zone
from notee.store.cql.statements import Statements

log = logging.getLogger(__name__)

# One slot (<= ~30,000 rows) per task when a target's occupancy is unknown: the unit of parallelism.
# 10 M devices are 334 tasks, which any number of workers share. With occupancy known, tasks hold the
# occupied slots, as many as add up to one slot's worth of blocks (``task_plan``).
SLOTS_PER_TASK = 1


def task_plan(
    statements: Statements,
    service: str,
    method: str,
    type_: str,
    notification_key: str,
    target: TopicTarget | CycleTarget,
) -> tuple[list[tuple[int, int]], list[int] | None]:
    """The task ranges of a topic or cycle-bucket job, and the slots they walk (None: every slot of
    each range). When the template's occupancy is known (target_slots), only the occupied slots, packed
    by their blocks (``pack_slots``): a 10-subscriber topic is one task whatever the type's counter.
    Otherwise every slot up to the ``no`` counter's, one per task, as before target_slots: a target
    whose occupancy is unknown never skips a slot."""
    blocks = statements.occupancy(notification_key, target)
    if blocks is None:
        return slot_ranges(max_slot(statements, service, method, type_), SLOTS_PER_TASK), None
    ranges = pack_slots(blocks)
    occupied = sorted(blocks) or [0]
    if occupied == list(range(occupied[-1] + 1)):
        return ranges, None  # every slot from 0 is occupied (a dense target): nothing to skip
    return ranges, occupied


def loaded_topics(topics: tuple[str, ...] | list[str], walked: list[str]) -> list[str]:
    """The topics whose members a condition job's workers load into memory: for a task walking
    topic t, every topic of the condition but t; so all of them unless one topic is walked."""
    return [t for t in topics if [t] != walked]


def condition_walks(
    statements: Statements, service: str, type_: str, condition: Condition, members_max: int
) -> list[str]:
    """The topics a condition job walks (the cheapest cover by subscriber counters:
    ``Condition.walked_topics``); InvalidInput (422) when a topic its workers would load into memory
    has more subscribers than ``members_max`` (NOTEE_CONDITION_MEMBERS_MAX)."""
    counts = {t: statements.topic_subscriber_count(service, type_, t) for t in condition.topics}
    walked = condition.walked_topics(counts)
    too_big = [t for t in loaded_topics(condition.topics, walked) if counts[t] > members_max]
    if too_big:
        raise InvalidInput(
            f"condition: topic {too_big[0]!r} has {counts[too_big[0]]} subscribers; a condition loads at most "
            f"{members_max} members of a topic it does not walk (NOTEE_CONDITION_MEMBERS_MAX)",
            details=[
                {
                    "loc": ["body", "condition"],
                    "type": "condition_topic_too_large",
                    "msg": f"topic {t!r} has more than {members_max} subscribers",
                    "ctx": {"topic": t, "subscribers": counts[t], "max": members_max},
                }
                for t in too_big
            ],
        )
    return walked


def condition_plan(
    statements: Statements, service: str, method: str, type_: str, notification_key: str, walked: list[str]
) -> tuple[list[tuple[int, int]], list[dict[str, Any]]]:
    """The task ranges of a condition job: each walked topic's (``task_plan``), one after the other,
    and the ``walks`` its target stores (topic, how many tasks, the occupied slots or None) from
    which ``walk_of`` maps a task number back to its topic."""
    ranges: list[tuple[int, int]] = []
    walks: list[dict[str, Any]] = []
    for topic in walked:
        topic_ranges, slots = task_plan(statements, service, method, type_, notification_key, TopicTarget(topic))
        ranges += topic_ranges
        walks.append({"topic": topic, "tasks": len(topic_ranges), "slots": slots})
    return ranges, walks


def walk_of(target: dict[str, Any], task_no: int) -> tuple[int, dict[str, Any]]:
    """(index, walk) of a condition job's task: the topic it walks. Its number within its part (a
    planned job repeats the job's tasks per part: ``tasks_per_part``) counts through the walks."""
    per = target.get("tasks_per_part")
    n = task_no % int(per) if per else task_no
    for i, walk in enumerate(target["walks"]):
        if n < int(walk["tasks"]):
            return i, walk
        n -= int(walk["tasks"])
    raise ValueError(f"task {task_no} is past the job's walks")


# An audience job's slots (notee/store/audience_sql.py): a user id's first two hex digits, 256 slots
# of about equal size (platform ids are UUIDs). Sixteen tasks of sixteen slots each; a short user
# list is one task over every slot.
AUDIENCE_SLOTS = 256
AUDIENCE_TASKS = 16
ONE_TASK_USERS = 1000  # a user list this short is one task (a page or two): no point in sixteen claims


def audience_ranges(users: int | None) -> list[tuple[int, int]]:
    """The task ranges of an audience job: one task over every slot for a short user list, else
    ``AUDIENCE_TASKS`` (a filter, segments or a long list), together covering slots 0..255."""
    if users is not None and users <= ONE_TASK_USERS:
        return [(0, AUDIENCE_SLOTS - 1)]
    return slot_ranges(AUDIENCE_SLOTS - 1, AUDIENCE_SLOTS // AUDIENCE_TASKS)


def task_slots(target: dict[str, Any], current_slot: int, slot_to: int, task_no: int = 0) -> list[int]:
    """The slots a task still walks, from its checkpoint's slot to its last: every one, or, in a job
    planned from occupancy, those in the job's ``slots`` (a condition job: its walk's)."""
    listed = walk_of(target, task_no)[1].get("slots") if "walks" in target else target.get("slots")
    if listed is None:
        return list(range(current_slot, slot_to + 1))
    return [s for s in listed if current_slot <= s <= slot_to]


@dataclass(frozen=True, slots=True)
class Part:
    """One release of a topic job planned by recipient clocks (local time, quiet hours): the UTC
    minute ``at`` and the zones whose recipients may be due then. The part's tasks send to the
    recipients whose due minute falls after the previous part's ``at`` and at or before this one's
    (``in_part``)."""

    at: datetime  # aware UTC
    zones: tuple[str, ...]


Window = tuple[int, int]  # quiet hours: (start, end) minutes of the day, local


def quiet_window(start: int | None, end: int | None) -> Window | None:
    """A stored quiet window (two nullable minute columns) as a ``Window``, or None."""
    return None if start is None or end is None else (int(start), int(end))


def placement(plan: dict[str, Any], zone_name: str | None, window: Window | None) -> tuple[datetime, bool]:
    """Where a recipient of ``zone_name`` (None: the service's) with quiet hours ``window`` (None:
    the service's) goes in a planned job: (the minute that decides its part, is it sent). Its base
    minute is the publish's (``from``) or, with ``local_time``, when its clock next shows that time
    (``clock.local_release``). If its clock then shows a minute of its quiet window, it is held
    until the window ends (``clock.window_end``), or, when the template drops, not sent (it is
    counted, in the part of its base minute). A zone unknown on this host counts as the service's.
    A publish that overrides quiet hours (``quiet_mode`` ``override``) places everyone at its base minute."""
    zone_name = zone_name or plan["default_timezone"]
    if plan.get("quiet_mode") == "override":
        window = None
    elif window is None and plan.get("service_quiet"):
        window = (int(plan["service_quiet"][0]), int(plan["service_quiet"][1]))
    start = datetime.fromisoformat(plan["from"])
    try:
        clock.zone(zone_name)
    except ValueError:
        zone_name = plan["default_timezone"]
    if plan.get("local_time"):
        hour, minute = parse_local_time(plan["local_time"])
        base = clock.local_release(start, hour, minute, zone_name)
    else:
        base = clock.floor_minute(start)
    if window is None or not clock.in_window(base, zone_name, *window):
        return base, True
    if plan.get("quiet_mode") == "drop":
        return base, False
    return clock.window_end(base, zone_name, *window), True


def plan_parts(plan: dict[str, Any], clocks: list[tuple[str, Window | None]]) -> list[Part]:
    """The releases of a planned job: one per distinct minute that decides some (zone, window)'s
    part (``placement``), earliest first. Zones this host does not know are logged and counted as
    the service's."""
    by_minute: dict[datetime, set[str]] = {}
    for zone_name, window in clocks:
        try:
            clock.zone(zone_name)
        except ValueError:
            log.error("planned publish: time zone %r unknown on this host; its users get the default's", zone_name)
        minute, _ = placement(plan, zone_name, window)
        by_minute.setdefault(minute, set()).add(zone_name)
    return [Part(at, tuple(sorted(zs))) for at, zs in sorted(by_minute.items())]


def zone_groups(
    target: dict[str, Any], in_use: list[str | None], quiet_pairs: list[tuple[str | None, Window | None]]
) -> list[dict[str, Any]]:
    """The task sets of a planned job whose slot rows carry their zone (CQL 0004): one per (part,
    stored zone) that may hold recipients of that part; its tasks read only that zone's rows. A zone
    whose users all use the service's window lands in one part (``lookup`` False: the worker decides
    the whole zone at once, no MySQL query); one with users of their own windows may land in several,
    and each of those sets reads the zone and keeps its part's recipients (``lookup``: one MySQL
    query per page, as before). '' (users without a zone) is always read: users created later
    default to it."""
    windows: dict[str, set[Window | None]] = {slot_zone(z): {None} for z in [*in_use, None]}
    for z, w in quiet_pairs:
        windows.setdefault(slot_zone(z), {None}).add(w)
    groups = []
    for stored, ws in sorted(windows.items()):
        found = {placement(target, stored or None, w)[0] for w in ws}
        hit = sorted({next(i for i in range(len(target["parts"])) if in_part(target, i, m)) for m in found})
        groups += [{"part": p, "zone": stored, "lookup": len(ws) > 1} for p in hit]
    return groups


def task_unit(target: dict[str, Any], task_no: int) -> tuple[int, str | None, bool]:
    """What a task of a planned job does: (its part, the stored zone it reads or None for every row,
    whether it reads its recipients' clocks from MySQL per page). Task sets are ``tasks_per_part``
    tasks each: one per part (rows without a zone), or one per ``zone_groups`` group."""
    per = int(target["tasks_per_part"])
    groups = target.get("groups")
    if not groups:
        return task_no // per, None, True
    group = groups[task_no // per]
    return int(group["part"]), str(group["zone"]), bool(group["lookup"])


def local_parts(start: datetime, hour: int, minute: int, zones: list[str]) -> list[Part]:
    """The releases of a local-time publish without quiet hours made at ``start`` (see ``plan_parts``)."""
    plan = {"from": utc_iso(start), "default_timezone": zones[0], "local_time": f"{hour:02d}:{minute:02d}"}
    return plan_parts(plan, [(z, None) for z in zones])


def in_part(target: dict[str, Any], part: int, release: datetime) -> bool:
    """Does a recipient whose deciding minute is ``release`` belong to ``part``? Part i takes the
    minutes after part i-1's up to its own; the first takes everything up to its minute, the last
    everything after the one before it, so each recipient is in exactly one part even if its zone
    or window was not in use when the job was made."""
    ats = [datetime.fromisoformat(p["at"]) for p in target["parts"]]
    low = ats[part - 1] if part > 0 else None
    high = ats[part] if part < len(ats) - 1 else None
    return (low is None or release > low) and (high is None or release <= high)


def utc_iso(moment: datetime) -> str:
    """An instant (naive UTC or aware) as the aware ISO 8601 text a plan stores."""
    return clock.aware_utc(moment).isoformat()
