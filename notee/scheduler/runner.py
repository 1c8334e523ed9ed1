"""The ``notee scheduler`` process: once a minute (APScheduler cron trigger at second 0) it fires the
current minute's cycle jobs (``notee.usecases.cycle_fire``: claim the minute once across replicas,
create one fan-out job per due template) and catches up the minutes it missed; hourly retention and
periodic reconcile batches run beside it, each claimed once per period.

Nothing lives in process memory between minutes: the tick rows are the state, so a restarted or
additional replica picks up exactly where the others are. After downtime, ``tick`` runs missed
minutes that are at most ``scheduler_grace_minutes`` old, late, once; older missed minutes are
recorded as ``skipped`` and never sent.

"Now" is the database server's clock, not the replica's: a replica whose own clock runs fast would
otherwise run future minutes early and record the minutes in between as skipped. A minute's jobs
carry a deadline (its minute + grace) after which workers expire them instead of sending them late.
Retention pruning is a separate hourly job, claimed once per hour across replicas.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from notee.core import clock, heartbeat, metrics
from notee.core.logs import announce_emulator
from notee.store import ticks
from notee.store.mysql import db_now
from notee.store.runtime import Runtime
from notee.usecases import receipt_repair, reconcile, retention
from notee.usecases.cycle_fire import CycleFire, MinuteResult, iso_minute
from notee.usecases.heartbeats import ProcessHeartbeat, beat_in_thread

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


@dataclass
class TickResult:
    minutes: list[MinuteResult]
    skipped: int  # older missed minutes recorded as skipped


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Scheduler:
    """One scheduler replica. Holds only configuration and the process's clients, no schedule state."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        namespace: str | None = None,
        owner: str | None = None,
        clock_fn: Clock | None = None,
        host_clock: Clock = clock.now_utc,
        lease_s: int | None = None,
        grace_minutes: int | None = None,
    ) -> None:
        """``clock_fn``: where "now" comes from (default: the database server's clock; tests inject a
        simulated one). ``host_clock``: this replica's own clock, only compared with the database's
        to warn about skew."""
        s = runtime.settings
        self.runtime = runtime
        self.namespace = namespace or s.scheduler_namespace
        self.owner = owner or _owner()
        self.clock: Clock = clock_fn or self.database_now
        self.host_clock = host_clock
        self.max_skew = timedelta(seconds=s.scheduler_max_clock_skew_s)
        self.lease_s = s.scheduler_lease_s if lease_s is None else lease_s
        self.grace = timedelta(minutes=s.scheduler_grace_minutes if grace_minutes is None else grace_minutes)
        self.fire = CycleFire(
            runtime,
            namespace=self.namespace,
            owner=self.owner,
            lease_s=self.lease_s,
            grace=self.grace,
            concurrency=s.scheduler_job_concurrency,
        )

    def database_now(self) -> datetime:
        """The database server's UTC clock: the one clock every replica (and every lease) shares."""
        with self.runtime.sessions() as session:
            return clock.aware_utc(db_now(session))

    def check_skew(self, now: datetime) -> timedelta:
        """How far this host's clock is off ``now`` (the database clock); logged when beyond
        ``scheduler_max_clock_skew_s``. Harmless for the minutes (they follow the database clock), but
        a skewed host fires its cron trigger off the minute, so it runs each minute that much late."""
        skew = self.host_clock() - now
        if abs(skew) > self.max_skew:
            log.warning(
                "scheduler %s: this host's clock is %+.1f s off the database clock; minutes follow the "
                "database clock, but fix the host's time sync",
                self.owner,
                skew.total_seconds(),
            )
        return skew

    def run_minute(self, minute_utc: datetime, *, now: datetime | None = None) -> MinuteResult:
        """Fire one UTC minute if this replica can claim it (``CycleFire.run_minute``). ``now``
        (default: the clock) only decides whether the minute is recorded as done or late."""
        return self.fire.run_minute(minute_utc, now or self.clock())

    # ------------------------------------------------------------------ a tick: now + catch-up
    def tick(self, now: datetime | None = None) -> TickResult:
        """What the cron trigger runs each minute (and once at start-up): the current minute first,
        then missed minutes within the grace window, late and oldest first; older missed minutes are
        recorded as skipped. ``now`` defaults to the database clock."""
        if now is None:
            now = self.clock()
            self.check_skew(now)
        current = clock.floor_minute(now)
        results = [self.run_minute(current, now=now)]
        missed, skipped = self._missed(current)
        for minute in missed:
            r = self.run_minute(minute, now=now)
            if r.state != "taken":
                results.append(r)
        return TickResult(results, skipped)

    def _missed(self, current: datetime) -> tuple[list[datetime], int]:
        """Minutes before ``current`` still to run (within grace, no finished row), and the count of
        older missed minutes just recorded as skipped. Steady state: one index range read."""
        window_start = current - self.grace
        with self.runtime.sessions.begin() as session:
            recorded = ticks.states(session, namespace=self.namespace, start=window_start, end=current)
            start = window_start
            skipped = 0
            if window_start.replace(tzinfo=None) not in recorded:
                older = ticks.last_recorded_before(session, namespace=self.namespace, before=window_start)
                if older is None:
                    # Nothing before the window: minutes before this namespace's first-ever tick were
                    # never scheduled, so they were not missed.
                    start = min(recorded).replace(tzinfo=UTC) if recorded else current
                else:
                    oldest_kept = current - timedelta(days=self.runtime.settings.retention_days)
                    gap_from = max(older.replace(tzinfo=UTC) + clock.MINUTE, oldest_kept)
                    gap = list(clock.minutes(gap_from, window_start))
                    skipped = ticks.record_skipped(
                        session, namespace=self.namespace, minutes=gap, owner=self.owner, before=window_start
                    )
                    metrics.scheduler_minutes("skipped").inc(skipped)
                    if gap:
                        log.warning(
                            "minutes %s .. %s missed beyond the %s grace window: recorded as skipped, not sent",
                            iso_minute(gap[0]),
                            iso_minute(gap[-1]),
                            self.grace,
                        )
        missed = [m for m in clock.minutes(start, current) if recorded.get(m.replace(tzinfo=None)) in (None, "running")]
        return missed, skipped

    def prune(self, now: datetime | None = None) -> dict[str, int]:
        """Retention of every growing table (ticks, finished jobs, dead letters): see notee/usecases/retention.py."""
        return retention.prune_all(self.runtime, now=now or self.clock())

    def prune_hourly(self, now: datetime | None = None) -> dict[str, int] | None:
        """The hourly retention run, on one replica: claim this hour's row in the tick ledger (namespace
        ``<namespace>/retention``, the same insert-once claim as a minute's), prune in bounded batches,
        record the rows deleted. None: another replica has (or had) this hour."""
        now = now or self.clock()
        hour = clock.floor_minute(now).replace(minute=0)
        space = retention_namespace(self.namespace)
        with self.runtime.sessions.begin() as session:
            mine = ticks.claim(session, namespace=space, minute_utc=hour, owner=self.owner, lease_s=self.lease_s)
        if not mine:
            return None
        counts = self.prune(now)
        with self.runtime.sessions.begin() as session:
            ticks.finish(
                session, namespace=space, minute_utc=hour, owner=self.owner, state="done", jobs=sum(counts.values())
            )
        return counts

    def reconcile_periodic(self, now: datetime | None = None) -> dict[str, int] | None:
        """A bounded `notee reconcile` batch (notee/usecases/reconcile.py ``reconcile_batch``: rows of deleted
        templates, users and devices; stale ``cycle_due``/``cycle_timezone`` rows), on one replica
        per ``RECONCILE_EVERY_MINUTES`` period: the same insert-once claim in the tick ledger
        (namespace ``<namespace>/reconcile``). None: another replica has (or had) this period."""
        now = now or self.clock()
        minute = clock.floor_minute(now)
        period = minute.replace(minute=minute.minute - minute.minute % RECONCILE_EVERY_MINUTES)
        space = reconcile_namespace(self.namespace)
        with self.runtime.sessions.begin() as session:
            mine = ticks.claim(session, namespace=space, minute_utc=period, owner=self.owner, lease_s=self.lease_s)
        if not mine:
            return None
        report = reconcile.reconcile_batch(self.runtime)
        with self.runtime.sessions.begin() as session:
            ticks.finish(
                session,
                namespace=space,
                minute_utc=period,
                owner=self.owner,
                state="done",
                jobs=report["index_rows_walked"],
            )
        return report


