"""Publish jobs: turn a publish (topic or cycle bucket) into one job row and one task per slot range.

Called by the publish API (``publish_topic``) and the scheduler (``create_job``). The job stores the
rendered payload, so workers never read the template and a template edited after the publish does
not change what that publish sends.

Unit of work (docs/ARCHITECTURE.md): these functions write in the caller's session and never
commit; the caller commits (or rolls back) the job together with whatever else it did.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from notee.core import clock
from notee.core.errors import Conflict, InvalidInput, NotFound
from notee.core.settings import Settings
from notee.core.vocabulary import (
    CycleTarget,
    Progress,
    Target,
    TopicTarget,
    UserTarget,
    encode_target,
    pack_slots,
    slot_ranges,
)
from notee.domain.render import TemplateContent, render_all, variants_from_json
from notee.domain.rules import DEFAULT_TIMEZONE, check_data, check_send_inputs
from notee.domain.schedule import parse_local_time, validate_topic
from notee.store import job_queue as store
from notee.store import registry_sql
from notee.store.cql.counters import max_slot
from notee.store.cql.rows import slot_zone
from notee.store.cql.statements import Statements
from notee.store.job_queue import JobRow as JobRow  # re-exported: the API names jobs through this layer
from notee.store.mysql import db_now
from notee.store.runtime import Runtime

log = logging.getLogger(__name__)

# One slot (<= ~30,000 rows) per task when a target's occupancy is unknown: the unit of parallelism.
# 10 M devices are 334 tasks, which any number of workers share. With occupancy known, tasks hold the
# occupied slots, as many as add up to one slot's worth of blocks (``task_plan``).
SLOTS_PER_TASK = 1

# Idempotency-key namespaces: a client's Idempotency-Key is stored as ``client:<key>``; the
# scheduler's keys are ``cycle:...`` (notee/core/clock.py). Neither can name the other's job.
CLIENT_KEY_PREFIX = "client:"


def client_idempotency_key(key: str | None) -> str | None:
    """The stored form of a client's Idempotency-Key header."""
    return None if key is None else CLIENT_KEY_PREFIX + key


