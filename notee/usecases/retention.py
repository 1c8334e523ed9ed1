"""Retention of the tables that grow with activity (DATA-RULES.md "Every table"): finished publish
jobs (their tasks cascade), scheduler tick rows, dead letters, finished webhook deliveries and finished
bulk imports (their chunks and failed lines cascade) are kept ``settings.retention_days`` and then
deleted here (jobs at least as long as their receipts: ``job_retention_days``); expired web console sessions are deleted too, the
Idempotency-Keys of immediate single sends once they are 24 hours old, the per-minute push counts once
2 days old and the heartbeat rows of processes silent for an hour.

``prune_all`` runs hourly in `notee scheduler` (its own job beside the minute tick, on the one
replica that claims the hour: ``Scheduler.prune_hourly``) and on demand as `notee prune`. Deletes go
in small batches (each its own short transaction, at most ``MAX_BATCHES`` per table per run) so they
never block workers claiming tasks or schedulers claiming minutes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from notee.core import notification_id
from notee.core.clock import naive_utc, now_utc
from notee.core.settings import Settings
from notee.store import (
    console_sql,
    deadletter,
    heartbeat_sql,
    imports_sql,
    jobs_sql,
    push_minutes_sql,
    send_idempotency_sql,
    ticks,
    webhooks_sql,
)
from notee.store.runtime import Runtime
from notee.usecases import send_once

log = logging.getLogger(__name__)

BATCH = 1000
# At most this many batches per table per run (100,000 rows): a backlog (retention shortened, a long
# pause) is worked off over several hourly runs instead of one run that never ends.
MAX_BATCHES = 100


def _drain(runtime: Runtime, delete_batch: Callable[[Session], int]) -> int:
    """Run ``delete_batch`` in its own transaction until it deletes less than a full batch (or
    ``MAX_BATCHES`` batches were deleted; the rest waits for the next run)."""
    total = 0
    for _ in range(MAX_BATCHES):
        with runtime.sessions.begin() as session:
            n = delete_batch(session)
        total += n
        if n < BATCH:
            return total
    log.info("retention: stopped after %d rows of one table; the next run continues", total)
    return total


def job_retention_days(settings: Settings) -> int:
    """How long a finished job is kept: ``retention_days``, but never less than its receipts
    (``receipts_retention_days``): a job, its figures and the receipts the apps may still post for
    it live and go together (docs/ENGAGEMENT.md "Retention")."""
    return max(settings.retention_days, settings.receipts_retention_days)


def prune_jobs(runtime: Runtime, *, older_than_days: int | None = None) -> int:
    """Jobs finished (done, failed, expired, cancelled) more than ``job_retention_days`` ago; unfinished jobs are
    never pruned. Their engagement counters go first (Cassandra before MySQL: a failure leaves the
    job to find them again)."""
    days = job_retention_days(runtime.settings) if older_than_days is None else older_than_days

    def batch(session: Session) -> int:
        jobs = jobs_sql.prunable(session, older_than_days=days, batch=BATCH)
        runtime.statements.forget_jobs((svc, notification_id.source_of_job(job)) for svc, job in jobs)
        return jobs_sql.prune_jobs(session, [job for _, job in jobs])

    return _drain(runtime, batch)


# Engagement counters per type, topic and day are kept this many months (a year to compare with).
ENGAGEMENT_MONTHS = 13


def prune_engagement_months(runtime: Runtime, *, now: datetime | None = None) -> int:
    """The engagement day and scope partitions of the three months before the kept ones, of the
    services listed as holding counters in them (counters take no TTL: docs/ENGAGEMENT.md "Retention
    of the counters"); the partitions deleted (scope partitions: absent ones too; day partitions: the
    buckets that held cells). A month nothing is listed for costs MONTH_SHARDS small reads."""
    return runtime.statements.forget_months(engagement_months_to_prune(now or now_utc()))


def engagement_months_to_prune(now: datetime) -> list[str]:
    """YYYY-MM of the months ENGAGEMENT_MONTHS to ENGAGEMENT_MONTHS + 2 before ``now``'s."""
    today = now.date().replace(day=1)
    months = []
    for back in range(ENGAGEMENT_MONTHS, ENGAGEMENT_MONTHS + 3):
        year, month = divmod(today.year * 12 + today.month - 1 - back, 12)
        months.append(f"{year:04d}-{month + 1:02d}")
    return months


