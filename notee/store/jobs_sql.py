"""All SQL of publish jobs: the job rows and what is read or decided about a whole job.

Insert a job with its tasks (``NewJob``), read it (by id, by idempotency key), hold a planned job's
task sets until their release, roll its tasks' counters up into its progress, list a service's jobs
(``JobFilter``), cancel and requeue (operators), record a final state's webhook event, prune finished
jobs (retention). The task leases are notee/store/task_leases.py, the claim's order between tenants
notee/store/claim_order.py. Functions take the caller's Session and never commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from notee.core.vocabulary import JobFilter, JobState, Progress
from notee.store import webhooks_sql
from notee.store.mysql import affected

# What encode_target writes (notee/core/vocabulary.py); checked here, not by the table.
TARGET_KINDS = ("TOPIC", "CYCLE", "USER", "COND", "AUD")


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    service: str
    notification_key: str
    method: str
    type_: str
    target_kind: str
    target: dict[str, Any]
    idempotency_key: str | None
    request_hash: str | None  # sha256 of the request that created it (None: created before hashing)
    payload: dict[str, Any]
    state: JobState
    task_count: int
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    dry_run: bool = False  # made in the service's dry_run delivery mode: the log provider sends it
    deadline: datetime | None = None  # a task not finished by then is expired, not run (cycle jobs)
    send_at: datetime | None = None  # scheduled: no task is claimed before this instant (UTC)
    created: bool = False  # True only on the call that inserted it


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job row to insert, with one task row per slot range (``insert_job``)."""

    job_id: str
    service: str
    notification_key: str
    method: str
    type_: str
    target_kind: str
    target: dict[str, Any]
    idempotency_key: str | None
    request_hash: str
    variables: dict[str, Any] | None
    overrides: dict[str, Any] | None
    payload: dict[str, Any]  # rendered once per job (every locale variant): workers never render
    slot_ranges: list[tuple[int, int]]  # one task each
    dry_run: bool = False
    deadline_in_s: float | None = None  # the deadline, that many seconds from now on the database clock
    send_at: datetime | None = None  # naive UTC: scheduled until then


_JOB_COLUMNS = (
    "job_id, service, notification_key, notification_method, notification_type, target_kind, target, "
    "idempotency_key, request_hash, payload, state, task_count, error, created_at, started_at, finished_at, dry_run, "
    "deadline, send_at"
)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _job(row: Any, created: bool = False) -> JobRow:
    return JobRow(
        job_id=row.job_id,
        service=row.service,
        notification_key=row.notification_key,
        method=row.notification_method,
        type_=row.notification_type,
        target_kind=row.target_kind,
        target=_json(row.target),
        idempotency_key=row.idempotency_key,
        request_hash=row.request_hash,
        payload=_json(row.payload),
        state=row.state,
        task_count=row.task_count,
        error=row.error,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        dry_run=bool(row.dry_run),
        deadline=row.deadline,
        send_at=row.send_at,
        created=created,
    )


def job_by_idempotency_key(
    session: Session, service: str, idempotency_key: str, *, latest: bool = False
) -> JobRow | None:
    """``latest``: a locking read, which sees rows committed after this transaction's snapshot (the
    winner of an idempotency race), not the REPEATABLE READ snapshot."""
    row = session.execute(
        text(
            f"SELECT {_JOB_COLUMNS} FROM fanout_job WHERE service = :s AND idempotency_key = :k"
            + (" LOCK IN SHARE MODE" if latest else "")
        ),
        {"s": service, "k": idempotency_key},
    ).one_or_none()
    return _job(row) if row else None


def get_job(session: Session, job_id: str, service: str | None = None) -> JobRow | None:
    """The job, or None; with ``service``, None also for another tenant's job."""
    sql = f"SELECT {_JOB_COLUMNS} FROM fanout_job WHERE job_id = :j"
    params: dict[str, Any] = {"j": job_id}
    if service is not None:
        sql += " AND service = :s"
        params["s"] = service
    row = session.execute(text(sql), params).one_or_none()
    return _job(row) if row else None