def request_hash(
    *,
    method: str,
    type_: str,
    target_kind: str,
    target: dict[str, Any],
    variables: dict[str, Any] | None,
    overrides: dict[str, Any] | None,
    send_at: datetime | None = None,
) -> str:
    """sha256 of what a publish asks for (canonical JSON; an empty and a missing map are the same
    request). Stored with the job: the same idempotency key with another hash is a different request.
    ``send_at`` enters only when given, so the hashes of unscheduled requests did not change."""
    fields: dict[str, Any] = {
        "method": method,
        "type": type_,
        "target_kind": target_kind,
        "target": target,
        "variables": variables or None,
        "overrides": overrides or None,
    }
    if send_at is not None:
        fields["send_at"] = send_at.isoformat()
    canonical = json.dumps(
        fields,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _same_request(existing: JobRow, fingerprint: str) -> JobRow:
    """The job an idempotency key already created, if it was created by the same request."""
    if existing.request_hash is not None and existing.request_hash != fingerprint:
        raise InvalidInput(
            "Idempotency-Key was already used with a different request",
            details=[
                {
                    "loc": ["header", "Idempotency-Key"],
                    "type": "idempotency_key_reused",
                    "msg": "reused with a different request body or target",
                }
            ],
        )
    return existing


def check_send_at(session: Session, settings: Settings, send_at: datetime | None) -> datetime | None:
    """``send_at`` (aware) as the naive UTC instant the job row keeps, checked against the database
    clock (the clock the claim compares it with): at most ``schedule_grace_s`` in the past (then it
    is sent at once) and at most ``schedule_max_days`` ahead. InvalidInput (422) otherwise."""
    if send_at is None:
        return None
    moment = clock.naive_utc(send_at)
    now = store.db_now(session)
    earliest = now - timedelta(seconds=settings.schedule_grace_s)
    latest = now + timedelta(days=settings.schedule_max_days)
    problem = None
    if moment < earliest:
        problem = ("send_at_in_past", f"is more than {settings.schedule_grace_s} s in the past")
    elif moment > latest:
        problem = ("send_at_too_far", f"is more than {settings.schedule_max_days} days ahead")
    if problem is None:
        return moment
    raise InvalidInput(
        f"send_at {problem[1]} (now is {now:%Y-%m-%dT%H:%M:%S}Z on the server)",
        details=[
            {
                "loc": ["body", "send_at"],
                "type": problem[0],
                "msg": problem[1],
                "ctx": {"now": f"{now:%Y-%m-%dT%H:%M:%S.%f}Z"},
            }
        ],
    )


def create_job(
    runtime: Runtime,
    session: Session,
    *,
    service: str,
    notification_key: str,
    method: str,
    type_: str,
    target: Target,
    idempotency_key: str | None,
    variables: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    deadline_in_s: float | None = None,
    send_at: datetime | None = None,
    local_time: str | None = None,
    at: datetime | None = None,
) -> JobRow:
    """Write the job and its tasks in the caller's transaction (the caller commits); with an
    idempotency key already used by this service, return that job instead (``JobRow.created`` is
    False then). ``deadline_in_s``: seconds from now (database clock) after which its unfinished
    tasks expire instead of sending. ``send_at``: naive UTC, checked by ``check_send_at``; the job is
    scheduled until then. A USER target (a scheduled single send) has one task. Raises NotFound (no such template for the service) and
    InvalidInput/PayloadTooLarge (rendering);
    InvalidInput when the idempotency key was used by a different request.

    ``local_time`` ("HH:MM", a TOPIC target): the job reaches each recipient when the clock of its
    zone shows that time (``local_parts``); ``at`` (naive UTC) replaces the database clock's now as
    the instant the releases are computed from (tests simulate a date with it)."""
    kind, target_json = encode_target(target)
    asked = target_json if local_time is None else target_json | {"local_time": local_time}
    fingerprint = request_hash(
        method=method,
        type_=type_,
        target_kind=kind,
        target=asked,
        variables=variables,
        overrides=overrides,
        send_at=send_at,
    )
    if idempotency_key is not None:
        existing = store.job_by_idempotency_key(session, service, idempotency_key)
        if existing is not None:
            return _same_request(existing, fingerprint)
    template = registry_sql.get_template_by_key(session, notification_key)
    if template is None or template.service != service:
        raise NotFound("no such notification template")
    if (template.notification_method, template.notification_type) != (method, type_):
        raise InvalidInput("notification_key does not belong to this method and type")
    # Rendered once here for every recipient of the job, once per locale variant (docs/FANOUT.md);
    # the workers never render, they pick each recipient's variant.
    payload = render_all(
        TemplateContent(
            template.title,
            template.body,
            template.data,
            template.defaults,
            template.ttl_seconds,
            template.priority,
            variants_from_json(template.variants),
        ),
        variables,
        overrides,
    ).as_job_payload()
    service_row = registry_sql.get_service(session, service)
    dry_run = service_row is not None and service_row.delivery_mode == "dry_run"
    # The slots the job walks, read before writing: the target's occupied slots when its template's
    # occupancy is known, else every slot that exists now (a scheduled job too: docs/API.md
    # "Scheduled sends" says what that means for later subscribers).
    ranges, walked = (
        ([(0, 0)], None)
        if isinstance(target, UserTarget)
        else task_plan(runtime.statements, service, method, type_, notification_key, target)
    )
    parts: list[Part] = []
    units: list[int] = []  # a planned job's task sets: the part each is released with
    if method == "TOPIC" and kind == "TOPIC":  # local time and quiet hours concern topic publishes only
        start = at or send_at or db_now(session)
        default_zone = service_row.timezone if service_row is not None else DEFAULT_TIMEZONE
        service_quiet = _window(service_row.quiet_start, service_row.quiet_end) if service_row is not None else None
        plan: dict[str, Any] = {
            "from": _iso(start),
            "default_timezone": default_zone,
            "service_quiet": list(service_quiet) if service_quiet else None,
            "quiet_mode": template.quiet_hours,
        }
        if local_time is not None:
            plan["local_time"] = local_time
        in_use = registry_sql.zones_in_use(session, service)
        quiet_pairs = registry_sql.quiet_in_use(session, service)
        zones = {z or default_zone for z in in_use} | {default_zone}
        clocks = {(z, service_quiet) for z in zones} | {(z or default_zone, w) for z, w in quiet_pairs}
        parts = plan_parts(plan, sorted(clocks, key=repr))
        if local_time is not None and not parts:
            raise InvalidInput(f"local_time: no time zone of this service is known on this host ({default_zone})")
        now_minute = clock.floor_minute(clock.aware_utc(start))
        quiet_now = any(placement(plan, z, w) != (now_minute, True) for z, w in clocks)
        if local_time is not None or quiet_now:
            target_json = (
                asked
                | plan
                | {
                    "tasks_per_part": len(ranges),
                    "parts": [{"at": _iso(p.at), "zones": list(p.zones)} for p in parts],
                }
            )
            if service_row is not None and service_row.slot_zones:  # every slot row carries its zone
                target_json["groups"] = zone_groups(target_json, in_use, quiet_pairs)
                units = [int(g["part"]) for g in target_json["groups"]]
            else:  # rows without a zone (before `notee backfill-zones`): every part walks every row
                units = list(range(len(parts)))
            ranges = ranges * len(units)  # unit i = tasks i*S .. i*S+S-1, each walking every slot once
        else:
            parts = []  # nobody in quiet hours now and no local time: a plain job, no per-page lookups
    if walked is not None:
        target_json = target_json | {"slots": walked}  # the occupied slots: the tasks skip the others
    job_id = str(uuid.uuid4())
    try:
        with session.begin_nested():  # a SAVEPOINT, so an idempotency race does not abort the caller
            store.insert_job(
                session,
                job_id=job_id,
                service=service,
                notification_key=notification_key,
                method=method,
                type_=type_,
                target_kind=kind,
                target=target_json,
                idempotency_key=idempotency_key,
                request_hash=fingerprint,
                variables=variables,
                overrides=overrides,
                payload=payload,
                dry_run=dry_run,
                slot_ranges=ranges,
                deadline_in_s=deadline_in_s,
                send_at=send_at,
            )
            per_unit = len(ranges) // max(len(units), 1)
            for i, p in enumerate(units):  # each unit is claimable at its part's minute
                release = parts[p].at.replace(tzinfo=None)
                if send_at is not None:
                    release = max(release, send_at)  # never before a scheduled publish's send_at
                store.hold_tasks(session, job_id, i * per_unit, (i + 1) * per_unit - 1, release)
    except IntegrityError:
        if idempotency_key is None:
            raise
        existing = store.job_by_idempotency_key(session, service, idempotency_key, latest=True)
        if existing is None:
            raise
        return _same_request(existing, fingerprint)
    log.info(
        "job %s created: service=%s %s/%s %s %d task(s) over %s%s%s",
        job_id,
        service,
        method,
        type_,
        kind,
        len(ranges),
        f"slots 0..{ranges[-1][1]}" if walked is None else f"{len(walked)} occupied slot(s)",
        " (dry run)" if dry_run else "",
        f" scheduled for {send_at:%Y-%m-%dT%H:%M:%S}Z" if send_at else "",
    )
    job = store.get_job(session, job_id)
    assert job is not None
    return replace(job, created=True)


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


def task_slots(target: dict[str, Any], current_slot: int, slot_to: int) -> list[int]:
    """The slots a task still walks, from its checkpoint's slot to its last: every one, or, in a job
    planned from occupancy, those in the job's ``slots``."""
    listed = target.get("slots")
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


def _window(start: int | None, end: int | None) -> Window | None:
    return None if start is None or end is None else (int(start), int(end))


def placement(plan: dict[str, Any], zone_name: str | None, window: Window | None) -> tuple[datetime, bool]:
    """Where a recipient of ``zone_name`` (None: the service's) with quiet hours ``window`` (None:
    the service's) goes in a planned job: (the minute that decides its part, is it sent). Its base
    minute is the publish's (``from``) or, with ``local_time``, when its clock next shows that time
    (``clock.local_release``). If its clock then shows a minute of its quiet window, it is held
    until the window ends (``clock.window_end``), or, when the template drops, not sent (it is
    counted, in the part of its base minute). A zone unknown on this host counts as the service's."""
    zone_name = zone_name or plan["default_timezone"]
    if window is None and plan.get("service_quiet"):
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
    plan = {"from": _iso(start), "default_timezone": zones[0], "local_time": f"{hour:02d}:{minute:02d}"}
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


def _iso(moment: datetime) -> str:
    return clock.aware_utc(moment).isoformat()


def publish_topic(
    runtime: Runtime,
    session: Session,
    *,
    service: str,
    type_: str,
    topic: str,
    idempotency_key: str | None,
    variables: dict[str, Any] | None,
    overrides: dict[str, Any] | None,
    send_at: datetime | None = None,
    local_time: str | None = None,
    at: datetime | None = None,
) -> JobRow:
    """The topic publish API's one domain call: resolve the TOPIC template, then ``create_job`` (in
    the caller's transaction: the caller commits). ``send_at`` (aware): sent then, not now;
    ``local_time``: see ``create_job``."""
    validate_topic(topic)
    if local_time is not None:
        parse_local_time(local_time)
    check_send_inputs(variables, overrides)
    when = check_send_at(session, runtime.settings, send_at)
    template = registry_sql.get_template(session, service, "TOPIC", type_)
    if template is None:
        raise NotFound(f"no TOPIC template of type {type_!r}")
    return create_job(
        runtime,
        session,
        service=service,
        notification_key=template.notification_key,
        method="TOPIC",
        type_=type_,
        target=TopicTarget(topic),
        idempotency_key=client_idempotency_key(idempotency_key),
        variables=variables,
        overrides=overrides,
        send_at=when,
        local_time=local_time,
        at=at,
    )


def schedule_single(
    runtime: Runtime,
    session: Session,
    *,
    service: str,
    user_id: str,
    type_: str,
    send_at: datetime,
    idempotency_key: str | None,
    variables: dict[str, Any] | None,
    data: dict[str, Any] | None,
) -> JobRow:
    """A single send with ``send_at`` (aware): instead of sending now, a job of one task addressed to
    the user (``UserTarget``), rendered now like any job; at send_at a worker sends it to the devices
    the user has then. The caller commits. Raises NotFound (user, template), InvalidInput."""
    extra = check_data(data)
    check_send_inputs(variables, None)
    when = check_send_at(session, runtime.settings, send_at)
    assert when is not None
    if registry_sql.get_user(session, service, user_id) is None:
        raise NotFound("no such user")
    template = registry_sql.get_template(session, service, "SINGLE", type_)
    if template is None:
        raise NotFound(f"no SINGLE template of type {type_!r}")
    return create_job(
        runtime,
        session,
        service=service,
        notification_key=template.notification_key,
        method="SINGLE",
        type_=type_,
        target=UserTarget(user_id),
        idempotency_key=client_idempotency_key(idempotency_key),
        variables=variables,
        overrides={"data": extra} if extra else None,
        send_at=when,
    )


def job_status(session: Session, service: str, job_id: str) -> tuple[JobRow, Progress]:
    """A job of this service and its rolled-up progress; NotFound for unknown or another tenant's job."""
    job = store.get_job(session, job_id, service)
    if job is None:
        raise NotFound("no such job")
    return job, store.progress(session, job_id)


def cancel_job(session: Session, service: str, job_id: str) -> tuple[JobRow, Progress]:
    """Cancel a scheduled, queued or running job; a finished one is answered as it is (cancelling is idempotent).
    The caller commits."""
    if store.get_job(session, job_id, service) is None:
        raise NotFound("no such job")
    if store.cancel_job(session, service, job_id):
        log.info("job %s of %s cancelled", job_id, service)
    job = store.get_job(session, job_id, service)
    assert job is not None  # it was there a moment ago, in this transaction
    return job, store.progress(session, job_id)


def list_jobs(
    session: Session,
    service: str,
    *,
    state: str | None = None,
    method: str | None = None,
    type_: str | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    before: tuple[datetime, str] | None = None,
    limit: int = 50,
) -> list[tuple[JobRow, Progress]]:
    """A service's jobs (topic publishes and cycle minutes alike), newest first, with progress."""
    return store.list_jobs(
        session,
        service,
        state=state,
        method=method,
        type_=type_,
        created_from=created_from,
        created_to=created_to,
        before=before,
        limit=limit,
    )


def requeue_job(session: Session, job_id: str, service: str | None = None) -> tuple[JobRow, Progress]:
    """Operators: resume a failed job from its tasks' checkpoints (``notee jobs requeue``, the admin
    API). NotFound for an unknown job (or another tenant's, with ``service``); Conflict unless the
    job failed. The caller commits."""
    job = store.get_job(session, job_id, service)
    if job is None:
        raise NotFound("job not found")
    if store.requeue_failed(session, job_id, service) == 0:
        raise Conflict(f"job is {job.state}; only a failed job can be requeued")
    log.info("job %s requeued from its checkpoints (was failed: %s)", job_id, job.error)
    return replace(job, state="running", error=None, finished_at=None), store.progress(session, job_id)