RECONCILE_EVERY_MINUTES = 10


def reconcile_namespace(namespace: str) -> str:
    """The tick-ledger namespace of a scheduler namespace's reconcile claims (64 chars max)."""
    return namespace[:54] + "/reconcile"


def retention_namespace(namespace: str) -> str:
    """The tick-ledger namespace of a scheduler namespace's hourly retention claims (64 chars max)."""
    return namespace[:54] + "/retention"


# ---------------------------------------------------------------------- the process
def serve(runtime: Runtime, *, stop: threading.Event | None = None) -> None:
    """Run the scheduler until SIGTERM/SIGINT (or ``stop`` is set): tick once now (catching up
    after downtime), then at second 0 of every minute. Stopping waits for the tick in progress."""
    announce_emulator(runtime.settings, "scheduler")
    stop = stop or threading.Event()
    scheduler = Scheduler(runtime)

    def on_signal(signum: int, _frame: object) -> None:
        log.info("scheduler: signal %s, stopping after the current tick", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def safe_tick() -> None:
        try:
            scheduler.tick()
        except Exception:  # the minute stays claimed-running; the next tick reclaims it within grace
            log.exception("scheduler tick failed")
        heartbeat.beat(runtime.settings.heartbeat_file)  # a tick ended: notee healthcheck scheduler

    log.info("scheduler %s started: namespace=%s grace=%s", scheduler.owner, scheduler.namespace, scheduler.grace)
    exporter = metrics.serve(runtime.settings.scheduler_metrics_port, runtime.settings.metrics_host, "scheduler")
    safe_tick()
    aps = BackgroundScheduler(timezone=UTC)
    # One tick at a time; a fire missed while the previous tick ran is dropped (coalesced): the next
    # tick's catch-up runs that minute late instead.
    aps.add_job(
        safe_tick, CronTrigger(second=0, timezone=UTC), id="tick", max_instances=1, coalesce=True, misfire_grace_time=30
    )
    _add_maintenance(aps, scheduler)
    aps.start()
    # every process's row in MySQL (the health page): from a thread of its own, so a minute's long
    # tick does not make the scheduler look dead; it stops (and deletes its row) with the scheduler
    beats_stop = threading.Event()
    beats = beat_in_thread(ProcessHeartbeat(runtime, "scheduler"), beats_stop)
    try:
        stop.wait()
    finally:
        aps.shutdown(wait=True)
        beats_stop.set()
        beats.join()
        if exporter is not None:
            exporter.close()
        log.info("scheduler %s stopped", scheduler.owner)


def _add_maintenance(aps: BackgroundScheduler, scheduler: Scheduler) -> None:
    """The store maintenance beside the minute tick, each in its own APScheduler job and thread:
    retention, reconcile and the receipts' recount."""

    def safe_prune() -> None:
        try:
            scheduler.prune_hourly()
        except Exception:  # the hour stays claimed-running; another replica takes it over after the lease
            log.exception("scheduler retention run failed")

    def safe_reconcile() -> None:
        try:
            scheduler.reconcile_periodic()
        except Exception:  # the period stays claimed-running; the next period's run goes on from the cursor
            log.exception("scheduler reconcile run failed")

    def safe_receipts() -> None:
        try:
            report = receipt_repair.repair_kept(scheduler.runtime)
            if report.get("jobs_recounted") or report.get("jobs_failed"):
                log.info("scheduler receipt recount: %s", report)
        except Exception:  # the records stay: the next minute's run takes them
            log.exception("scheduler receipt recount failed")

    # Retention outside the minute tick (its own thread, never delaying a minute), at a quiet second
    # of minute 7 of each hour; one replica per hour wins the claim, the others return at once.
    aps.add_job(
        safe_prune,
        CronTrigger(minute=7, second=30, timezone=UTC),
        id="retention",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=600,
    )
    # Reconcile (deletion leftovers, stale due index) in bounded batches, every 10 minutes at second
    # 45, one replica per period (issue 14.5).
    aps.add_job(
        safe_reconcile,
        CronTrigger(minute=f"*/{RECONCILE_EVERY_MINUTES}", second=45, timezone=UTC),
        id="reconcile",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=300,
    )
    # Jobs whose receipt counters may have missed events (a batch answered 503 after its rows landed)
    # are recounted from their rows, every minute at second 20; one process at a time (a MySQL named
    # lock: two recounts of one job would add its difference twice).
    aps.add_job(
        safe_receipts,
        CronTrigger(second=20, timezone=UTC),
        id="receipt-recount",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=60,
    )
