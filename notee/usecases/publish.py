"""Publish jobs: turn a publish (topic, condition, audience or cycle bucket, or a scheduled single
send) into one job row and one task per slot range.

Called by the publish API (``publish_topic``, ``schedule_single``) and the scheduler (``create_job``),
each with its request as one object (``TopicPublish``, ``ScheduledSingle``, ``JobRequest``). The job
stores the rendered payload, so workers never read the template and a template edited after the
publish does not change what that publish sends. The planning of its tasks and parts is
notee/usecases/planning.py; a job once made (status, list, cancel, requeue) notee/usecases/jobs.py.

Unit of work (docs/ARCHITECTURE.md): these functions write in the caller's session and never
commit; the caller commits (or rolls back) the job together with whatever else it did.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from notee.core import clock, tracing
from notee.core.errors import InvalidInput, NotFound
from notee.core.settings import Settings
from notee.core.vocabulary import AudienceTarget, ConditionTarget, TopicTarget, UserTarget, encode_target
from notee.domain import payload_variants, payloads, vapid, web_payloads
from notee.domain.conditions import parse_condition
from notee.domain.render import TemplateContent, render_all, variants_from_json
from notee.domain.rules import DEFAULT_TIMEZONE, check_data, check_send_inputs
from notee.domain.schedule import parse_local_time, validate_topic
from notee.store import audience_users_sql, jobs_sql, services_sql, templates_sql, users_sql
from notee.store.jobs_sql import JobRow, NewJob
from notee.store.mysql import AnyRow, db_now
from notee.store.runtime import Runtime
from notee.usecases.job_requests import JobRequest, ScheduledSingle, TopicPublish, client_idempotency_key, key_reused
from notee.usecases.planning import (
    audience_ranges,
    condition_plan,
    condition_walks,
    placement,
    plan_parts,
    quiet_window,
    task_plan,
    utc_iso,
    zone_groups,
)

log = logging.getLogger(__name__)


def _same_request(existing: JobRow, fingerprint: str) -> JobRow:
    """The job an idempotency key already created, if it was created by the same request."""
    if existing.request_hash is not None and existing.request_hash != fingerprint:
        raise key_reused()
    return existing


def check_send_at(session: Session, settings: Settings, send_at: datetime | None) -> datetime | None:
    """``send_at`` (aware) as the naive UTC instant the job row keeps, checked against the database
    clock (the clock the claim compares it with): at most ``schedule_grace_s`` in the past (then it
    is sent at once) and at most ``schedule_max_days`` ahead. InvalidInput (422) otherwise."""
    if send_at is None:
        return None
    moment = clock.naive_utc(send_at)
    now = db_now(session)
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


@dataclass(frozen=True, slots=True)
class JobPlan:
    """How a job's work is laid out (``create_job``): the target its row stores (with the plan of a
    topic publish planned by its recipients' clocks), one task per slot range, the occupied slots the
    tasks walk (None: every slot of each range) and the task sets held until their part's release."""

    target: dict[str, Any]
    ranges: list[tuple[int, int]]
    walked: list[int] | None
    holds: list[tuple[int, int, datetime]]  # (first task, last task, claimable from: naive UTC)


def create_job(runtime: Runtime, session: Session, request: JobRequest) -> JobRow:
    """Write the job and its tasks in the caller's transaction (the caller commits); with an
    idempotency key already used by this service, return that job instead (``JobRow.created`` is
    False then). A USER target (a scheduled single send) has one task. Raises NotFound (no such
    template for the service) and InvalidInput/PayloadTooLarge (rendering); InvalidInput when the
    idempotency key was used by a different request. ``JobRequest`` says what each field asks.
    Traced as ``notee.publish``; the job's payload carries its ``trace`` (docs/DEPLOY.md "Tracing")."""
    attributes = {"notee.service": request.service, "notee.method": request.method, "notee.type": request.type_}
    with tracing.span("notee.publish", attributes) as span:
        job = _create_job(runtime, session, request)
        if span is not None:
            span.set_attributes({"notee.job_id": job.job_id, "notee.job_created": job.created})
        return job


