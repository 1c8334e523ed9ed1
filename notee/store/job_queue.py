"""All SQL of the fan-out work queue: publish jobs and their leased slot-range tasks.

Leasing (DATA-RULES.md "Writes"): a worker claims one open task, chosen fairly between tenants
(``claim``), with ``SELECT … FOR UPDATE SKIP LOCKED``, stamps it with its own ``lease_token`` and a
``lease_until`` from the database clock, and every later write (extend, checkpoint, complete,
release) is fenced by that token: if another worker reclaimed the task after the lease expired, the
stale worker's write matches no row and it stops (``LeaseLost``). Functions take the caller's
Session and never commit, except the ones whose docstring says they run their own transaction from
a sessionmaker.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session, sessionmaker

from notee.core.metrics import QueueLevels
from notee.core.vocabulary import JobState, PageCounts, Progress
from notee.store import webhooks_sql
from notee.store.mysql import affected

# A task that crashed or hit an unexpected error this many times at the same checkpoint is a poison
# task: it is failed instead of retried. Graceful releases (stop, outages) do not count.
MAX_TASK_ATTEMPTS = 10
_NO_COUNTS = PageCounts()  # frozen: one shared default


class LeaseLost(RuntimeError):
    """The task's lease was taken over (it expired and another worker claimed it)."""


class JobCancelled(RuntimeError):
    """The job was cancelled: its worker stops at this page (whose counts were recorded)."""


class JobGone(LookupError):
    """The job of a claimed task no longer exists (pruned by retention, or deleted by an operator)."""


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
class Claim:
    """A leased task. ``lease_token`` must accompany every write about it."""

    job_id: str
    task_no: int
    slot_from: int
    slot_to: int
    current_slot: int
    paging_state: bytes | None
    attempts: int
    lease_token: str
    resume_key: tuple[int, str] | None = None  # (no, device_token) after which current_slot resumes
    taken_over: bool = False  # claimed from a worker whose lease expired (it died or stalled)


