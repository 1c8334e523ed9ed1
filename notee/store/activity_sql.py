"""Read-only aggregates for the operator views (``notee.domain.insight``): what a service's jobs did
and how many dead letters it got, per UTC hour, since a given time.

For one service each query reads through an index that starts with ``service``
(``ix_job_service_created`` on fanout_job, ``ix_dead_letter_service`` on dead_letter); for every
service (``service=None``, the admin) through ``ix_job_created`` / ``ix_dead_letter_created``; and the
task rows of those jobs by primary key. Either way the cost is the activity in the window, never a
scan of the history.
Functions take the caller's Session and never commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
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


def job_activity(session: Session, service: str | None, since: datetime) -> list[JobActivity]:
    """Per (service, UTC hour of creation, current state): the jobs of ``service`` (or of every
    service) created at or after ``since`` (naive UTC) and the sums of their tasks' counts."""
    hour = _HOUR.format(col="j.created_at")
    which = "j.service = :s AND " if service is not None else ""
    rows = session.execute(
        text(
            f"SELECT j.service AS service_, {hour} AS hour_, j.state AS state_, COUNT(DISTINCT j.job_id) AS jobs_,"
            " COALESCE(SUM(t.targeted), 0) AS targeted_, COALESCE(SUM(t.sent), 0) AS sent_,"
            " COALESCE(SUM(t.failed), 0) AS failed_, COALESCE(SUM(t.pruned), 0) AS pruned_,"
            " COALESCE(SUM(t.no_credentials), 0) AS no_credentials_, COALESCE(SUM(t.retried), 0) AS retried_,"
            " COALESCE(SUM(t.ttl_expired), 0) AS ttl_expired_"
            " FROM fanout_job j LEFT JOIN fanout_task t ON t.job_id = j.job_id"
            f" WHERE {which}j.created_at >= :since"
            " GROUP BY service_, hour_, state_ ORDER BY service_, hour_, state_"
        ),
        {"s": service, "since": since},
    ).all()
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


def dead_letters_per_hour(session: Session, service: str | None, since: datetime) -> dict[tuple[str, datetime], int]:
    """(service, UTC hour) -> dead letters recorded in it at or after ``since`` (naive UTC), of
    ``service`` or of every service. Dead letters replayed since are gone and not counted."""
    hour = _HOUR.format(col="created_at")
    which = "service = :s AND " if service is not None else ""
    rows = session.execute(
        text(
            f"SELECT service AS service_, {hour} AS hour_, COUNT(*) AS n FROM dead_letter"
            f" WHERE {which}created_at >= :since GROUP BY service_, hour_"
        ),
        {"s": service, "since": since},
    ).all()
    return {(r.service_, datetime.fromisoformat(r.hour_)): int(r.n) for r in rows}
