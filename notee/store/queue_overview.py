"""The work queue at a glance, read-only: its levels for the metrics (``queue_levels``) and the web
console's health page (``queue_overview``: open work and the workers holding it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from notee.core.metrics import QueueLevels
from notee.store.mysql import db_now


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


@dataclass(frozen=True, slots=True)
class WorkerLeases:
    owner: str  # the worker's id (host:pid:suffix)
    tasks: int  # tasks it holds a live lease on
    lease_until: datetime  # its latest lease end (workers extend leases while they work)


@dataclass(frozen=True, slots=True)
class QueueOverview:
    queued: int  # tasks a worker may claim now (queued and due)
    oldest_queued_at: datetime | None  # created_at of the oldest job with a task queued and due
    running: int  # tasks under a live lease
    stale: int  # tasks whose lease expired without finishing (a worker died): the next claim takes them
    workers: list[WorkerLeases]
    now: datetime  # the database clock the figures were read at
    held: int = 0  # queued tasks not due yet: a scheduled job's (send_at), a local-time part's, a back-off
    scheduled_jobs: int = 0  # jobs waiting for their send_at (state scheduled): no task of theirs is claimable


def queue_overview(session: Session, service: str | None = None) -> QueueOverview:
    """Open work and the workers holding it, from the task leases (all services, or one). A worker
    shows while it holds a lease; an idle worker is not visible here (it has no row to show)."""
    scope = "" if service is None else " AND j.service = :s"
    params: dict[str, Any] = {"s": service}
    now = db_now(session)
    counts = session.execute(
        text(
            "SELECT SUM(t.state = 'queued' AND t.lease_until <= :now) AS queued_,"
            " SUM(t.state = 'queued' AND t.lease_until > :now) AS held_,"
            " COUNT(DISTINCT CASE WHEN j.state = 'scheduled' THEN j.job_id END) AS scheduled_,"
            " MIN(CASE WHEN t.state = 'queued' AND t.lease_until <= :now THEN j.created_at END) AS oldest_,"
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
        held=int(counts.held_ or 0),
        scheduled_jobs=int(counts.scheduled_ or 0),
    )
