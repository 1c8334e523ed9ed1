"""Retention of the fan-out work queue (DATA-RULES.md "Every table"): finished jobs and their tasks
are kept ``settings.retention_days`` after they finish, then deleted by ``notee prune``.

Deleting in batches keeps each transaction short, so workers claiming tasks are never blocked
behind one huge delete. Unfinished jobs are never pruned.
"""

from __future__ import annotations

import logging

from notee.runtime import Runtime
from notee.store import jobs as store

log = logging.getLogger(__name__)


def prune_jobs(runtime: Runtime, *, older_than_days: int | None = None, batch: int = 1000) -> int:
    """Delete finished jobs (and, by cascade, their tasks) older than the retention window. Returns
    how many jobs were deleted."""
    days = runtime.settings.retention_days if older_than_days is None else older_than_days
    total = 0
    while True:
        with runtime.sessions.begin() as session:
            n = store.prune_finished(session, older_than_days=days, batch=batch)
        total += n
        if n < batch:
            break
    log.info("pruned %d finished job(s) older than %d day(s)", total, days)
    return total
