"""A service's publish jobs once made: status, listing, cancelling, and requeueing a failed one.

Called by the API (the tenant's and the admin's routes), the web console and ``notee jobs requeue``.
These functions work in the caller's session and never commit: the caller commits (or rolls back).
Jobs are made by notee/usecases/publish.py.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from sqlalchemy.orm import Session

from notee.core.errors import Conflict, NotFound
from notee.core.vocabulary import JobFilter, Progress
from notee.store import jobs_sql
from notee.store.jobs_sql import JobRow as JobRow  # re-exported: the API names jobs through this layer
from notee.store.mysql import read_committed

log = logging.getLogger(__name__)


def job_status(session: Session, service: str, job_id: str) -> tuple[JobRow, Progress]:
    """A job of this service and its rolled-up progress; NotFound for unknown or another tenant's job."""
    job = jobs_sql.get_job(session, job_id, service)
    if job is None:
        raise NotFound("no such job")
    return job, jobs_sql.progress(session, job_id)


def cancel_job(session: Session, service: str, job_id: str) -> tuple[JobRow, Progress]:
    """Cancel a scheduled, queued or running job; a finished one is answered as it is (cancelling is idempotent).
    The caller commits."""
    read_committed(session)  # the job's event and the answer count the pages of the tasks it waited for
    if jobs_sql.get_job(session, job_id, service) is None:
        raise NotFound("no such job")
    if jobs_sql.cancel_job(session, service, job_id):
        log.info("job %s of %s cancelled", job_id, service)
    job = jobs_sql.get_job(session, job_id, service)
    assert job is not None  # it was there a moment ago, in this transaction
    return job, jobs_sql.progress(session, job_id)


def list_jobs(session: Session, service: str, job_filter: JobFilter) -> list[tuple[JobRow, Progress]]:
    """A service's jobs (topic publishes and cycle minutes alike), newest first, with progress."""
    return jobs_sql.list_jobs(session, service, job_filter)


def requeue_job(session: Session, job_id: str, service: str | None = None) -> tuple[JobRow, Progress]:
    """Operators: resume a failed job from its tasks' checkpoints (``notee jobs requeue``, the admin
    API). NotFound for an unknown job (or another tenant's, with ``service``); Conflict unless the
    job failed. The caller commits."""
    read_committed(session)  # the answer counts the pages of the tasks it waited for
    job = jobs_sql.get_job(session, job_id, service)
    if job is None:
        raise NotFound("job not found")
    if jobs_sql.requeue_failed(session, job_id, service) == 0:
        raise Conflict(f"job is {job.state}; only a failed job can be requeued")
    log.info("job %s requeued from its checkpoints (was failed: %s)", job_id, job.error)
    return replace(job, state="running", error=None, finished_at=None), jobs_sql.progress(session, job_id)
