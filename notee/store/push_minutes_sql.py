"""The ``push_minute`` table (schema/mysql/0039_push_minute.sql): each fan-out page's counts added to
its task's row of the minute, in the transaction that checkpoints the page; read back as pushes per
minute (a job's, a service's) and, with the job's task rows (``task_times``), as its per-page timeline.

Functions take the caller's Session and never commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from notee.core.vocabulary import PageCounts
from notee.store.mysql import affected

# The minute is the database clock's (UTC), like every other time the queue writes.
_ADD = text(
    "INSERT INTO push_minute (job_id, minute_utc, task_no, service, pages, targeted, sent, failed, pruned,"
    " first_at, last_at)"
    " VALUES (:j, DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%d %H:%i:00'), :n, :s, 1, :tg, :se, :fa, :pr,"
    " UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
    " ON DUPLICATE KEY UPDATE pages = pages + 1, targeted = targeted + VALUES(targeted),"
    " sent = sent + VALUES(sent), failed = failed + VALUES(failed), pruned = pruned + VALUES(pruned),"
    " last_at = VALUES(last_at)"
)


def add_page(session: Session, *, job_id: str, task_no: int, service: str, counts: PageCounts) -> None:
    """Add one sent page's counts to its task's row of this minute (a page that sent nothing: no row)."""
    if not counts.targeted:
        return
    session.execute(
        _ADD,
        {
            "j": job_id,
            "n": task_no,
            "s": service,
            "tg": counts.targeted,
            "se": counts.sent,
            "fa": counts.failed,
            "pr": counts.pruned,
        },
    )


@dataclass(frozen=True, slots=True)
class MinuteRow:
    """One minute's pages and counts (of a job's task, or summed over a service's jobs)."""

    minute_utc: datetime
    pages: int
    targeted: int
    sent: int
    failed: int
    pruned: int
    task_no: int | None = None
    first_at: datetime | None = None
    last_at: datetime | None = None


def service_minutes(session: Session, service: str, *, since: datetime) -> list[MinuteRow]:
    """A service's pushes per minute since ``since`` (naive UTC), minutes with none left out."""
    rows = session.execute(
        text(
            "SELECT minute_utc, SUM(pages) AS pages, SUM(targeted) AS targeted, SUM(sent) AS sent,"
            " SUM(failed) AS failed, SUM(pruned) AS pruned FROM push_minute"
            " WHERE service = :s AND minute_utc >= :since GROUP BY minute_utc ORDER BY minute_utc"
        ),
        {"s": service, "since": since},
    )
    return [
        MinuteRow(r.minute_utc, int(r.pages), int(r.targeted), int(r.sent), int(r.failed), int(r.pruned)) for r in rows
    ]


def job_minutes(session: Session, service: str, job_id: str, *, limit: int = 2000) -> list[MinuteRow]:
    """A job's rows, one per (minute, task), in time order (the service named: another's job has none)."""
    rows = session.execute(
        text(
            "SELECT minute_utc, task_no, pages, targeted, sent, failed, pruned, first_at, last_at FROM push_minute"
            " WHERE job_id = :j AND service = :s ORDER BY minute_utc, task_no LIMIT :lim"
        ),
        {"j": job_id, "s": service, "lim": limit},
    )
    return [
        MinuteRow(
            r.minute_utc,
            int(r.pages),
            int(r.targeted),
            int(r.sent),
            int(r.failed),
            int(r.pruned),
            int(r.task_no),
            r.first_at,
            r.last_at,
        )
        for r in rows
    ]


def prune(session: Session, *, older_than: datetime, batch: int) -> int:
    """Delete up to ``batch`` rows of minutes before ``older_than`` (naive UTC); how many were deleted."""
    return affected(
        session.execute(
            text("DELETE FROM push_minute WHERE minute_utc < :cut LIMIT :b"), {"cut": older_than, "b": batch}
        )
    )


def task_times(session: Session, job_id: str) -> list[Any]:
    """Each task's claim and end times with its counts (a job's timeline), in task order."""
    return list(
        session.execute(
            text(
                "SELECT task_no, state, started_at, finished_at, pages, targeted, sent, failed, pruned"
                " FROM fanout_task WHERE job_id = :j ORDER BY task_no"
            ),
            {"j": job_id},
        ).all()
    )
