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
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from notee.domain.render import TemplateContent, render
from notee.domain.rules import check_data, check_send_inputs
from notee.domain.schedule import validate_topic
from notee.errors import Conflict, InvalidInput, NotFound
from notee.runtime import Runtime
from notee.settings import Settings
from notee.store import job_queue as store
from notee.store import registry_sql
from notee.store.cql import max_slot
from notee.store.job_queue import JobRow as JobRow  # re-exported: the API names jobs through this layer
from notee.vocabulary import Progress, Target, TopicTarget, UserTarget, encode_target, slot_ranges

log = logging.getLogger(__name__)

# One slot (<= ~30,000 rows) per task: the unit of parallelism and of lease loss. 10 M devices are
# 334 tasks, which any number of workers share.
SLOTS_PER_TASK = 1

# Idempotency-key namespaces: a client's Idempotency-Key is stored as ``client:<key>``; the
# scheduler's keys are ``cycle:...`` (notee/scheduler/clock.py). Neither can name the other's job.
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
    moment = send_at.astimezone(UTC).replace(tzinfo=None)
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
) -> JobRow:
    """Write the job and its tasks in the caller's transaction (the caller commits); with an
    idempotency key already used by this service, return that job instead (``JobRow.created`` is
    False then). ``deadline_in_s``: seconds from now (database clock) after which its unfinished
    tasks expire instead of sending. ``send_at``: naive UTC, checked by ``check_send_at``; the job is
    scheduled until then. A USER target (a scheduled single send) has one task. Raises NotFound (no such template for the service) and
    InvalidInput/PayloadTooLarge (rendering);
    InvalidInput when the idempotency key was used by a different request."""
    kind, target_json = encode_target(target)
    fingerprint = request_hash(
        method=method,
        type_=type_,
        target_kind=kind,
        target=target_json,
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
    # Rendered once here for every recipient of the job (docs/FANOUT.md); the workers never render.
    payload = render(
        TemplateContent(
            template.title, template.body, template.data, template.defaults, template.ttl_seconds, template.priority
        ),
        variables,
        overrides,
    ).as_job_payload()
    service_row = registry_sql.get_service(session, service)
    dry_run = service_row is not None and service_row.delivery_mode == "dry_run"
    # Read the numbering counter before writing: the job walks every slot that exists now (a
    # scheduled job too: docs/API.md "Scheduled sends" says what that means for later subscribers).
    top = 0 if isinstance(target, UserTarget) else max_slot(runtime.statements, service, method, type_)
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
                slot_ranges=slot_ranges(top, SLOTS_PER_TASK),
                deadline_in_s=deadline_in_s,
                send_at=send_at,
            )
    except IntegrityError:
        if idempotency_key is None:
            raise
        existing = store.job_by_idempotency_key(session, service, idempotency_key, latest=True)
        if existing is None:
            raise
        return _same_request(existing, fingerprint)
    log.info(
        "job %s created: service=%s %s/%s %s slots 0..%d%s%s",
        job_id,
        service,
        method,
        type_,
        kind,
        top,
        " (dry run)" if dry_run else "",
        f" scheduled for {send_at:%Y-%m-%dT%H:%M:%S}Z" if send_at else "",
    )
    job = store.get_job(session, job_id)
    assert job is not None
    return replace(job, created=True)


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
) -> JobRow:
    """The topic publish API's one domain call: resolve the TOPIC template, then ``create_job`` (in
    the caller's transaction: the caller commits). ``send_at`` (aware): sent then, not now."""
    validate_topic(topic)
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
