"""Retention of the tables that grow with activity (DATA-RULES.md "Every table"): finished publish
jobs (their tasks cascade), scheduler tick rows and dead letters are kept ``settings.retention_days``
and then deleted here.

``prune_all`` runs hourly inside every `notee scheduler` (on the hour) and on demand as
`notee prune`. Deletes go in small batches so each transaction is short and never blocks workers
claiming tasks or schedulers claiming minutes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from sqlalchemy.orm import Session

from notee.runtime import Runtime
from notee.store import deadletter, job_queue, ticks

log = logging.getLogger(__name__)

BATCH = 1000


def _drain(runtime: Runtime, delete_batch: Callable[[Session], int]) -> int:
    """Run ``delete_batch`` in its own transaction until it deletes less than a full batch."""
    total = 0
    while True:
        with runtime.sessions.begin() as session:
            n = delete_batch(session)
        total += n
        if n < BATCH:
            return total


def prune_jobs(runtime: Runtime, *, older_than_days: int | None = None) -> int:
    """Finished jobs (done/failed) older than the window; unfinished jobs are never pruned."""
    days = runtime.settings.retention_days if older_than_days is None else older_than_days
    return _drain(runtime, lambda s: job_queue.prune_finished(s, older_than_days=days, batch=BATCH))


def prune_ticks(runtime: Runtime, *, now: datetime | None = None) -> int:
    cutoff = ticks.retention_cutoff(now or datetime.now(timezone.utc), runtime.settings.retention_days)
    return _drain(runtime, lambda s: ticks.prune_ticks(s, older_than=cutoff, batch=BATCH))


def prune_dead_letters(runtime: Runtime, *, now: datetime | None = None) -> int:
    now = (now or datetime.now(timezone.utc)).replace(tzinfo=None)  # the column holds naive UTC
    cutoff = now - timedelta(days=runtime.settings.retention_days)
    return _drain(runtime, lambda s: deadletter.prune(s, older_than=cutoff, batch=BATCH))


def prune_all(runtime: Runtime, *, now: datetime | None = None) -> dict[str, int]:
    counts = {
        "jobs": prune_jobs(runtime),
        "ticks": prune_ticks(runtime, now=now),
        "dead_letters": prune_dead_letters(runtime, now=now),
    }
    if any(counts.values()):
        log.info("retention (%d days): pruned %s", runtime.settings.retention_days, counts)
    return counts