def prune_ticks(runtime: Runtime, *, now: datetime | None = None) -> int:
    cutoff = ticks.retention_cutoff(now or datetime.now(UTC), runtime.settings.retention_days)
    return _drain(runtime, lambda s: ticks.prune_ticks(s, older_than=cutoff, batch=BATCH))


def prune_dead_letters(runtime: Runtime, *, now: datetime | None = None) -> int:
    now = naive_utc(now or now_utc())  # the column holds naive UTC
    cutoff = now - timedelta(days=runtime.settings.retention_days)
    return _drain(runtime, lambda s: deadletter.prune(s, older_than=cutoff, batch=BATCH))


def prune_console_sessions(runtime: Runtime) -> int:
    """Web console sessions past their expiry (they no longer sign anyone in; the row is only waste)."""
    return _drain(runtime, lambda s: console_sql.prune_expired(s, batch=BATCH))


def prune_webhook_deliveries(runtime: Runtime) -> int:
    """Delivered and failed webhook deliveries finished more than retention_days ago (pending ones
    are kept until they finish: at most webhook_retry_hours)."""
    days = runtime.settings.retention_days
    return _drain(runtime, lambda s: webhooks_sql.prune_finished(s, older_than_days=days, batch=BATCH))


def prune_imports(runtime: Runtime) -> int:
    """Bulk imports finished more than retention_days ago (their chunks and failed lines cascade);
    unfinished imports are never pruned."""
    days = runtime.settings.retention_days
    return _drain(runtime, lambda s: imports_sql.prune_finished(s, older_than_days=days, batch=BATCH))


def prune_send_keys(runtime: Runtime, *, now: datetime | None = None) -> int:
    """Idempotency-Keys of immediate single sends older than 24 hours (``send_once.TTL``): a request
    with such a key is a new request (its row would be replaced by it anyway)."""
    cutoff = naive_utc(now or now_utc()) - send_once.TTL
    return _drain(runtime, lambda s: send_idempotency_sql.prune(s, older_than=cutoff, batch=BATCH))


# A killed process's heartbeat row stays (stale, on the health page) this long after its last beat.
HEARTBEAT_KEPT = timedelta(hours=1)
# Pushes per minute are charted for the last hour; kept 2 days (schema/mysql/0039_push_minute.sql).
PUSH_MINUTES_KEPT = timedelta(days=2)


def prune_heartbeats(runtime: Runtime, *, now: datetime | None = None) -> int:
    """Heartbeat rows of processes that stopped beating more than an hour ago (killed ones: a graceful
    stop deletes its own row)."""
    cutoff = naive_utc(now or now_utc()) - HEARTBEAT_KEPT
    return _drain(runtime, lambda s: heartbeat_sql.prune(s, older_than=cutoff, batch=BATCH))


def prune_push_minutes(runtime: Runtime, *, now: datetime | None = None) -> int:
    """Per-minute push counts older than 2 days."""
    cutoff = naive_utc(now or now_utc()) - PUSH_MINUTES_KEPT
    return _drain(runtime, lambda s: push_minutes_sql.prune(s, older_than=cutoff, batch=BATCH))


def prune_all(runtime: Runtime, *, now: datetime | None = None) -> dict[str, int]:
    counts = {
        "jobs": prune_jobs(runtime),
        "ticks": prune_ticks(runtime, now=now),
        "dead_letters": prune_dead_letters(runtime, now=now),
        "console_sessions": prune_console_sessions(runtime),
        "webhook_deliveries": prune_webhook_deliveries(runtime),
        "imports": prune_imports(runtime),
        "send_idempotency_keys": prune_send_keys(runtime, now=now),
        "engagement_months": prune_engagement_months(runtime, now=now),
        "process_heartbeats": prune_heartbeats(runtime, now=now),
        "push_minutes": prune_push_minutes(runtime, now=now),
    }
    # engagement_months counts the deletes issued (absent partitions too): logged only with the others
    if any(n for table, n in counts.items() if table != "engagement_months"):
        log.info("retention (%d days): pruned %s", runtime.settings.retention_days, counts)
    return counts
