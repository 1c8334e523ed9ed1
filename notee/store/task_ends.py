"""How a fan-out task ends, and its job with it: ``finish_task`` records a task done, failed, expired
or cancelled and, when it was the job's last open task, closes the job (with its webhook event).
Called inside the transactions of notee/store/task_leases.py (the claim, a checkpoint that meets a
cancel, a completion); ``reclaim_expired`` is for operators and tests. Functions take the caller's
Session and never commit.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from notee.store.jobs_sql import emit_job_event
from notee.store.mysql import affected

# A job whose every recipient had no route ends failed with this error (notee/usecases/deliver.py says the same per send).
NO_CREDENTIALS_ERROR = (
    "no recipient could be sent: the service has no provider credentials for their platform "
    "(Android needs FCM; iOS needs APNs or FCM)"
)


def finish_task(session: Session, job_id: str, task_no: int, state: str, error: str | None) -> None:
    """Record the task's end; close its job when no task of it is open any more."""
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
