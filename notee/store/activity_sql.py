"""Read-only aggregates for the operator views (``notee.domain.insight``): what a service's jobs did
and how many dead letters it got, per UTC hour, since a given time.

Each query names its services (one, or a page of the admin's) and reads through an index that starts
with ``service`` (``ix_job_service_created`` on fanout_job, ``ix_dead_letter_service`` on
dead_letter), and the task rows of those jobs by primary key; the admin's page of services comes
from ``active_services`` (``ix_job_created`` / ``ix_dead_letter_created``: the jobs and dead letters of
the window). The cost is the activity in the window, never a scan of the history.
Functions take the caller's Session and never commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

# The hour a row belongs to, as a string MariaDB and MySQL both format the same way.
_HOUR = "DATE_FORMAT({col}, '%Y-%m-%d %H:00:00')"


@dataclass(frozen=True, slots=True)
class JobActivity:
    """Jobs created in one UTC hour that are now in ``state``, and what their tasks did so far."""

    service: str
    hour: datetime
    state: str
    jobs: int
    targeted: int
    sent: int
    failed: int
    pruned: int
    no_credentials: int
    retried: int
    ttl_expired: int  # held by a provider outage past their push's TTL: not sent, not in targeted


def active_services(session: Session, since: datetime, after: str | None, limit: int) -> list[str]:
    """Up to ``limit`` services, in id order after ``after``, that have a job created or a dead letter
    recorded at or after ``since`` (naive UTC)."""
    rows = session.execute(
        text(
            "SELECT service FROM (SELECT DISTINCT service FROM fanout_job WHERE created_at >= :since"
            " UNION SELECT DISTINCT service FROM dead_letter WHERE created_at >= :since) AS active"
            " WHERE service > :after ORDER BY service LIMIT :n"
        ),
        {"since": since, "after": after or "", "n": limit},
    )
    return [str(service) for service in rows.scalars()]


def job_activity(session: Session, services: Sequence[str], since: datetime) -> list[JobActivity]:
    """Per (service, UTC hour of creation, current state): the jobs of ``services`` created at or
    after ``since`` (naive UTC) and the sums of their tasks' counts."""
    if not services:
        return []
    hour = _HOUR.format(col="j.created_at")
    query = text(
        f"SELECT j.service AS service_, {hour} AS hour_, j.state AS state_, COUNT(DISTINCT j.job_id) AS jobs_,"
        " COALESCE(SUM(t.targeted), 0) AS targeted_, COALESCE(SUM(t.sent), 0) AS sent_,"
        " COALESCE(SUM(t.failed), 0) AS failed_, COALESCE(SUM(t.pruned), 0) AS pruned_,"
        " COALESCE(SUM(t.no_credentials), 0) AS no_credentials_, COALESCE(SUM(t.retried), 0) AS retried_,"
        " COALESCE(SUM(t.ttl_expired), 0) AS ttl_expired_"
        " FROM fanout_job j LEFT JOIN fanout_task t ON t.job_id = j.job_id"
        " WHERE j.service IN :s AND j.created_at >= :since"
        " GROUP BY service_, hour_, state_ ORDER BY service_, hour_, state_"
    ).bindparams(bindparam("s", expanding=True))
    rows = session.execute(query, {"s": list(services), "since": since}).all()
    return [
        JobActivity(
            service=r.service_,
            hour=datetime.fromisoformat(r.hour_),
            state=r.state_,
            jobs=int(r.jobs_),
            targeted=int(r.targeted_),
            sent=int(r.sent_),
            failed=int(r.failed_),
            pruned=int(r.pruned_),
            no_credentials=int(r.no_credentials_),
            retried=int(r.retried_),
            ttl_expired=int(r.ttl_expired_),
        )
        for r in rows
    ]


def dead_letters_per_hour(
    session: Session, services: Sequence[str], since: datetime
) -> dict[tuple[str, datetime], int]:
    """(service, UTC hour) -> dead letters of ``services`` recorded in it at or after ``since`` (naive
    UTC). Dead letters replayed since are gone and not counted."""
    if not services:
        return {}
    hour = _HOUR.format(col="created_at")
    query = text(
        f"SELECT service AS service_, {hour} AS hour_, COUNT(*) AS n FROM dead_letter"
        " WHERE service IN :s AND created_at >= :since GROUP BY service_, hour_"
    ).bindparams(bindparam("s", expanding=True))
    rows = session.execute(query, {"s": list(services), "since": since}).all()
    return {(r.service_, datetime.fromisoformat(r.hour_)): int(r.n) for r in rows}
