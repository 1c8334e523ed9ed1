"""All SQL of a leased fan-out task: the claim, and every write its worker makes under the lease.

Leasing (DATA-RULES.md "Writes"): a worker claims one open task, chosen fairly between tenants
(``claim``, in the order of notee/store/claim_order.py), with ``SELECT … FOR UPDATE SKIP LOCKED``,
stamps it with its own ``lease_token`` and a ``lease_until`` from the database clock, and every later
write (extend, checkpoint, complete, release) is fenced by that token: if another worker reclaimed
the task after the lease expired, the stale worker's write matches no row and it stops
(``LeaseLost``). Each runs its own transaction, again after a transient MySQL error (``mysql.retried``:
a deadlock with another lane's or an operator's transaction on the job, a lock wait timeout, a lost
connection) before the worker backs off as for an outage; ``checkpoint``, ``complete`` and ``claim``
first check whether a commit whose answer was lost had landed (nothing counted twice, no claim left
behind). How a task and its job end: notee/store/task_ends.py; the job rows: notee/store/jobs_sql.py.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from notee.core.vocabulary import PageCounts
from notee.store import page_holds_sql, push_minutes_sql
from notee.store.claim_order import next_claimable
from notee.store.jobs_sql import emit_job_event, job_state, lock_tasks
from notee.store.mysql import affected, retried
from notee.store.task_ends import finish_task
from notee.store.task_fence import ADD_COUNTS, add_counts, count_params, fenced, release_in
from notee.store.task_fence import Claim as Claim  # its users import it from here
from notee.store.task_fence import LeaseLost as LeaseLost

# A task that crashed or hit an unexpected error this many times at the same checkpoint is a poison
# task: it is failed instead of retried. Graceful releases (stop, outages) do not count.
MAX_TASK_ATTEMPTS = 10
_NO_COUNTS = PageCounts()  # frozen: one shared default


class JobCancelled(RuntimeError):
    """The job was cancelled: its worker stops at this page (whose counts were recorded)."""


class JobGone(LookupError):
    """The job of a claimed task no longer exists (pruned by retention, or deleted by an operator)."""


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
    is handed to exactly one of them. READ COMMITTED: no gap locks; the candidates are ranked by plain
    reads and only the one taken is locked, by its key. ``services``: only those tenants' jobs (dedicated workers; tests);
    ``unserved_only``: only tenants that hold no live lease (a worker's spare lane). A task claimed
    ``MAX_TASK_ATTEMPTS`` times already is failed instead (a poison task must not loop forever)."""
    token = secrets.token_hex(16)

    def work(session: Session) -> Claim | None:
        return _claim_one(session, token, owner=owner, lease_s=lease_s, services=services, unserved_only=unserved_only)

    return retried(sessions, work, name="claim", applied=lambda session: _claimed_with(session, token))