_JOB_COLUMNS = (
    "job_id, service, notification_key, notification_method, notification_type, target_kind, target, "
    "idempotency_key, request_hash, payload, state, task_count, error, created_at, started_at, finished_at, dry_run, "
    "deadline, send_at"
)
# A job whose every recipient had no route ends failed with this error (notee/usecases/deliver.py says the same per send).
NO_CREDENTIALS_ERROR = (
    "no recipient could be sent: the service has no provider credentials for their platform "
    "(Android needs FCM; iOS needs APNs or FCM)"
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


# --- jobs ---------------------------------------------------------------------------------------


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


def insert_job(
    session: Session,
    *,
    job_id: str,
    service: str,
    notification_key: str,
    method: str,
    type_: str,
    target_kind: str,
    target: dict[str, Any],
    idempotency_key: str | None,
    request_hash: str,
    variables: dict[str, Any] | None,
    overrides: dict[str, Any] | None,
    payload: dict[str, Any],
    slot_ranges: list[tuple[int, int]],
    dry_run: bool = False,
    deadline_in_s: float | None = None,
    send_at: datetime | None = None,
) -> None:
    """Insert the job row and one task row per slot range, in the caller's transaction.
    ``deadline_in_s``: the job's deadline, that many seconds from now on the database clock.
    ``send_at`` (naive UTC): the job is 'scheduled' while it is in the future (database clock) and
    its tasks are claimable from then on (``lease_until = send_at``): the claim never takes them earlier.

    Raises ``sqlalchemy.exc.IntegrityError`` when (service, idempotency_key) already exists."""
    session.execute(
        text(
            "INSERT INTO fanout_job (job_id, service, notification_key, notification_method, notification_type,"
            " target_kind, target, idempotency_key, request_hash, variables, overrides, payload, dry_run, state,"
            " task_count, created_at, deadline, send_at) VALUES (:j, :s, :k, :m, :t, :tk, :tg, :ik, :rh, :v, :o, :p,"
            " :dry, IF(:sa IS NOT NULL AND :sa > UTC_TIMESTAMP(6), 'scheduled', 'queued'), :n, UTC_TIMESTAMP(6),"
            " CASE WHEN :dl IS NULL THEN NULL ELSE UTC_TIMESTAMP(6) + INTERVAL :dl MICROSECOND END, :sa)"
        ),
        {
            "j": job_id,
            "s": service,
            "k": notification_key,
            "m": method,
            "t": type_,
            "tk": target_kind,
            "tg": json.dumps(target),
            "ik": idempotency_key,
            "rh": request_hash,
            "v": json.dumps(variables) if variables is not None else None,
            "o": json.dumps(overrides) if overrides is not None else None,
            "p": json.dumps(payload),
            "dry": dry_run,
            "n": len(slot_ranges),
            "dl": None if deadline_in_s is None else max(0, int(deadline_in_s * 1_000_000)),
            "sa": send_at,
        },
    )
    session.execute(
        text(
            "INSERT INTO fanout_task (job_id, task_no, slot_from, slot_to, current_slot, state, lease_until)"
            " VALUES (:j, :n, :a, :b, :a, 'queued', GREATEST(UTC_TIMESTAMP(6), COALESCE(:sa, UTC_TIMESTAMP(6))))"
        ),
        [{"j": job_id, "n": i, "a": a, "b": b, "sa": send_at} for i, (a, b) in enumerate(slot_ranges)],
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
    return f"COALESCE(SUM({t}.state NOT IN ('queued', 'running')), 0) AS tasks_done," + ",".join(
        f" COALESCE(SUM({t}.{c}), 0) AS {c}"
        for c in ("targeted", "sent", "failed", "pruned", "retried", "no_credentials", "quiet_dropped")
    )


def _progress(row: Any) -> Progress:
    return Progress(
        targeted=int(row.targeted),
        sent=int(row.sent),
        failed=int(row.failed),
        pruned=int(row.pruned),
        retried=int(row.retried),
        no_credentials=int(row.no_credentials),
        quiet_dropped=int(row.quiet_dropped),
        tasks_done=int(row.tasks_done),
    )


def progress(session: Session, job_id: str) -> Progress:
    """Roll the tasks' counters up into the job's progress (a job has at most a few hundred tasks)."""
    row = session.execute(text(f"SELECT {_rollup('t')} FROM fanout_task t WHERE t.job_id = :j"), {"j": job_id}).one()
    return _progress(row)


# --- leasing ------------------------------------------------------------------------------------


# How many tasks the fair claim ranks per try. Concurrent claimers see the same ranking, so each
# locks the first candidate nobody else holds; when every candidate was taken meanwhile, the claim
# falls back to the plain index order (``_first_claimable``) rather than come back empty.
FAIR_CANDIDATES = 8

_TASK_COLUMNS = (
    "job_id, task_no, slot_from, slot_to, current_slot, paging_state, attempts, resume_no, resume_token, error, state"
)
_CLAIMABLE = "t.state IN ('queued', 'running') AND t.lease_until <= UTC_TIMESTAMP(6)"
_OPEN_JOB = "j.state IN ('scheduled', 'queued', 'running')"  # with the tenant: ix_job_open (0023)
# Live leases per tenant (a derived table ``l``): running tasks whose lease has not expired (a range
# of ix_task_claim holding one row per busy lane), or, per tenant, its running jobs (ix_job_open).
_LEASES = (
    "(SELECT lj.service, COUNT(*) AS leased FROM fanout_task lt JOIN fanout_job lj ON lj.job_id = lt.job_id"
    " WHERE lt.state = 'running' AND lt.lease_until > UTC_TIMESTAMP(6) AND lj.state = 'running' GROUP BY lj.service) l"
)


def _scoped(sql: str, services: Sequence[str] | None) -> Any:
    if services is None:
        return text(sql.replace("{scope}", ""))
    return text(sql.replace("{scope}", " AND j.service IN :svc")).bindparams(bindparam("svc", expanding=True))


def _fair_candidates(
    session: Session, services: Sequence[str] | None, *, unserved_only: bool = False
) -> list[tuple[str, int]]:
    """The claimable tasks in the order the fair claim takes them (a plain read, no locks): first the
    tenant with the fewest live leases, within a tenant a task whose lease expired (a crashed or
    stalled worker's, resumed from its checkpoint) before its queued ones, then the longest due.
    Tenants with as many leases are served longest-due first, which rotates them. ``unserved_only``:
    only tenants without any live lease (the spare lane's work)."""
    rows = session.execute(
        _scoped(
            "SELECT t.job_id, t.task_no FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
            f" LEFT JOIN {_LEASES} ON l.service = j.service"
            f" WHERE {_CLAIMABLE} AND {_OPEN_JOB}{{scope}}"
            + (" AND l.leased IS NULL" if unserved_only else "")
            + " ORDER BY COALESCE(l.leased, 0), t.state = 'running' DESC, t.lease_until, t.job_id, t.task_no"
            " LIMIT :k",
            services,
        ),
        {"k": FAIR_CANDIDATES, "svc": list(services or ())},
    ).all()
    return [(r.job_id, int(r.task_no)) for r in rows]


def _lock_claimable(session: Session, job_id: str, task_no: int) -> Any:
    """Lock one candidate if it is still claimable and no other claimer holds it (SKIP LOCKED)."""
    return session.execute(
        text(
            f"SELECT {_TASK_COLUMNS} FROM fanout_task t WHERE t.job_id = :j AND t.task_no = :n AND {_CLAIMABLE}"
            " FOR UPDATE SKIP LOCKED"
        ),
        {"j": job_id, "n": task_no},
    ).one_or_none()


def _first_claimable(session: Session, services: Sequence[str] | None) -> Any:
    """The fallback: the first claimable task in ix_task_claim order that nobody holds. A locking
    read must not join fanout_job (it would lock the job row, and SKIP LOCKED would then skip every
    task of that job), so a tenant scope is the open jobs' ids, read first (ix_job_open)."""
    scope, params = "", {}
    if services is not None:
        job_ids = (
            session.execute(
                text(
                    "SELECT job_id FROM fanout_job WHERE service IN :s AND state IN ('scheduled', 'queued', 'running')"
                ).bindparams(bindparam("s", expanding=True)),
                {"s": list(services)},
            )
            .scalars()
            .all()
        )
        if not job_ids:
            return None
        scope, params = " AND t.job_id IN :jobs", {"jobs": list(job_ids)}
    stmt = text(
        f"SELECT {_TASK_COLUMNS} FROM fanout_task t WHERE {_CLAIMABLE}{scope}"
        " ORDER BY t.state, t.lease_until LIMIT 1 FOR UPDATE SKIP LOCKED"
    )
    if scope:
        stmt = stmt.bindparams(bindparam("jobs", expanding=True))
    return session.execute(stmt, params).one_or_none()


def _next_claimable(session: Session, services: Sequence[str] | None, unserved_only: bool) -> Any:
    for job_id, task_no in _fair_candidates(session, services, unserved_only=unserved_only):
        row = _lock_claimable(session, job_id, task_no)
        if row is not None:
            return row
    return None if unserved_only else _first_claimable(session, services)


def claim(
    sessions: sessionmaker[Session],
    *,
    owner: str,
    lease_s: float,
    services: Sequence[str] | None = None,
    unserved_only: bool = False,
) -> Claim | None:
    """Lease one open task (queued, or running with an expired lease), in its own transaction.

    Fair between tenants (``_fair_candidates``): the tenant with the fewest live leases goes first,
    and within a tenant an expired lease is resumed before queued work. ``SKIP LOCKED`` lets any
    number of workers claim concurrently without waiting on each other's row locks; each task row
    is handed to exactly one of them. READ COMMITTED: no gap locks, and rows the scan passes over
    are not kept locked. ``services`` restricts the claim to those tenants' jobs (dedicated
    workers; tests); ``unserved_only`` to tenants that hold no live lease (a worker's spare lane).
    A task already claimed ``MAX_TASK_ATTEMPTS`` times is failed instead (a poison task must not
    loop forever)."""
    token = secrets.token_hex(16)
    with sessions.begin() as session:
        session.connection(execution_options={"isolation_level": "READ COMMITTED"})
        while True:
            row = _next_claimable(session, services, unserved_only)
            if row is None:
                return None
            if _job_state(session, row.job_id) == "cancelled":  # a dead worker's task of a cancelled job
                _finish_task(session, row.job_id, row.task_no, "cancelled", None)
                continue
            if row.attempts >= MAX_TASK_ATTEMPTS:
                _finish_task(
                    session,
                    row.job_id,
                    row.task_no,
                    "failed",
                    f"gave up after {row.attempts} crashes or unexpected errors at the same checkpoint"
                    + (f"; last error: {row.error}" if row.error else ""),
                )
                continue
            overdue = session.execute(
                text("SELECT deadline FROM fanout_job WHERE job_id = :j AND deadline < UTC_TIMESTAMP(6)"),
                {"j": row.job_id},
            ).scalar_one_or_none()
            if overdue is not None:  # e.g. a cycle minute's job claimed after its grace: never send it late
                _finish_task(
                    session,
                    row.job_id,
                    row.task_no,
                    "expired",
                    f"not finished by its deadline {overdue:%Y-%m-%dT%H:%M:%SZ}; slots "
                    f"{row.current_slot}..{row.slot_to} not sent",
                )
                continue
            session.execute(
                text(
                    "UPDATE fanout_task SET state = 'running', lease_owner = :o, lease_token = :tok,"
                    " lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND,"
                    " attempts = attempts + 1, started_at = COALESCE(started_at, UTC_TIMESTAMP(6))"
                    " WHERE job_id = :j AND task_no = :n"
                ),
                {"o": owner[:100], "tok": token, "ms": int(lease_s * 1000), "j": row.job_id, "n": row.task_no},
            )
            session.execute(
                text(
                    "UPDATE fanout_job SET state = 'running', started_at = COALESCE(started_at, UTC_TIMESTAMP(6))"
                    " WHERE job_id = :j AND state IN ('scheduled', 'queued')"
                ),
                {"j": row.job_id},
            )
            return Claim(
                row.job_id,
                row.task_no,
                row.slot_from,
                row.slot_to,
                row.current_slot,
                bytes(row.paging_state) if row.paging_state is not None else None,
                row.attempts + 1,
                token,
                (int(row.resume_no), row.resume_token) if row.resume_token is not None else None,
                taken_over=row.state == "running",
            )


def tenant_waiting(
    sessions: sessionmaker[Session], service: str, services: Sequence[str] | None = None, *, waited_s: float = 0.0
) -> bool:
    """Should a lane running a task of ``service`` give it back at this checkpoint? True when another
    tenant (within ``services``, the worker's scope) has had a task claimable for ``waited_s`` and
    has fewer live leases than ``service`` has (this task's included): the fair claim would give
    the lane to that tenant. One read, no locks: claimable tasks and live leases (ix_task_claim)
    and their jobs' tenants."""
    with sessions() as session:
        row = session.execute(
            _scoped(
                "SELECT 1 FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
                f" LEFT JOIN {_LEASES} ON l.service = j.service"
                f" WHERE {_CLAIMABLE} AND {_OPEN_JOB} AND j.service <> :me{{scope}}"
                " AND t.lease_until <= UTC_TIMESTAMP(6) - INTERVAL :waited MICROSECOND"
                " AND COALESCE(l.leased, 0) < (SELECT COUNT(*) FROM fanout_task mt"
                " JOIN fanout_job mj ON mj.job_id = mt.job_id WHERE mj.service = :me AND mj.state = 'running'"
                " AND mt.state = 'running' AND mt.lease_until > UTC_TIMESTAMP(6))"
                " LIMIT 1",
                services,
            ),
            {"me": service, "svc": list(services or ()), "waited": int(waited_s * 1_000_000)},
        ).first()
    return row is not None


def live_leases(sessions: sessionmaker[Session], service: str) -> int:
    """How many tasks of ``service`` are under a live lease now, over every worker (its running
    jobs by ix_job_open, their running tasks)."""
    with sessions() as session:
        return int(
            session.execute(
                text(
                    "SELECT COUNT(*) FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
                    " WHERE j.service = :s AND j.state = 'running' AND t.state = 'running'"
                    " AND t.lease_until > UTC_TIMESTAMP(6)"
                ),
                {"s": service},
            ).scalar_one()
        )


def _fenced(session: Session, claim_: Claim, sql: str, params: dict[str, Any]) -> None:
    result = session.execute(
        text(sql + " WHERE job_id = :j AND task_no = :n AND lease_token = :tok AND state = 'running'"),
        {**params, "j": claim_.job_id, "n": claim_.task_no, "tok": claim_.lease_token},
    )
    if affected(result) != 1:
        raise LeaseLost(f"task {claim_.job_id}/{claim_.task_no} is no longer leased by this worker")


def extend_lease(sessions: sessionmaker[Session], claim_: Claim, *, lease_s: float) -> None:
    with sessions.begin() as session:
        _fenced(
            session,
            claim_,
            "UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND",
            {"ms": int(lease_s * 1000)},
        )


def checkpoint(
    sessions: sessionmaker[Session],
    claim_: Claim,
    *,
    current_slot: int,
    paging_state: bytes | None,
    counts: PageCounts,
    lease_s: float,
    resume_key: tuple[int, str] | None = None,
) -> None:
    """Record one finished page: where to resume (slot + paging state, and the last key read in that
    slot, for when Cassandra rejects the paging state) and what it did; renews the lease.

    The checkpoint advanced, so the poison count restarts: ``attempts = 1`` is this claim."""
    with sessions.begin() as session:
        _fenced(
            session,
            claim_,
            "UPDATE fanout_task SET current_slot = :cs, paging_state = :ps, resume_no = :rn, resume_token = :rt,"
            " targeted = targeted + :tg, sent = sent + :se, failed = failed + :fa, pruned = pruned + :pr,"
            " retried = retried + :re, no_credentials = no_credentials + :nc, quiet_dropped = quiet_dropped + :qd,"
            " pages = pages + 1, attempts = 1,"
            " error = NULL, lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND",
            {
                "cs": current_slot,
                "ps": paging_state,
                "rn": resume_key[0] if resume_key else None,
                "rt": resume_key[1] if resume_key else None,
                "tg": counts.targeted,
                "se": counts.sent,
                "fa": counts.failed,
                "pr": counts.pruned,
                "re": counts.retried,
                "nc": counts.no_credentials,
                "qd": counts.quiet_dropped,
                "ms": int(lease_s * 1000),
            },
        )
        cancelled = _job_state(session, claim_.job_id) == "cancelled"
        if cancelled:  # the page's counts above are kept; the task ends here
            _finish_task(session, claim_.job_id, claim_.task_no, "cancelled", None)
    if cancelled:
        raise JobCancelled(f"job {claim_.job_id} was cancelled")


def db_now(session: Session) -> datetime:
    """The database clock (naive UTC): the one clock leases, deadlines and send_at are compared with."""
    now: datetime = session.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    return now


def _job_state(session: Session, job_id: str) -> str | None:
    return session.execute(text("SELECT state FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar_one_or_none()


def cancel_job(session: Session, service: str, job_id: str) -> bool:
    """Cancel a scheduled, queued or running job of ``service`` in the caller's transaction: the job is final at
    once, its queued tasks too; running tasks stop at their worker's next checkpoint. False when the
    job had already finished (nothing changes)."""
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
        _emit_job_event(session, job_id)
    return bool(changed)


def forget_paging_state(sessions: sessionmaker[Session], claim_: Claim) -> None:
    """Cassandra rejected the checkpointed paging state: drop it, so every later claim resumes the
    slot from the checkpointed key (``resume_no``/``resume_token``) instead."""
    with sessions.begin() as session:
        _fenced(session, claim_, "UPDATE fanout_task SET paging_state = NULL", {})


def release(
    sessions: sessionmaker[Session],
    claim_: Claim,
    *,
    delay_s: float = 0.0,
    error: str | None = None,
    counts_as_attempt: bool = False,
) -> None:
    """Give the task back without advancing its checkpoint; it is claimable again after ``delay_s``
    and the next claimer resumes from the checkpoint.

    A graceful release (stop, a store or provider outage) gives its claim back (``attempts - 1``):
    only crashes (a claim never released) and unexpected errors (``counts_as_attempt``) count
    towards ``MAX_TASK_ATTEMPTS``."""
    with sessions.begin() as session:
        _fenced(
            session,
            claim_,
            "UPDATE fanout_task SET state = 'queued', lease_owner = NULL, lease_token = NULL, error = :e,"
            " attempts = GREATEST(attempts - :give_back, 0),"
            " lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND",
            {
                "e": error[:500] if error else None,
                "ms": int(delay_s * 1000),
                "give_back": 0 if counts_as_attempt else 1,
            },
        )


def requeue_failed(session: Session, job_id: str, service: str | None = None) -> int:
    """Operators: resume a failed job from its checkpoints. Its failed tasks go back to the queue
    (attempts reset, claimable at once) with their progress; done tasks stay done. The job is
    running again until its tasks finish. Returns how many tasks were requeued (0: the job was not
    failed). The caller commits."""
    sql = "SELECT job_id, state FROM fanout_job WHERE job_id = :j" + (" AND service = :s" if service else "")
    job = session.execute(text(sql + " FOR UPDATE"), {"j": job_id, "s": service}).one_or_none()
    if job is None or job.state != "failed":
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


def complete(
    sessions: sessionmaker[Session],
    claim_: Claim,
    *,
    counts: PageCounts = _NO_COUNTS,
    failed: bool = False,
    error: str | None = None,
) -> None:
    """Finish the task (done, or failed loudly) with the counts of its last page, and, if it was the
    job's last open task, the job. One transaction: a crash leaves the last page unrecorded and the
    task open (it is re-sent, at most one page), never a done task without its counts."""
    with sessions.begin() as session:
        _add_counts(session, claim_, counts)
        _finish_task(session, claim_.job_id, claim_.task_no, "failed" if failed else "done", error)


def fail_job(sessions: sessionmaker[Session], claim_: Claim, *, error: str, counts: PageCounts = _NO_COUNTS) -> None:
    """A provider configuration error: the whole job fails once, in one transaction. The claimed task
    keeps the counts of what its last page did before the error; every other open task of the job
    is failed too (a worker holding one loses its lease at its next write and stops); the job
    carries ``error``."""
    with sessions.begin() as session:
        _add_counts(session, claim_, counts)
        session.execute(text("SELECT job_id FROM fanout_job WHERE job_id = :j FOR UPDATE"), {"j": claim_.job_id})
        session.execute(
            # paging states kept: `notee jobs requeue` resumes the job from them once the credentials are fixed
            text(
                "UPDATE fanout_task SET state = 'failed', error = :e, lease_owner = NULL, lease_token = NULL,"
                " finished_at = UTC_TIMESTAMP(6) WHERE job_id = :j AND state IN ('scheduled', 'queued', 'running')"
            ),
            {"e": error[:500], "j": claim_.job_id},
        )
        failed = session.execute(
            text(
                "UPDATE fanout_job SET state = 'failed', error = :e, finished_at = UTC_TIMESTAMP(6),"
                " started_at = COALESCE(started_at, UTC_TIMESTAMP(6))"
                " WHERE job_id = :j AND state IN ('scheduled', 'queued', 'running')"
            ),
            {"e": error[:500], "j": claim_.job_id},
        )
        if affected(failed):
            _emit_job_event(session, claim_.job_id)


def _add_counts(session: Session, claim_: Claim, counts: PageCounts) -> None:
    _fenced(
        session,
        claim_,
        "UPDATE fanout_task SET targeted = targeted + :tg, sent = sent + :se, failed = failed + :fa,"
        " pruned = pruned + :pr, retried = retried + :re, no_credentials = no_credentials + :nc,"
        " quiet_dropped = quiet_dropped + :qd, pages = pages + :pg",
        {
            "tg": counts.targeted,
            "se": counts.sent,
            "fa": counts.failed,
            "pr": counts.pruned,
            "re": counts.retried,
            "nc": counts.no_credentials,
            "qd": counts.quiet_dropped,
            "pg": 1 if counts.targeted or counts.quiet_dropped else 0,
        },
    )


def _finish_task(session: Session, job_id: str, task_no: int, state: str, error: str | None) -> None:
    session.execute(
        # A failed task keeps its paging state: `notee jobs requeue` resumes it from there.
        text(
            "UPDATE fanout_task SET state = :st, error = :e, lease_owner = NULL, lease_token = NULL,"
            " paging_state = IF(:st = 'done', NULL, paging_state), finished_at = UTC_TIMESTAMP(6)"
            " WHERE job_id = :j AND task_no = :n"
        ),
        {"st": state, "e": error[:500] if error else None, "j": job_id, "n": task_no},
    )
    # Lock the job row so two workers finishing the last two tasks at once serialise here and
    # exactly one of them sees "no open task left" and closes the job.
    session.execute(text("SELECT job_id FROM fanout_job WHERE job_id = :j FOR UPDATE"), {"j": job_id})
    row = session.execute(
        text(
            "SELECT SUM(state IN ('queued', 'running')) AS open_, SUM(state = 'failed') AS failed_,"
            " SUM(state = 'expired') AS expired_, COUNT(*) AS tasks_,"
            " MIN(CASE WHEN state IN ('failed', 'expired') THEN error END) AS error_, SUM(targeted) AS targeted_,"
            " SUM(no_credentials) AS no_credentials_ FROM fanout_task WHERE job_id = :j"
        ),
        {"j": job_id},
    ).one()
    if int(row.open_ or 0) == 0:
        # failed wins over expired (a loud error); expired says how many tasks were not (fully) sent
        state, error = "done", row.error_
        if row.failed_:
            state = "failed"
        elif row.expired_:
            state, error = "expired", f"{int(row.expired_)} of {int(row.tasks_)} task(s) expired: {row.error_}"
        elif int(row.targeted_ or 0) > 0 and row.no_credentials_ == row.targeted_:
            state, error = "failed", NO_CREDENTIALS_ERROR  # not one recipient had a provider: not a success
        closed = session.execute(
            text(
                "UPDATE fanout_job SET state = :st, error = :e, finished_at = UTC_TIMESTAMP(6),"
                " started_at = CASE WHEN :st = 'expired' THEN started_at ELSE COALESCE(started_at, UTC_TIMESTAMP(6)) END"
                " WHERE job_id = :j AND state IN ('scheduled', 'queued', 'running')"
            ),
            {"st": state, "e": error[:500] if error else None, "j": job_id},
        )
        if affected(closed):
            _emit_job_event(session, job_id)


def _emit_job_event(session: Session, job_id: str) -> None:
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
            "error": job.error,
            "created_at": _rfc3339(job.created_at),
            "send_at": _rfc3339(job.send_at),
            "finished_at": _rfc3339(job.finished_at),
        },
    )


def _rfc3339(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def queue_levels(session: Session) -> QueueLevels:
    """The work queue now, for the metrics: tasks a worker may claim now (queued or with an expired
    lease, due), tasks under a live lease, queued tasks not due yet (scheduled for ``send_at``, or
    backing off after an outage), and how long the oldest claimable task's job has been due (since
    its ``send_at``, else its creation). One range read of ix_task_claim (open tasks only)."""
    row = session.execute(
        text(
            "SELECT COALESCE(SUM(t.lease_until <= UTC_TIMESTAMP(6)), 0) AS waiting,"
            " COALESCE(SUM(t.state = 'running' AND t.lease_until > UTC_TIMESTAMP(6)), 0) AS running,"
            " COALESCE(SUM(t.state = 'queued' AND t.lease_until > UTC_TIMESTAMP(6)), 0) AS not_due,"
            " TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN t.lease_until <= UTC_TIMESTAMP(6)"
            " THEN COALESCE(j.send_at, j.created_at) END), UTC_TIMESTAMP(6)) AS oldest_us"
            " FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id WHERE t.state IN ('queued', 'running')"
        )
    ).one()
    return QueueLevels(int(row.waiting), int(row.running), int(row.not_due), max(0.0, (row.oldest_us or 0) / 1e6))


def reclaim_expired(session: Session) -> int:
    """Put every running task whose lease expired back in the queue (claim also takes them
    directly; this is for operators and tests). Returns how many."""
    return affected(
        session.execute(
            text(
                "UPDATE fanout_task SET state = 'queued', lease_owner = NULL, lease_token = NULL"
                " WHERE state = 'running' AND lease_until <= UTC_TIMESTAMP(6)"
            )
        )
    )


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


def prune_finished(session: Session, *, older_than_days: int, batch: int = 1000) -> int:
    """Delete up to ``batch`` finished jobs (tasks cascade) that finished more than ``older_than_days`` ago."""
    return affected(
        session.execute(
            text(
                "DELETE FROM fanout_job WHERE finished_at < UTC_TIMESTAMP(6) - INTERVAL :d DAY"
                " AND state IN ('done', 'failed', 'expired', 'cancelled') LIMIT :b"
            ),
            {"d": older_than_days, "b": batch},
        )
    )


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
    """A service's jobs, newest first, with their progress rolled up in the same query. ``before`` is
    the (created_at, job_id) of the last job of the previous page (keyset paging: stable while new
    jobs arrive)."""
    where = ["j.service = :s"]
    params: dict[str, Any] = {"s": service, "n": limit}
    for column, name, value in (
        ("j.state", "st", state),
        ("j.notification_method", "m", method),
        ("j.notification_type", "t", type_),
    ):
        if value is not None:
            where.append(f"{column} = :{name}")
            params[name] = value
    if created_from is not None:
        where.append("j.created_at >= :cf")
        params["cf"] = created_from
    if created_to is not None:
        where.append("j.created_at < :ct")
        params["ct"] = created_to
    if before is not None:
        where.append("(j.created_at < :bc OR (j.created_at = :bc AND j.job_id < :bj))")
        params["bc"], params["bj"] = before
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


# --- the web console's health page ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerLeases:
    owner: str  # the worker's id (host:pid:suffix)
    tasks: int  # tasks it holds a live lease on
    lease_until: datetime  # its latest lease end (workers extend leases while they work)


@dataclass(frozen=True, slots=True)
class QueueOverview:
    queued: int  # tasks waiting for a worker
    oldest_queued_at: datetime | None  # created_at of the oldest job with a queued task
    running: int  # tasks under a live lease
    stale: int  # tasks whose lease expired without finishing (a worker died): the next claim takes them
    workers: list[WorkerLeases]
    now: datetime  # the database clock the figures were read at


def queue_overview(session: Session, service: str | None = None) -> QueueOverview:
    """Open work and the workers holding it, from the task leases (all services, or one). A worker
    shows while it holds a lease; an idle worker is not visible here (it has no row to show)."""
    scope = "" if service is None else " AND j.service = :s"
    params: dict[str, Any] = {"s": service}
    now = session.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    counts = session.execute(
        text(
            "SELECT SUM(t.state = 'queued') AS queued_,"
            " MIN(CASE WHEN t.state = 'queued' THEN j.created_at END) AS oldest_,"
            " SUM(t.state = 'running' AND t.lease_until > :now) AS running_,"
            " SUM(t.state = 'running' AND t.lease_until <= :now) AS stale_"
            " FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
            f" WHERE t.state IN ('queued', 'running'){scope}"
        ),
        params | {"now": now},
    ).one()
    owners = session.execute(
        text(
            "SELECT t.lease_owner AS owner, COUNT(*) AS tasks, MAX(t.lease_until) AS lease_until"
            " FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
            f" WHERE t.state = 'running' AND t.lease_until > :now AND t.lease_owner IS NOT NULL{scope}"
            " GROUP BY t.lease_owner ORDER BY t.lease_owner"
        ),
        params | {"now": now},
    ).all()
    return QueueOverview(
        queued=int(counts.queued_ or 0),
        oldest_queued_at=counts.oldest_,
        running=int(counts.running_ or 0),
        stale=int(counts.stale_ or 0),
        workers=[WorkerLeases(r.owner, int(r.tasks), r.lease_until) for r in owners],
        now=now,
    )