def _create_job(runtime: Runtime, session: Session, request: JobRequest) -> JobRow:
    kind, target_json = encode_target(request.target)
    fingerprint = request.fingerprint(kind, target_json)
    if request.idempotency_key is not None:
        existing = jobs_sql.job_by_idempotency_key(session, request.service, request.idempotency_key)
        if existing is not None:
            return _same_request(existing, fingerprint)
    template = _template_of(session, request)
    payload = render_payload(template, request, web=vapid.has_vapid_key(session, request.service))
    if (trace := tracing.traceparent()) is not None:  # the workers' task spans join this trace
        payload["trace"] = trace
    service_row = services_sql.get_service(session, request.service)
    plan = _plan_tasks(runtime, session, request, request.quiet_mode(template), service_row, kind, target_json)
    job = NewJob(
        job_id=str(uuid.uuid4()),
        service=request.service,
        notification_key=request.notification_key,
        method=request.method,
        type_=request.type_,
        target_kind=kind,
        target=plan.target,
        idempotency_key=request.idempotency_key,
        request_hash=fingerprint,
        variables=request.variables,
        overrides=request.overrides,
        payload=payload,
        slot_ranges=plan.ranges,
        dry_run=service_row is not None and service_row.delivery_mode == "dry_run",
        deadline_in_s=request.deadline_in_s,
        send_at=request.send_at,
    )
    winner = _insert(session, job, plan.holds, request.audience_users)
    if winner is not None:
        return winner
    _log_created(job, plan.walked)
    created = jobs_sql.get_job(session, job.job_id)
    assert created is not None
    return replace(created, created=True)


def _template_of(session: Session, request: JobRequest) -> AnyRow:
    """The request's template (read by its key unless the caller passed the row), checked against
    the request's service, method and type."""
    template = request.template
    if template is None:
        template = templates_sql.get_template_by_key(session, request.notification_key)
    if template is None or template.service != request.service:
        raise NotFound("no such notification template")
    if (template.notification_method, template.notification_type) != (request.method, request.type_):
        raise InvalidInput("notification_key does not belong to this method and type")
    return template


def render_payload(template: AnyRow, request: JobRequest, *, web: bool = False) -> dict[str, Any]:
    """The job's payload: rendered once here for every recipient of the job, once per locale
    variant (docs/FANOUT.md); the workers never render, they pick each recipient's variant. The
    rich fields (the template's ``payload``, the request's merged over it: ``overrides["payload"]``)
    are rendered and measured here too and travel as the job payload's ``rich`` (docs/PAYLOADS.md),
    a variant's own subtitle as its ``subtitle``; ``web``: Web Push's size limit applies too."""
    spec = payloads.merge(template.payload, (request.overrides or {}).get("payload"))
    fields = (template.title, template.body, template.data, template.defaults, template.ttl_seconds)
    content = TemplateContent(*fields, template.priority, variants_from_json(template.variants))
    (localized, subtitles), rich = payloads.render_with(
        spec,
        template.defaults,
        request.variables,
        lambda: payload_variants.with_missing(
            lambda: render_all(content, request.variables, request.overrides),
            lambda: payload_variants.render_subtitles(content, request.variables),
        ),
    )
    for key, push in {None: localized.default, **localized.variants}.items():
        sub = subtitles.get(key) if key else None
        payloads.check_rendered(payload_variants.for_variant(rich, sub), {key: push})
    if web:
        web_payloads.check_web_size(rich, {None: localized.default, **localized.variants})
    payload: dict[str, Any] = localized.as_job_payload()
    if rich:
        payload["rich"] = rich
    for tag, sub in subtitles.items():  # a variant's own subtitle: the workers apply it to ``rich``
        payload["variants"][tag]["subtitle"] = sub
    return payload


