"""How a fan-out task's run ends early (``TaskEnds``, the part of ``notee.worker.task.TaskRun`` that
settles the error that ended it), and what a task uses of its worker (``TaskHost``): see
notee/worker/task.py and docs/FANOUT.md "Outages"."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from notee.core import metrics
from notee.core.errors import ProviderConfigError, ProviderUnavailable
from notee.core.vocabulary import PageCounts
from notee.providers.base import Message
from notee.store import task_leases
from notee.store.cql.recipients import PagingStateRejected
from notee.store.outage import is_store_outage
from notee.store.page_holds_sql import HeldPage
from notee.store.runtime import Runtime
from notee.store.task_leases import Claim, JobCancelled, JobGone, LeaseLost
from notee.usecases.deliver import Stopping
from notee.usecases.sender import PageAborted, PageHeld
from notee.worker.audience_rows import ConditionTooLarge
from notee.worker.outage import OutageBackoff, is_outage

log = logging.getLogger(__name__)

# (service, job_id, messages, dry_run) -> counts (``targeted == len(messages)``). Retries, pruning
# and dead-lettering happen inside; it raises ProviderConfigError (PageAborted: with the counts of
# what the page did before the error) when the service's credentials are missing or unusable: the
# whole job fails once. Production: ``notee.usecases.deliver.DeliverySender``.
SendPage = Callable[[str, str, Sequence[Message], bool], Awaitable[PageCounts]]


class TaskHost(Protocol):
    """What a task uses of the worker that runs it (``notee.worker.lanes.Worker``, which imports this
    module: a protocol, so the two do not import each other)."""

    runtime: Runtime
    send_page: SendPage
    stop: asyncio.Event  # shared with the sender, so a retry wait ends on stop too
    backoff: OutageBackoff  # shared by the lanes
    lease_s: float
    fetch_size: int
    fair_slice_s: float
    releases: dict[str, int]  # tasks given back, by cause
    tasks_done: int

    def gives_lane_back(self, service: str, spare: bool) -> bool: ...

    async def sleep(self, seconds: float) -> None: ...


class TaskEnds:
    """What the error that ended a task's run means (``settle``) and how the task is given back; a
    part of ``TaskRun`` (its attributes are the run's)."""

    __slots__ = ()
    host: TaskHost
    claim: Claim
    name: str
    aborted: PageCounts  # what the page a provider configuration error stopped did before it

    async def settle(self, exc: Exception) -> None:
        """What the error that ended the task means: the first of these kinds it is of."""
        if isinstance(exc, JobCancelled):
            log.info("task %s stopped: its job was cancelled", self.name)
        elif isinstance(exc, LeaseLost):
            log.warning("task %s: %s; another worker owns it now", self.name, exc)
        elif isinstance(exc, JobGone):  # nothing left to send: its tasks went with the job row
            log.warning("task %s: %s", self.name, exc)
        elif isinstance(exc, Stopping):
            await self._release_waiting_page()
        elif isinstance(exc, ProviderConfigError):
            await self._fail_on_configuration(exc)
        elif isinstance(exc, ConditionTooLarge):  # every task of the job would meet it: fail it once
            log.error("job %s failed: %s", self.claim.job_id, exc)
            await self._fail_job(f"condition: {exc} (NOTEE_CONDITION_MEMBERS_MAX)", self.aborted)
        elif isinstance(exc, PagingStateRejected):
            await self._resume_after_key(exc)
        elif isinstance(exc, PageHeld):
            await self._hold(exc)
        else:
            await self._release_after_error(exc)

    async def _release_waiting_page(self) -> None:
        """The page was waiting to retry: give the task back at its last checkpoint (nothing of this
        page was recorded, so the next owner re-sends it whole)."""
        try:
            await asyncio.to_thread(task_leases.release, self.host.runtime.sessions, self.claim)
            metrics.task_releases("stop").inc()
            log.info("task %s released on stop while a page waited to retry; checkpoint unchanged", self.name)
        except LeaseLost:
            pass

    async def _fail_on_configuration(self, exc: ProviderConfigError) -> None:
        """Every page of the job would meet the same error: the whole job fails once, here. What of
        the page is done is kept with the task: a requeue of the job sends that page's other devices."""
        log.error("job %s failed: provider configuration: %s", self.claim.job_id, exc.message)
        held = exc.held if isinstance(exc, PageAborted) else None
        await self._fail_job(f"provider configuration: {exc.message}", self.aborted, held)

    async def _resume_after_key(self, exc: PagingStateRejected) -> None:
        """Not an outage and not poison: resume the slot after the checkpointed key from now on."""
        claim = self.claim
        log.warning(
            "task %s: Cassandra rejected the paging state (%s); resuming slot %d after key %s",
            self.name,
            exc,
            claim.current_slot,
            "(start)" if claim.resume_key is None else claim.resume_key[0],
        )
        self.host.releases["paging_state"] += 1
        metrics.task_releases("paging_state").inc()
        try:
            await asyncio.to_thread(task_leases.forget_paging_state, self.host.runtime.sessions, claim)
        except Exception as forget_exc:  # the next claim meets the same state and comes back here
            log.warning("task %s: could not drop the paging state (%s)", self.name, type(forget_exc).__name__)
        await self._release(delay_s=0.0, error="paging state rejected; resuming from the checkpointed key")

    async def _release_after_error(self, exc: Exception) -> None:
        """An outage: released without advancing, not an attempt; anything else: released, counted as
        an attempt. Both claimable again after the backoff."""
        host = self.host
        error = f"{type(exc).__name__}: {exc}"
        delay = host.backoff.next_delay()
        if is_outage(exc):
            if isinstance(exc, ProviderUnavailable):
                delay = max(delay, exc.retry_in)
            log.warning(
                "task %s: outage (%s); released without advancing, retry in %.1f s", self.name, error[:200], delay
            )
            host.releases["outage"] += 1
            metrics.task_releases("outage").inc()
            await self._release(delay_s=delay, error=error)
        else:
            log.exception(
                "task %s: unexpected error; released, counted as an attempt, retry in %.1f s", self.name, delay
            )
            host.releases["error"] += 1
            metrics.task_releases("error").inc()
            await self._release(delay_s=delay, error=error, counts_as_attempt=True)

    async def _hold(self, exc: PageHeld) -> None:
        """A provider (or push service) cannot be reached: an outage, not an attempt. What the page did
        is counted and its done devices kept with the release (``task_leases.hold``), so the next claim
        (when the breaker lets a probe through, or after the backoff) sends only the rest."""
        host, held = self.host, exc.held
        stopping = host.stop.is_set()  # the page waited to retry when the worker was told to stop
        delay = 0.0 if stopping else max(host.backoff.next_delay(), exc.retry_in)
        log.warning(
            "task %s: %s (%s); page held with %d of its devices done, claimable in %.1f s",
            self.name,
            "released on stop" if stopping else "outage",
            held.error[:200],
            held.counts.targeted,
            delay,
        )
        cause = "stop" if stopping else "outage"
        host.releases[cause] = host.releases.get(cause, 0) + 1
        metrics.task_releases(cause).inc()
        sessions, claim = host.runtime.sessions, self.claim
        await self._give_back(lambda: task_leases.hold(sessions, claim, held, delay_s=delay))

    async def _release(self, *, delay_s: float, error: str, counts_as_attempt: bool = False) -> None:
        """Give the task back (``_give_back``)."""
        sessions, claim = self.host.runtime.sessions, self.claim
        await self._give_back(
            lambda: task_leases.release(
                sessions, claim, delay_s=delay_s, error=error, counts_as_attempt=counts_as_attempt
            )
        )

    async def _give_back(self, write: Callable[[], None]) -> None:
        """Give the task back with ``write``. While MySQL itself is down, keep trying (with the outage
        backoff) so it lands and does not count as a crash; give up on stop (the lease expires)."""
        host = self.host
        while True:
            try:
                await asyncio.to_thread(write)
                return
            except LeaseLost:
                return
            except Exception as exc:
                if host.stop.is_set() or not is_store_outage(exc):
                    log.warning("task %s: release failed (%s); its lease will expire", self.name, type(exc).__name__)
                    return
                wait = host.backoff.next_delay()
                log.warning("task %s: release failed (%s); retrying in %.1f s", self.name, type(exc).__name__, wait)
                await host.sleep(wait)

    async def _fail_job(self, error: str, counts: PageCounts, held: HeldPage | None = None) -> None:
        sessions, claim = self.host.runtime.sessions, self.claim
        try:
            await asyncio.to_thread(
                lambda: task_leases.fail_job(sessions, claim, error=error, counts=counts, held=held)
            )
        except LeaseLost:  # another worker owns the task now; it meets the same error and fails the job
            pass
        except Exception as exc:  # MySQL down past fail_job's retries: an outage; the next claim fails the job
            if not is_store_outage(exc):
                raise
            await self._release_after_error(exc)
