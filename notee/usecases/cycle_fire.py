"""The cycle fire: the jobs of the cycle templates due at one UTC minute, made once however many
scheduler replicas try. The ``notee scheduler`` process (notee.scheduler.runner) fires each minute
on its clock, and catches up missed ones; this module does one minute, in order (docs/SCHEDULER.md):

1. Claim it: insert its ``cycle_tick`` row. A duplicate key means another replica has it: stop.
2. Read ``cycle_timezone`` (one small partition): the timezones with cycle subscriptions.
3. For each timezone, :func:`notee.core.clock.due_buckets` says which local (day, hour,
   minute) buckets are due (one; more right after a spring-forward gap; none during the repeated
   hour of a fall-back). Read each bucket's ``cycle_due`` partition: the templates with subscribers.
4. Create one fan-out job per (template, bucket) with the idempotency key
   ``cycle:{key}:{timezone}:{DAYHHMM}:{utc minute}``: a retried or reclaimed minute finds the job
   it already made instead of making a second one.
5. Record the minute done (or late, when it ran after its own minute).

Each cycle job carries a deadline (its minute + grace) after which workers expire it instead of
sending it late.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import IntegrityError

from notee.core import clock, metrics
from notee.core.errors import InvalidInput, NotFound, PayloadTooLarge
from notee.core.vocabulary import CycleTarget
from notee.store import ticks
from notee.store.cql.due import timezones_in_use
from notee.store.jobs_sql import JobRow
from notee.store.runtime import Runtime
from notee.usecases.job_requests import JobRequest
from notee.usecases.publish import create_job

log = logging.getLogger(__name__)

# A template due at a minute: (bucket, service, notification_key, notification_type).
Due = tuple[CycleTarget, str, str, str]


@dataclass
class MinuteResult:
    minute_utc: datetime
    state: str  # done | late | taken (another replica has or had it)
    buckets: int = 0  # (timezone, local bucket) pairs with at least one due template
    jobs_created: int = 0
    jobs_existing: int = 0  # already made by an earlier attempt at this minute
    templates_skipped: int = 0  # in cycle_due but deleted in MySQL, or does not render: skipped
    job_ids: list[str] = field(default_factory=list)


def iso_minute(minute: datetime) -> str:
    return minute.strftime("%Y-%m-%dT%H:%MZ")


class CycleFire:
    """One replica's firing of minutes: its tick-ledger namespace and owner, the lease of its claims,
    the grace after which a minute's jobs expire, and how many jobs it creates at once. No schedule
    state: only the newest minute it ran (a metric)."""

    def __init__(
        self, runtime: Runtime, *, namespace: str, owner: str, lease_s: int, grace: timedelta, concurrency: int
    ) -> None:
        self.runtime = runtime
        self.namespace = namespace
        self.owner = owner
        self.lease_s = lease_s
        self.grace = grace
        self.concurrency = concurrency
        self.newest_minute: datetime | None = None  # the newest minute this replica ran (metrics)

    def run_minute(self, minute_utc: datetime, now: datetime) -> MinuteResult:
        """Run one UTC minute if this replica can claim it. ``now`` only decides whether the minute
        is recorded as done or late (and the lag)."""
        minute = clock.floor_minute(minute_utc)
        with self.runtime.sessions.begin() as session:
            mine = ticks.claim(
                session, namespace=self.namespace, minute_utc=minute, owner=self.owner, lease_s=self.lease_s
            )
        if not mine:
            return MinuteResult(minute, "taken")
        started = time.monotonic()
        result = self._create_jobs(minute, now)
        result.state = "late" if clock.floor_minute(now) > minute else "done"
        # the lag: from the minute's start to now (``now`` was read when the tick began)
        aware_now = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
        lag_s = (aware_now - minute).total_seconds() + time.monotonic() - started
        self._finish(result, lag_s)
        return result

    def _finish(self, result: MinuteResult, lag_s: float) -> None:
        """Record the minute's outcome in the tick ledger, the metrics and the log."""
        minute = result.minute_utc
        with self.runtime.sessions.begin() as session:
            kept = ticks.finish(
                session,
                namespace=self.namespace,
                minute_utc=minute,
                owner=self.owner,
                state=result.state,
                jobs=result.jobs_created + result.jobs_existing,
            )
        if not kept:  # our lease expired and another replica took the minute over; its jobs = ours
            log.warning("minute %s: claim taken over by another scheduler before it finished", iso_minute(minute))
        metrics.scheduler_minutes(result.state).inc()
        metrics.SCHEDULER_JOBS.inc(result.jobs_created)
        metrics.SCHEDULER_LAG.set(lag_s)
        if self.newest_minute is None or minute > self.newest_minute:
            self.newest_minute = minute
            metrics.SCHEDULER_LAST_MINUTE.set(minute.timestamp())
        log.log(
            logging.INFO if result.jobs_created or result.state == "late" else logging.DEBUG,
            "minute %s %s: %d bucket(s), %d job(s) created, %d existing, %d template(s) skipped",
            iso_minute(minute),
            result.state,
            result.buckets,
            result.jobs_created,
            result.jobs_existing,
            result.templates_skipped,
        )

    def due(self, minute: datetime) -> list[Due]:
        """The templates due at a UTC minute: 1 read of cycle_timezone, then one cycle_due partition
        read per (timezone, due bucket), concurrently."""
        st = self.runtime.statements
        buckets: list[CycleTarget] = []
        for tz in timezones_in_use(st):
            try:
                buckets.extend(clock.due_buckets(minute, tz))
            except ValueError:  # a zone this host's tz database lacks: loud, but the others still run
                log.error(
                    "minute %s: unknown timezone %r in cycle_timezone; its buckets are not run", iso_minute(minute), tz
                )
        futures = [(b, st.due_templates_async(b)) for b in buckets]  # every read in flight before any wait
        due = []
        for b, future in futures:  # a failed read fails the minute (abandoning the other reads is harmless)
            for service, key, type_ in st.due_rows_of(future):
                due.append((b, service, key, type_))
        return due

    def _create_jobs(self, minute: datetime, now: datetime) -> MinuteResult:
        due = self.due(minute)
        result = MinuteResult(minute, "running", buckets=len({b for b, *_ in due}))
        # The job's deadline: its minute + grace. Stored on the database clock as "this many seconds
        # from now", so it is right whatever clock ``now`` came from.
        create = MinuteJobs(self.runtime, minute, (minute + self.grace - now).total_seconds())
        if len(due) <= 1:
            outcomes = [create(item) for item in due]
        else:
            with ThreadPoolExecutor(
                max_workers=min(self.concurrency, len(due)), thread_name_prefix="scheduler-job"
            ) as pool:
                outcomes = list(pool.map(create, due))  # re-raises the first store error: minute stays claimed
        for job in outcomes:
            if job is None:
                result.templates_skipped += 1
            else:
                result.job_ids.append(job.job_id)
                if job.created:
                    result.jobs_created += 1
                else:
                    result.jobs_existing += 1
        return result


