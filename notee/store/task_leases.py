"""All SQL of a leased fan-out task: the claim, and every write its worker makes under the lease.

Leasing (DATA-RULES.md "Writes"): a worker claims one open task, chosen fairly between tenants
(``claim``, in the order of notee/store/claim_order.py), with ``SELECT … FOR UPDATE SKIP LOCKED``,
stamps it with its own ``lease_token`` and a ``lease_until`` from the database clock, and every later
write (extend, checkpoint, complete, release) is fenced by that token: if another worker reclaimed
the task after the lease expired, the stale worker's write matches no row and it stops
(``LeaseLost``). These functions run their own transaction from a sessionmaker, except the ones
that take the caller's Session (they never commit). The job rows are notee/store/jobs_sql.py.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from notee.core.vocabulary import PageCounts
from notee.store import push_minutes_sql
from notee.store.claim_order import next_claimable
from notee.store.jobs_sql import emit_job_event, job_state
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
    service: str = ""  # the job's service (its pages' rows of push_minute name it)


# A job whose every recipient had no route ends failed with this error (notee/usecases/deliver.py says the same per send).
NO_CREDENTIALS_ERROR = (
    "no recipient could be sent: the service has no provider credentials for their platform "
    "(Android needs FCM; iOS needs APNs or FCM)"
)


def claim(
    sessions: sessionmaker[Session],
    *,
    owner: str,
    lease_s: float,
    services: Sequence[str] | None = None,
    unserved_only: bool = False,
) -> Claim | None:
    """Lease one open task (queued, or running with an expired lease), in its own transaction.

    Fair between tenants (``claim_order.next_claimable``): the tenant with the fewest live leases goes first,
    and within a tenant an expired lease is resumed before queued work. ``SKIP LOCKED`` lets any
    number of workers claim concurrently without waiting on each other's row locks; each task row
    is handed to exactly one of them. READ COMMITTED: no gap locks, and rows the scan passes over
    are not kept locked. ``services``: only those tenants' jobs (dedicated workers; tests);
    ``unserved_only``: only tenants that hold no live lease (a worker's spare lane). A task claimed
    ``MAX_TASK_ATTEMPTS`` times already is failed instead (a poison task must not loop forever)."""
    token = secrets.token_hex(16)
    with sessions.begin() as session:
        session.connection(execution_options={"isolation_level": "READ COMMITTED"})
        while True:
            row = next_claimable(session, services, unserved_only)
            if row is None:
                return None
            if job_state(session, row.job_id) == "cancelled":  # a dead worker's task of a cancelled job
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
                service=_job_service(session, row.job_id),
            )


def _job_service(session: Session, job_id: str) -> str:
    return str(session.execute(text("SELECT service FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar_one())


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
        push_minutes_sql.add_page(
            session, job_id=claim_.job_id, task_no=claim_.task_no, service=claim_.service, counts=counts
        )
        cancelled = job_state(session, claim_.job_id) == "cancelled"
        if cancelled:  # the page's counts above are kept; the task ends here
            _finish_task(session, claim_.job_id, claim_.task_no, "cancelled", None)
    if cancelled:
        raise JobCancelled(f"job {claim_.job_id} was cancelled")


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
            emit_job_event(session, claim_.job_id)


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
    push_minutes_sql.add_page(
        session, job_id=claim_.job_id, task_no=claim_.task_no, service=claim_.service, counts=counts
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
            emit_job_event(session, job_id)


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