def insert_job(session: Session, job: NewJob) -> None:
    """Insert the job row and one task row per slot range, in the caller's transaction.
    ``deadline_in_s``: the job's deadline, that many seconds from now on the database clock.
    ``send_at`` (naive UTC): the job is 'scheduled' while it is in the future (database clock) and
    its tasks are claimable from then on (``lease_until = send_at``): the claim never takes them earlier.

    Raises ``sqlalchemy.exc.IntegrityError`` when (service, idempotency_key) already exists, and
    ValueError for a target kind the workers do not know (the table has no CHECK of it: migration 0026)."""
    if job.target_kind not in TARGET_KINDS:
        raise ValueError(f"unknown target kind {job.target_kind!r}; one of {', '.join(TARGET_KINDS)}")
    session.execute(
        text(
            "INSERT INTO fanout_job (job_id, service, notification_key, notification_method, notification_type,"
            " target_kind, target, idempotency_key, request_hash, variables, overrides, payload, dry_run, state,"
            " task_count, created_at, deadline, send_at) VALUES (:j, :s, :k, :m, :t, :tk, :tg, :ik, :rh, :v, :o, :p,"
            " :dry, IF(:sa IS NOT NULL AND :sa > UTC_TIMESTAMP(6), 'scheduled', 'queued'), :n, UTC_TIMESTAMP(6),"
            " CASE WHEN :dl IS NULL THEN NULL ELSE UTC_TIMESTAMP(6) + INTERVAL :dl MICROSECOND END, :sa)"
        ),
        {
            "j": job.job_id,
            "s": job.service,
            "k": job.notification_key,
            "m": job.method,
            "t": job.type_,
            "tk": job.target_kind,
            "tg": json.dumps(job.target),
            "ik": job.idempotency_key,
            "rh": job.request_hash,
            "v": json.dumps(job.variables) if job.variables is not None else None,
            "o": json.dumps(job.overrides) if job.overrides is not None else None,
            "p": json.dumps(job.payload),
            "dry": job.dry_run,
            "n": len(job.slot_ranges),
            "dl": None if job.deadline_in_s is None else max(0, int(job.deadline_in_s * 1_000_000)),
            "sa": job.send_at,
        },
    )
    session.execute(
        text(
            "INSERT INTO fanout_task (job_id, task_no, slot_from, slot_to, current_slot, state, lease_until)"
            " VALUES (:j, :n, :a, :b, :a, 'queued', GREATEST(UTC_TIMESTAMP(6), COALESCE(:sa, UTC_TIMESTAMP(6))))"
        ),
        [{"j": job.job_id, "n": i, "a": a, "b": b, "sa": job.send_at} for i, (a, b) in enumerate(job.slot_ranges)],
    )


def hold_tasks(session: Session, job_id: str, task_from: int, task_to: int, until: datetime) -> None:
    """Tasks ``task_from..task_to`` of a job just inserted become claimable at ``until`` (naive UTC,
    database clock) instead of at once: the claim takes a queued task only when lease_until <= now
    (the release of one part of a local-time publish)."""
    session.execute(
        text("UPDATE fanout_task SET lease_until = :u WHERE job_id = :j AND task_no BETWEEN :a AND :b"),
        {"u": until, "j": job_id, "a": task_from, "b": task_to},
    )


def _rollup(t: str) -> str:
    """The SELECT list that sums the counters of the task rows aliased ``t`` into a job's progress."""
    counters = ("targeted", "sent", "failed", "pruned", "retried", "no_credentials", "quiet_dropped", "ttl_expired")
    done = f"COALESCE(SUM({t}.state NOT IN ('queued', 'running')), 0) AS tasks_done,"
    return done + ",".join(f" COALESCE(SUM({t}.{c}), 0) AS {c}" for c in counters)


def _progress(row: Any) -> Progress:
    return Progress(
        targeted=int(row.targeted),
        sent=int(row.sent),
        failed=int(row.failed),
        pruned=int(row.pruned),
        retried=int(row.retried),
        no_credentials=int(row.no_credentials),
        quiet_dropped=int(row.quiet_dropped),
        ttl_expired=int(row.ttl_expired),
        tasks_done=int(row.tasks_done),
    )