@dataclass(frozen=True, slots=True)
class MinuteJobs:
    """Creates the job of one due template of a minute, each in its own unit of work (a thread of
    the minute's pool may run it). None: the template is skipped (deleted since, or does not
    render); a store error is raised."""

    runtime: Runtime
    minute: datetime
    deadline_in_s: float  # seconds from now on the database clock

    def __call__(self, item: Due) -> JobRow | None:
        try:
            try:
                return self._create(*item)
            except IntegrityError:
                # Another scheduler inserted the same key concurrently (only after a takeover); a
                # fresh transaction sees its committed job and returns it.
                return self._create(*item)
        except NotFound as exc:
            # The due index may name a template deleted since (reconcile removes it later).
            log.warning("minute %s: template %s of %s skipped: %s", iso_minute(self.minute), item[2], item[1], exc)
            return None
        except (InvalidInput, PayloadTooLarge) as exc:
            # Saving refuses a CYCLE template that cannot render (notee/domain/render.py), so only a
            # template saved before that rule gets here: its subscribers get nothing until it is fixed.
            log.error(
                "minute %s: CYCLE template %s of %s does not render, nothing sent: %s",
                iso_minute(self.minute),
                item[2],
                item[1],
                exc,
            )
            return None

    def _create(self, bucket: CycleTarget, service: str, key: str, type_: str) -> JobRow:
        request = JobRequest(
            service=service,
            notification_key=key,
            method="CYCLE",
            type_=type_,
            target=bucket,
            idempotency_key=clock.idempotency_key(key, bucket, self.minute),
            deadline_in_s=self.deadline_in_s,
        )
        with self.runtime.sessions.begin() as session:  # this minute's job: its own unit of work
            return create_job(self.runtime, session, request)