def _claim_one(
    session: Session, token: str, *, owner: str, lease_s: float, services: Sequence[str] | None, unserved_only: bool
) -> Claim | None:
    """``claim``'s transaction: the first claimable task, stamped with ``token``; None: none left."""
    session.connection(execution_options={"isolation_level": "READ COMMITTED"})
    while True:
        row = next_claimable(session, services, unserved_only)
        if row is None:
            return None
        if job_state(session, row.job_id) == "cancelled":  # a dead worker's task of a cancelled job
            finish_task(session, row.job_id, row.task_no, "cancelled", None)
            continue
        if row.attempts >= MAX_TASK_ATTEMPTS:
            finish_task(
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
            finish_task(
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
        return _claim_of(session, row, token, attempts=row.attempts + 1, taken_over=row.state == "running")


def _claim_of(session: Session, row: Any, token: str, *, attempts: int, taken_over: bool) -> Claim:
    return Claim(
        row.job_id,
        row.task_no,
        row.slot_from,
        row.slot_to,
        row.current_slot,
        bytes(row.paging_state) if row.paging_state is not None else None,
        attempts,
        token,
        (int(row.resume_no), row.resume_token) if row.resume_token is not None else None,
        taken_over=taken_over,
        service=str(
            session.execute(text("SELECT service FROM fanout_job WHERE job_id = :j"), {"j": row.job_id}).scalar_one()
        ),
    )


def _claimed_with(session: Session, token: str) -> Claim | None:
    """The task a claim whose commit answer was lost stamped with ``token``, if the commit landed."""
    row = session.execute(
        text(
            "SELECT job_id, task_no, slot_from, slot_to, current_slot, paging_state, attempts, resume_no,"
            " resume_token FROM fanout_task WHERE lease_token = :tok AND state = 'running'"
        ),
        {"tok": token},
    ).one_or_none()
    return None if row is None else _claim_of(session, row, token, attempts=int(row.attempts), taken_over=False)


def extend_lease(sessions: sessionmaker[Session], claim_: Claim, *, lease_s: float) -> None:
    def work(session: Session) -> None:
        fenced(
            session,
            claim_,
            "UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND",
            {"ms": int(lease_s * 1000)},
        )

    retried(sessions, work, name="extend_lease")


def checkpoint(
    sessions: sessionmaker[Session],
    claim_: Claim,
    *,
    current_slot: int,
    paging_state: bytes | None,
    counts: PageCounts,
    lease_s: float,
    resume_key: tuple[int, str] | None = None,
    held: bool = False,
) -> None:
    """Record one finished page: where to resume (slot + paging state, and the last key read in that
    slot, for when Cassandra rejects the paging state) and what it did; renews the lease. ``held``:
    the page was held (``hold``) before; its hold goes in the same transaction (it is past it now).

    The checkpoint advanced, so the poison count restarts: ``attempts = 1`` is this claim."""

    def work(session: Session) -> bool:
        fenced(
            session,
            claim_,
            "UPDATE fanout_task SET current_slot = :cs, paging_state = :ps, resume_no = :rn, resume_token = :rt,"
            f" {ADD_COUNTS}, pages = pages + 1, attempts = 1,"
            " error = NULL, lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND",
            {
                "cs": current_slot,
                "ps": paging_state,
                "rn": resume_key[0] if resume_key else None,
                "rt": resume_key[1] if resume_key else None,
                "ms": int(lease_s * 1000),
            }
            | count_params(counts),
        )
        push_minutes_sql.add_page(
            session, job_id=claim_.job_id, task_no=claim_.task_no, service=claim_.service, counts=counts
        )
        if held:
            page_holds_sql.forget(session, claim_.job_id, claim_.task_no)
        cancelled = job_state(session, claim_.job_id) == "cancelled"
        if cancelled:  # the page's counts above are kept; the task ends here
            finish_task(session, claim_.job_id, claim_.task_no, "cancelled", None)
        return cancelled

    position = (current_slot, paging_state, resume_key)
    if retried(sessions, work, name="checkpoint", applied=lambda session: _at_position(session, claim_, position)):
        raise JobCancelled(f"job {claim_.job_id} was cancelled")


def _at_position(
    session: Session, claim_: Claim, position: tuple[int, bytes | None, tuple[int, str] | None]
) -> bool | None:
    """False (not cancelled) when a checkpoint whose commit answer was lost landed: the task, still
    ours, is at the position it wrote (each checkpoint moves it on). None: it did not land."""
    row = session.execute(
        text(
            "SELECT current_slot, paging_state, resume_no, resume_token FROM fanout_task"
            " WHERE job_id = :j AND task_no = :n AND lease_token = :tok AND state = 'running'"
        ),
        {"j": claim_.job_id, "n": claim_.task_no, "tok": claim_.lease_token},
    ).one_or_none()
    if row is None:
        return None
    key = (int(row.resume_no), str(row.resume_token)) if row.resume_token is not None else None
    ps = bytes(row.paging_state) if row.paging_state is not None else None
    return False if (int(row.current_slot), ps, key) == position else None


def forget_paging_state(sessions: sessionmaker[Session], claim_: Claim) -> None:
    """Cassandra rejected the checkpointed paging state: drop it, so every later claim resumes the
    slot from the checkpointed key (``resume_no``/``resume_token``) instead."""
    retried(
        sessions,
        lambda session: fenced(session, claim_, "UPDATE fanout_task SET paging_state = NULL", {}),
        name="forget",
    )


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
    towards ``MAX_TASK_ATTEMPTS``. (Run again after a lost commit, it finds the task no longer
    leased: ``LeaseLost``, which its callers take as done.)"""

    def work(session: Session) -> None:
        release_in(session, claim_, delay_s=delay_s, error=error, counts_as_attempt=counts_as_attempt)

    retried(sessions, work, name="release")


def hold(sessions: sessionmaker[Session], claim_: Claim, held: page_holds_sql.HeldPage, *, delay_s: float) -> None:
    """Give the task back during a provider outage with what its page did so far: the page's counts
    are added to the task, its done devices kept (``page_holds_sql``) and the task released unadvanced
    (claimable again after ``delay_s``, not an attempt), in one transaction fenced by the lease: the
    next claim reads the same page and skips those devices. (Run again after a lost commit, it finds
    the task no longer leased: ``LeaseLost``, nothing added twice.)"""

    def work(session: Session) -> None:
        add_counts(session, claim_, held.counts)
        page_holds_sql.keep(session, claim_.job_id, claim_.task_no, held)
        release_in(session, claim_, delay_s=delay_s, error=held.error)

    retried(sessions, work, name="hold")


def complete(
    sessions: sessionmaker[Session],
    claim_: Claim,
    *,
    counts: PageCounts = _NO_COUNTS,
    failed: bool = False,
    error: str | None = None,
    held: bool = False,
) -> None:
    """Finish the task (done, or failed loudly) with the counts of its last page, and, if it was the
    job's last open task, the job. One transaction: a crash leaves the last page unrecorded and the
    task open (it is re-sent, at most one page), never a done task without its counts. ``held``: as
    for ``checkpoint``."""
    state = "failed" if failed else "done"

    def work(session: Session) -> bool:
        add_counts(session, claim_, counts)
        if held:
            page_holds_sql.forget(session, claim_.job_id, claim_.task_no)
        finish_task(session, claim_.job_id, claim_.task_no, state, error)
        return True

    def landed(session: Session) -> bool | None:  # finished, with our counts: no other owner finishes it
        found = session.execute(
            text("SELECT state FROM fanout_task WHERE job_id = :j AND task_no = :n"),
            {"j": claim_.job_id, "n": claim_.task_no},
        ).scalar_one_or_none()
        return True if found == state else None

    retried(sessions, work, name="complete", applied=landed)


def fail_job(
    sessions: sessionmaker[Session],
    claim_: Claim,
    *,
    error: str,
    counts: PageCounts = _NO_COUNTS,
    held: page_holds_sql.HeldPage | None = None,
) -> None:
    """A provider configuration error: the whole job fails once, in one transaction. The claimed task
    keeps the counts of what its last page did before the error and, ``held``, that page's done
    devices (``page_holds_sql``: a requeue of the job sends the page's others); every other open task of the job
    is failed too (a worker holding one loses its lease at its next write and stops); the job
    carries ``error``. It locks in the one order (``lock_tasks``; two lanes failing one job deadlocked
    without it): the second lane adds its page's counts to its task failed by the first."""

    def work(session: Session) -> None:
        lock_tasks(session, claim_.job_id)
        add_counts(session, claim_, counts, failed_too=True)
        if held is not None:
            page_holds_sql.keep(session, claim_.job_id, claim_.task_no, held)
        session.execute(text("SELECT job_id FROM fanout_job WHERE job_id = :j FOR UPDATE"), {"j": claim_.job_id})
        session.execute(
            # paging states kept: `notee jobs requeue` resumes the job from them once the credentials are fixed;
            # lease tokens kept until then: a lane failing the same job adds its page's counts (``add_counts``)
            text(
                "UPDATE fanout_task SET state = 'failed', error = :e, lease_owner = NULL,"
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

    # Not run again after a lost connection: had it landed, the run again would add the counts twice
    # (the task keeps its token); the worker's outage path finds the task no longer running instead.
    retried(sessions, work, name="fail_job", idempotent=False)