def _plan_tasks(
    runtime: Runtime,
    session: Session,
    request: JobRequest,
    quiet_mode: str | None,
    service_row: AnyRow | None,
    kind: str,
    target: dict[str, Any],
) -> JobPlan:
    """The job's tasks and the target its row stores. The slots the job walks are read before
    writing: the target's occupied slots when its template's occupancy is known, else every slot
    that exists now (a scheduled job too: docs/API.md "Scheduled sends" says what that means for
    later subscribers); a condition's walked topics one after the other, an audience's user-id slots
    (``_layout``). A topic, condition or audience publish with a local time or recipients in quiet
    hours now is planned in parts (``_plan_releases``): one task set per part (or per part and zone,
    for Cassandra rows that carry it), each walking every slot once."""
    ranges, walked, extra = _layout(runtime, request)
    target = target | extra
    holds: list[tuple[int, int, datetime]] = []
    if kind in ("TOPIC", "COND", "AUD") and request.method in ("TOPIC", "SINGLE"):  # not the cycle or a single user
        zoned = kind != "AUD" and service_row is not None and bool(service_row.slot_zones)
        planned = _plan_releases(session, request, quiet_mode, service_row, len(ranges), zoned)
        if planned is not None:
            fields, holds = planned
            target = request.asked_target(target) | fields
            ranges = ranges * len(holds)  # set i = tasks i*S .. i*S+S-1, each walking every slot once
    if walked is not None:
        target = target | {"slots": walked}  # the occupied slots: the tasks skip the others
    return JobPlan(target, ranges, walked, holds)


def _layout(runtime: Runtime, request: JobRequest) -> tuple[list[tuple[int, int]], list[int] | None, dict[str, Any]]:
    """A job's task ranges before any planning by clocks, the occupied slots they walk (None: every
    slot), and what the stored target gets besides: a condition's walks (docs/AUDIENCES.md)."""
    target = request.target
    if isinstance(target, UserTarget):
        return [(0, 0)], None, {}
    if isinstance(target, AudienceTarget):
        users = None if request.audience_users is None else len(request.audience_users)
        return audience_ranges(users), None, {}
    args = (runtime.statements, request.service, request.method, request.type_, request.notification_key)
    if isinstance(target, ConditionTarget):
        condition = parse_condition(target.condition)
        walked = condition_walks(
            runtime.statements, request.service, request.type_, condition, runtime.settings.condition_members_max
        )
        ranges, walks = condition_plan(*args, walked)
        return ranges, None, {"topics": list(condition.topics), "walks": walks}
    ranges, slots = task_plan(*args, target)
    return ranges, slots, {}


def _plan_releases(
    session: Session,
    request: JobRequest,
    quiet_mode: str | None,
    service_row: AnyRow | None,
    tasks_per_part: int,
    zoned: bool,
) -> tuple[dict[str, Any], list[tuple[int, int, datetime]]] | None:
    """The plan of a topic publish by its recipients' clocks: the fields its target stores (the
    plan, its parts, its zone groups) and its task sets, each held until its part's release and
    never before a scheduled publish's send_at. None when nobody is in quiet hours now and no local
    time is asked: a plain job, no per-page lookups."""
    start = request.at or request.send_at or db_now(session)
    default_zone = service_row.timezone if service_row is not None else DEFAULT_TIMEZONE
    service_quiet = quiet_window(service_row.quiet_start, service_row.quiet_end) if service_row is not None else None
    plan: dict[str, Any] = {
        "from": utc_iso(start),
        "default_timezone": default_zone,
        "service_quiet": list(service_quiet) if service_quiet else None,
        "quiet_mode": quiet_mode,
    }
    if request.local_time is not None:
        plan["local_time"] = request.local_time
    in_use = users_sql.zones_in_use(session, request.service)
    quiet_pairs = users_sql.quiet_in_use(session, request.service)
    zones = {z or default_zone for z in in_use} | {default_zone}
    clocks = {(z, service_quiet) for z in zones} | {(z or default_zone, w) for z, w in quiet_pairs}
    parts = plan_parts(plan, sorted(clocks, key=repr))
    if request.local_time is not None and not parts:
        raise InvalidInput(f"local_time: no time zone of this service is known on this host ({default_zone})")
    now_minute = clock.floor_minute(clock.aware_utc(start))
    quiet_now = any(placement(plan, z, w) != (now_minute, True) for z, w in clocks)
    if request.local_time is None and not quiet_now:
        return None
    plan |= {"tasks_per_part": tasks_per_part, "parts": [{"at": utc_iso(p.at), "zones": list(p.zones)} for p in parts]}
    if zoned:  # every slot row carries its zone (a MySQL walk reads its page's clocks instead)
        plan["groups"] = zone_groups(plan, in_use, quiet_pairs)
        units = [int(g["part"]) for g in plan["groups"]]
    else:  # rows without a zone (before `notee backfill-zones`): every part walks every row
        units = list(range(len(parts)))
    holds = []
    for i, p in enumerate(units):  # each set is claimable at its part's minute
        release = parts[p].at.replace(tzinfo=None)
        if request.send_at is not None:
            release = max(release, request.send_at)  # never before a scheduled publish's send_at
        holds.append((i * tasks_per_part, (i + 1) * tasks_per_part - 1, release))
    return plan, holds