def progress(session: Session, job_id: str) -> Progress:
    """Roll the tasks' counters up into the job's progress (a job has at most a few hundred tasks)."""
    row = session.execute(text(f"SELECT {_rollup('t')} FROM fanout_task t WHERE t.job_id = :j"), {"j": job_id}).one()
    return _progress(row)


def list_jobs(session: Session, service: str, job_filter: JobFilter) -> list[tuple[JobRow, Progress]]:
    """A service's jobs, newest first, with their progress rolled up in the same query. ``before`` is
    the (created_at, job_id) of the last job of the previous page (keyset paging: stable while new
    jobs arrive)."""
    where = ["j.service = :s"]
    params: dict[str, Any] = {"s": service, "n": job_filter.limit}
    for column, name, value in (
        ("j.state", "st", job_filter.state),
        ("j.notification_method", "m", job_filter.method),
        ("j.notification_type", "t", job_filter.type_),
    ):
        if value is not None:
            where.append(f"{column} = :{name}")
            params[name] = value
    if job_filter.created_from is not None:
        where.append("j.created_at >= :cf")
        params["cf"] = job_filter.created_from
    if job_filter.created_to is not None:
        where.append("j.created_at < :ct")
        params["ct"] = job_filter.created_to
    if job_filter.before is not None:
        where.append("(j.created_at < :bc OR (j.created_at = :bc AND j.job_id < :bj))")
        params["bc"], params["bj"] = job_filter.before
    columns = ", ".join(f"j.{c.strip()}" for c in _JOB_COLUMNS.split(","))
    rows = session.execute(
        text(
            f"SELECT {columns}, {_rollup('t')}"
            f" FROM (SELECT * FROM fanout_job j WHERE {' AND '.join(where)}"
            "       ORDER BY j.created_at DESC, j.job_id DESC LIMIT :n) j"
            " LEFT JOIN fanout_task t ON t.job_id = j.job_id"
            " GROUP BY j.job_id ORDER BY j.created_at DESC, j.job_id DESC"
        ),
        params,
    ).all()
    return [(_job(r), _progress(r)) for r in rows]


def job_state(session: Session, job_id: str, service: str | None = None) -> str | None:
    """The job's state (a plain read); None for no such job (or, with ``service``, another tenant's)."""
    sql = "SELECT state FROM fanout_job WHERE job_id = :j" + (" AND service = :s" if service else "")
    return session.execute(text(sql), {"j": job_id, "s": service}).scalar_one_or_none()


def lock_tasks(session: Session, job_id: str) -> None:
    """Lock the job's task rows in task_no order, before its job row: the one lock order of a job's rows
    (a worker's claim, checkpoint or completion too), so cancel, requeue and a failure wait for a worker
    instead of deadlocking with it (a cancel answered 503: docs/FANOUT.md "Lock order")."""
    session.execute(text("SELECT 1 FROM fanout_task WHERE job_id = :j ORDER BY task_no FOR UPDATE"), {"j": job_id})


def cancel_job(session: Session, service: str, job_id: str) -> bool:
    """Cancel a scheduled, queued or running job of ``service`` in the caller's transaction: the job is final at
    once, its queued tasks too; running tasks stop at their worker's next checkpoint. False when the
    job had already finished (nothing changes, nothing locked). Locks in the order of ``lock_tasks``."""
    if job_state(session, job_id, service) not in ("scheduled", "queued", "running"):
        return False
    lock_tasks(session, job_id)
    changed = affected(
        session.execute(
            text(
                "UPDATE fanout_job SET state = 'cancelled', finished_at = UTC_TIMESTAMP(6)"
                " WHERE job_id = :j AND service = :s AND state IN ('scheduled', 'queued', 'running')"
            ),
            {"j": job_id, "s": service},
        )
    )
    if changed:
        session.execute(
            text(
                "UPDATE fanout_task SET state = 'cancelled', finished_at = UTC_TIMESTAMP(6), lease_owner = NULL,"
                " lease_token = NULL, paging_state = NULL WHERE job_id = :j AND state = 'queued'"
            ),
            {"j": job_id},
        )
        emit_job_event(session, job_id)
    return bool(changed)


