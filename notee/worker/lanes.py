"""``notee worker``'s lanes (``Worker``): claim fan-out tasks and run them, one at a time per lane.

One asyncio loop per process (``notee.worker.process``). ``lanes`` coroutines each loop: claim a task
(``SELECT … FOR UPDATE SKIP LOCKED`` + lease), then run it (``notee.worker.task.TaskRun``).

* Idle lanes take turns asking for work, one every ``IDLE_POLL_S / lanes``; a claim wakes them all
  (the job may have more tasks).
* Fairness (docs/FANOUT.md): a task that has used its slice gives its lane back at a checkpoint when
  another tenant waits with fewer live leases (``gives_lane_back``); the claim serves that tenant
  first. With ``fanout_spare_lane`` the process runs one lane more, which only takes work of a
  tenant no lane serves, so such a tenant does not wait for a busy lane's next page.
* SIGTERM/SIGINT (``stop``): lanes stop claiming; each finishes (sends and checkpoints) its in-flight
  page, releases the lease and exits.
* A claim that fails (MySQL down) waits the outage backoff shared by the lanes, then tries again;
  the first page sent afterwards resets it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from notee.core import logs, metrics
from notee.store import claim_order, task_leases
from notee.store.runtime import Runtime
from notee.worker.outage import OutageBackoff
from notee.worker.task import SendPage, TaskRun

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.5  # how often each lane of an idle worker asks for work (they take turns: _idle_wait)


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How a worker runs (``notee worker``'s flags); None: from the settings, or made up
    (``worker_id``: host:pid:random)."""

    lanes: int = 2
    spare_lane: bool = False  # one more lane, for tenants no lane serves (docs/FANOUT.md, fairness)
    worker_id: str | None = None
    lease_s: float | None = None
    fetch_size: int | None = None
    services: Sequence[str] | None = None  # None: every tenant's jobs


class Worker:
    """A worker's lanes: each claims a task, runs it to its end, claims again (until ``stop``). The
    outage backoff, the stop event and the counts of tasks done and given back are the lanes'."""

    def __init__(
        self,
        runtime: Runtime,
        send_page: SendPage,
        options: WorkerOptions = WorkerOptions(),
        *,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.runtime = runtime
        self.send_page = send_page
        self.lanes = options.lanes
        self.spare_lane = options.spare_lane
        self.worker_id = options.worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_s = options.lease_s or runtime.settings.fanout_lease_s
        self.fetch_size = options.fetch_size or runtime.settings.fanout_fetch_size
        self.services = list(options.services) if options.services else None
        self.stop = stop or asyncio.Event()  # shared with the sender, so a retry wait ends on stop too
        self.tasks_done = 0
        self.backoff = OutageBackoff(cap_s=runtime.settings.fanout_outage_backoff_cap_s)
        self.releases = {"outage": 0, "error": 0, "paging_state": 0, "yield": 0}  # tasks given back, by cause
        self.fair_slice_s = runtime.settings.fanout_fair_slice_s
        self._idle_turn = 0.0  # monotonic time of the latest idle lane's turn to ask (a claim restarts them)
        self._claimed = asyncio.Event()  # set (and replaced) when a lane claims: idle lanes ask at once

    # ------------------------------------------------------------------ claim loop
    async def run(self, *, until_idle: bool = False) -> None:
        """Run the lanes until ``stop`` is set (or, with ``until_idle``, until no task is left)."""
        log.info(
            "worker %s: %d lanes%s, fetch_size=%d, lease=%ss",
            self.worker_id,
            self.lanes,
            " + 1 spare" if self.spare_lane else "",
            self.fetch_size,
            self.lease_s,
        )
        lanes = [self._lane(i, until_idle) for i in range(self.lanes)]
        if self.spare_lane:
            lanes.append(self._lane(self.lanes, until_idle, spare=True))
        await asyncio.gather(*lanes)
        log.info("worker %s: stopped after %d task(s)", self.worker_id, self.tasks_done)

    async def _lane(self, lane: int, until_idle: bool, spare: bool = False) -> None:
        while not self.stop.is_set():
            try:
                claim = await asyncio.to_thread(
                    task_leases.claim,
                    self.runtime.sessions,
                    owner=self.worker_id,
                    lease_s=self.lease_s,
                    services=self.services,
                    unserved_only=spare,
                )
            except Exception as exc:  # store down: keep the process, try again after a backoff
                delay = self.backoff.next_delay()
                log.warning(
                    "worker %s lane %d: claim failed (%s); retrying in %.1f s",
                    self.worker_id,
                    lane,
                    type(exc).__name__,
                    delay,
                )
                await self.sleep(delay)
                continue
            if claim is None:
                if until_idle:
                    return
                await self._idle_wait()
                continue
            # The job may hold more tasks: the idle lanes ask at once (one extra ask each per claim),
            # and their turns start again from now.
            self._claimed.set()
            self._claimed = asyncio.Event()
            self._idle_turn = time.monotonic()
            metrics.TASKS_CLAIMED.inc()
            if claim.taken_over:
                metrics.LEASE_TAKEOVERS.inc()
                log.info(
                    "worker %s lane %d: took over %s/%s (its lease had expired)",
                    self.worker_id,
                    lane,
                    claim.job_id,
                    claim.task_no,
                )
            with logs.task_context(claim.job_id):  # job_id (and service, once read) on the task's log lines
                await TaskRun(self, claim, spare=spare).run()

    def _next_idle_turn(self, now: float) -> float:
        """When an idle lane asking at ``now`` asks again: the worker's idle lanes take turns, one
        every IDLE_POLL_S / lanes, so a new job waits about that long for its first claim (lanes
        asking in step each IDLE_POLL_S kept it waiting up to IDLE_POLL_S), and an idle worker asks
        no more often than before: each of its lanes every IDLE_POLL_S."""
        lanes = self.lanes + (1 if self.spare_lane else 0)
        self._idle_turn = max(now, self._idle_turn) + IDLE_POLL_S / lanes
        return self._idle_turn

    async def _idle_wait(self) -> None:
        """An idle lane's pause until its turn (``_next_idle_turn``), ended early by stop or by a
        claim of another lane (the job may have more tasks)."""
        now = time.monotonic()
        turn = self._next_idle_turn(now)
        waits = [asyncio.ensure_future(self.stop.wait()), asyncio.ensure_future(self._claimed.wait())]
        try:
            await asyncio.wait(waits, timeout=turn - now, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less: until ``stop``."""
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            pass

    def gives_lane_back(self, service: str, spare: bool) -> bool:
        """At a checkpoint: should this lane release its task of ``service``? A regular lane when
        another tenant waits with fewer live leases; the spare lane as soon as the tenant holds a
        lease besides this one (the regular lanes serve it; the spare lane stays free for the next)."""
        if spare:
            return claim_order.live_leases(self.runtime.sessions, service) > 1
        # With a spare lane, a waiting tenant gets two idle polls to be claimed by it before the
        # busy lanes give up their pages for it (no churn for every small publish).
        waited = 2 * IDLE_POLL_S if self.spare_lane else 0.0
        return claim_order.tenant_waiting(self.runtime.sessions, service, self.services, waited_s=waited)