def _insert(
    session: Session, job: NewJob, holds: list[tuple[int, int, datetime]], users: tuple[str, ...] | None
) -> JobRow | None:
    """Insert the job, its tasks and their holds (and a user list's users); None when inserted. When
    another request with the same idempotency key won the race, that job instead (if it is the same
    request)."""
    try:
        with session.begin_nested():  # a SAVEPOINT, so an idempotency race does not abort the caller
            jobs_sql.insert_job(session, job)
            for first, last, release in holds:
                jobs_sql.hold_tasks(session, job.job_id, first, last, release)
            if users:
                audience_users_sql.insert_job_users(session, job.job_id, users)
    except IntegrityError:
        if job.idempotency_key is None:
            raise
        existing = jobs_sql.job_by_idempotency_key(session, job.service, job.idempotency_key, latest=True)
        if existing is None:
            raise
        return _same_request(existing, job.request_hash)
    return None


def _log_created(job: NewJob, walked: list[int] | None) -> None:
    log.info(
        "job %s created: service=%s %s/%s %s %d task(s) over %s%s%s",
        job.job_id,
        job.service,
        job.method,
        job.type_,
        job.target_kind,
        len(job.slot_ranges),
        f"slots 0..{job.slot_ranges[-1][1]}" if walked is None else f"{len(walked)} occupied slot(s)",
        " (dry run)" if job.dry_run else "",
        f" scheduled for {job.send_at:%Y-%m-%dT%H:%M:%S}Z" if job.send_at else "",
    )


def publish_topic(runtime: Runtime, session: Session, publish: TopicPublish) -> JobRow:
    """The topic publish API's one domain call: ``resolve_topic``, then ``create_job`` (in the
    caller's transaction: the caller commits)."""
    return create_job(runtime, session, resolve_topic(runtime, session, publish))


def resolve_topic(runtime: Runtime, session: Session, publish: TopicPublish) -> JobRequest:
    """Check a topic publish and resolve its TOPIC template (read once: the job takes the row),
    reading only: the one validation path of the topic publish and of its preview."""
    validate_topic(publish.topic)
    if publish.local_time is not None:
        parse_local_time(publish.local_time)
    check_send_inputs(publish.variables, publish.overrides)
    when = check_send_at(session, runtime.settings, publish.send_at)
    template = templates_sql.get_template(session, publish.service, "TOPIC", publish.type_)
    if template is None:
        raise NotFound(f"no TOPIC template of type {publish.type_!r}")
    return JobRequest(
        service=publish.service,
        notification_key=template.notification_key,
        method="TOPIC",
        type_=publish.type_,
        target=TopicTarget(publish.topic, publish.platforms),
        idempotency_key=client_idempotency_key(publish.idempotency_key),
        variables=publish.variables,
        overrides=publish.overrides,
        send_at=when,
        local_time=publish.local_time,
        at=publish.at,
        template=template,
    )


def schedule_single(runtime: Runtime, session: Session, send: ScheduledSingle) -> JobRow:
    """Instead of sending now, a job of one task addressed to the user (``UserTarget``), rendered now
    like any job; at send_at a worker sends it to the devices the user has then. The caller commits.
    Raises NotFound (user, template), InvalidInput."""
    extra = check_data(send.data)
    overrides = send.overrides(extra)
    check_send_inputs(send.variables, overrides)
    when = check_send_at(session, runtime.settings, send.send_at)
    assert when is not None
    if users_sql.get_user(session, send.service, send.user_id) is None:
        raise NotFound("no such user")
    template = templates_sql.get_template(session, send.service, "SINGLE", send.type_)
    if template is None:
        raise NotFound(f"no SINGLE template of type {send.type_!r}")
    request = JobRequest(
        service=send.service,
        notification_key=template.notification_key,
        method="SINGLE",
        type_=send.type_,
        target=UserTarget(send.user_id),
        idempotency_key=client_idempotency_key(send.idempotency_key),
        variables=send.variables,
        overrides=overrides,
        send_at=when,
        template=template,
    )
    return create_job(runtime, session, request)