def requeue_failed(session: Session, job_id: str, service: str | None = None) -> int:
    """Operators: resume a failed job from its checkpoints. Its failed tasks go back to the queue
    (attempts reset, claimable at once) with their progress; done tasks stay done. The job is
    running again until its tasks finish. Returns how many tasks were requeued (0: the job was not
    failed). Locks in the order of ``lock_tasks``. The caller commits."""
    if job_state(session, job_id, service) != "failed":
        return 0
    lock_tasks(session, job_id)
    locked = session.execute(text("SELECT state FROM fanout_job WHERE job_id = :j FOR UPDATE"), {"j": job_id})
    if locked.scalar_one_or_none() != "failed":  # requeued (or gone) between the plain read and the lock
        return 0
    n = affected(
        session.execute(
            text(
                "UPDATE fanout_task SET state = 'queued', attempts = 0, error = NULL, finished_at = NULL,"
                " lease_owner = NULL, lease_token = NULL, lease_until = UTC_TIMESTAMP(6)"
                " WHERE job_id = :j AND state = 'failed'"
            ),
            {"j": job_id},
        )
    )
    session.execute(
        text("UPDATE fanout_job SET state = 'running', error = NULL, finished_at = NULL WHERE job_id = :j"),
        {"j": job_id},
    )
    return int(n)


def emit_job_event(session: Session, job_id: str) -> None:
    """The job just reached its final state in this transaction: its webhook event goes into the
    outbox in the same transaction (job.finished for done/cancelled, job.failed for failed/expired)."""
    job = get_job(session, job_id)
    if job is None:
        return
    counts = progress(session, job_id)
    webhooks_sql.emit(
        session,
        job.service,
        "job.failed" if job.state in ("failed", "expired") else "job.finished",
        {
            "job_id": job.job_id,
            "state": job.state,
            "method": job.method,
            "notification_type": job.type_,
            "target": job.target,
            "dry_run": job.dry_run,
            "targeted": counts.targeted,
            "sent": counts.sent,
            "failed": counts.failed,
            "no_credentials": counts.no_credentials,
            "pruned": counts.pruned,
            "retried": counts.retried,
            "ttl_expired": counts.ttl_expired,
            "error": job.error,
            "created_at": _rfc3339(job.created_at),
            "send_at": _rfc3339(job.send_at),
            "finished_at": _rfc3339(job.finished_at),
        },
    )


def _rfc3339(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def tasks(session: Session, job_id: str) -> list[Any]:
    """The job's task rows (operators and tests; never exposed with paging_state)."""
    return list(
        session.execute(
            text(
                "SELECT task_no, slot_from, slot_to, current_slot, state, lease_owner, attempts, targeted, sent,"
                " failed, pruned, retried, pages, error FROM fanout_task WHERE job_id = :j ORDER BY task_no"
            ),
            {"j": job_id},
        ).all()
    )


# --- retention ----------------------------------------------------------------------------------


def prunable(session: Session, *, older_than_days: int, batch: int = 1000) -> list[tuple[str, str]]:
    """(service, job_id) of up to ``batch`` finished jobs that finished more than ``older_than_days``
    ago, locked for ``prune_jobs`` (what else must go with them is removed before they are)."""
    rows = session.execute(
        text(
            "SELECT service, job_id FROM fanout_job WHERE finished_at < UTC_TIMESTAMP(6) - INTERVAL :d DAY"
            " AND state IN ('done', 'failed', 'expired', 'cancelled') LIMIT :b FOR UPDATE"
        ),
        {"d": older_than_days, "b": batch},
    ).all()
    return [(r.service, r.job_id) for r in rows]


def prune_jobs(session: Session, job_ids: list[str]) -> int:
    """Delete these jobs (tasks cascade)."""
    if not job_ids:
        return 0
    return affected(
        session.execute(
            text("DELETE FROM fanout_job WHERE job_id IN :ids").bindparams(bindparam("ids", expanding=True)),
            {"ids": job_ids},
        )
    )
