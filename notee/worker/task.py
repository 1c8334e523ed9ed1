"""One claimed fan-out task, run to its end (``TaskRun``): its pages sent in order with a checkpoint
after each, and what an error that ends it early means.

    reader (PageReader)  --page-->  bounded queue  -->  send_page  -->  checkpoint (MySQL)

* After a page is sent, the task's checkpoint (slot, paging state after that page, counts) is
  written, fenced by the lease token. A SIGKILL therefore loses at most the page in flight: the
  lease expires, another worker claims the task and resumes from the checkpoint, so a device gets
  at most one duplicate.
* A lease keeper renews the lease every ``lease_s / 3`` while a page is slow.
* Fairness (docs/FANOUT.md): once a task has held its lane for ``fanout_fair_slice_s``, a checkpoint
  that finds another tenant waiting with fewer live leases gives the task back (a graceful release
  at that checkpoint) and the lane claims again; the claim serves that tenant first.
* Stop: the in-flight page is sent and checkpointed, what was read ahead is dropped (not
  checkpointed, so not lost) and the lease released. A page waiting to retry (Retry-After, backoff)
  wakes at once and its task is released *without* a checkpoint: the next owner re-sends that page
  (at most one page of duplicates).
* Outages (a store error, a provider that cannot be reached): the task is released without
  advancing its checkpoint and claimable again after an exponential backoff (capped); such a
  graceful release does not count as an attempt. Only crashes and unexpected errors at the same
  checkpoint count towards the poison limit. A paging state the server rejects is dropped and the
  slot resumes after the last checkpointed row.
* A page handed back in a provider outage (``PageHeld``) keeps what of it is done with the release
  (``task_leases.hold``); the next claim reads that hold with the job and sends only the rest of the
  page (``messages.not_yet_sent``), and its checkpoint deletes the hold (docs/FANOUT.md "Outages").
* Per task: one job read (the rendered payload) and one hold read. Per page: one checkpoint (retried
  on a deadlock).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import replace

from sqlalchemy.orm import Session, sessionmaker

from notee.core import logs, metrics, tracing
from notee.core.notification_id import source_of_job
from notee.core.vocabulary import PageCounts, RecipientRow
from notee.store import jobs_sql, page_holds_sql, task_leases
from notee.store.page_holds_sql import PageHold
from notee.store.task_leases import Claim, JobGone, LeaseLost
from notee.usecases.sender import PageAborted
from notee.worker.messages import messages_for, not_yet_sent
from notee.worker.reader import PageReader
from notee.worker.settle import SendPage as SendPage  # its users import it from here
from notee.worker.settle import TaskEnds, TaskHost

log = logging.getLogger(__name__)

FAIR_CHECK_S = 0.25  # how often a busy lane asks whether another tenant waits (once its slice is used)


class TaskRun(TaskEnds):
    """One claimed task of a lane (``spare``: the spare lane), from its claim to its end: done, given
    back (stop, fairness), or ended by an error whose meaning ``settle`` says. Holds the claim, the
    job, the counts so far and the key of the last row sent."""

    __slots__ = (
        "aborted",
        "after_slot",
        "claim",
        "fair_checked",
        "held",
        "hold",
        "host",
        "job",
        "key_slot",
        "last_key",
        "lost",
        "name",
        "pages",
        "reader",
        "sent",
        "spare",
        "started",
    )
    job: jobs_sql.JobRow  # read by start()
    reader: PageReader
    after_slot: dict[int, int]  # where the checkpoint goes once a slot is done
    hold: PageHold | None  # the page at the checkpoint was held in a provider outage: what of it is done

    def __init__(self, host: TaskHost, claim: Claim, *, spare: bool = False) -> None:
        self.host, self.claim, self.spare = host, claim, spare
        self.name = f"{claim.job_id}/{claim.task_no}"
        self.lost = asyncio.Event()  # set by the lease keeper once another worker owns the task
        self.started = self.fair_checked = time.monotonic()
        self.pages = self.sent = 0
        self.aborted = PageCounts()  # what the page a provider configuration error stopped did before it
        self.last_key = claim.resume_key  # (no, device_token) of the last row sent in the current slot
        self.key_slot = claim.current_slot
        self.held = False  # the checkpoint's page was held: its hold goes with the page's checkpoint

    async def run(self) -> None:
        """Run the task to its end, the lease keeper beside it."""
        keeper = asyncio.create_task(self.keep_lease())
        try:
            reader = await self.start()
            try:
                attributes: dict[str, str | int] = {
                    "notee.job_id": self.claim.job_id,
                    "notee.task_no": self.claim.task_no,
                }
                # the publish's trace (carried in the job's payload), in this process, later
                with tracing.span("notee.task", attributes, parent=self.job.payload.get("trace")):
                    await self.send_pages()
            finally:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
        except Exception as exc:
            try:
                await self.settle(exc)
            except Exception:  # never the lane's end: the lease expires, the next claim resumes it
                log.exception("task %s: settling %s failed; lease left to expire", self.name, type(exc).__name__)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)

    async def start(self) -> asyncio.Task[None]:
        """Read the job (its rendered payload: the task's one job read) and the hold of the page at the
        checkpoint, if it was held in a provider outage; start the reader."""
        job, self.hold = await asyncio.to_thread(_read_job, self.host.runtime.sessions, self.claim)
        self.job, self.held = job, self.hold is not None
        logs.service.set(job.service)
        self.reader = PageReader(self.host.runtime, self.host.fetch_size, self.claim, job)
        self.after_slot = dict(itertools.pairwise(self.reader.walk))
        return asyncio.create_task(self.reader.run())

    # ------------------------------------------------------------------ the page loop
    async def send_pages(self) -> None:
        """Send the reader's pages in order, each checkpointed, until the task is done or given back;
        a read error or a lost lease ends it with that error."""
        queue, host = self.reader.queue, self.host
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            slot, next_state, last_read, locales, to_send, dropped = item
            if self.lost.is_set():
                raise LeaseLost(f"lease of {self.name} lost")
            if host.stop.is_set():  # read ahead, not sent: the next owner resumes at the checkpoint
                await asyncio.to_thread(task_leases.release, host.runtime.sessions, self.claim)
                metrics.task_releases("stop").inc()
                log.info("task %s released on stop after %d pages", self.name, self.pages)
                return
            counts = await self.send(to_send, locales, dropped)
            if await self.advance(slot, next_state, last_read, counts):
                return

    async def send(
        self, to_send: list[RecipientRow], locales: dict[tuple[str, str], str] | None, dropped: int
    ) -> PageCounts:
        """One page: its recipients sent (none: a page the part skips or drops whole), its counts."""
        counts, expired, hold = PageCounts(), 0, self.hold
        self.hold = None  # the first page is the one at the checkpoint: the only one a hold is about
        if to_send:
            job = self.job
            messages = messages_for(to_send, job.payload, locales, source_of_job(job.job_id))
            if hold is not None:  # held before: only what is not done yet
                messages, expired = not_yet_sent(messages, hold)
                log.info("task %s: held page resumed: %d to send, %d past their TTL", self.name, len(messages), expired)
            try:
                if messages:
                    counts = await self.host.send_page(job.service, job.job_id, messages, job.dry_run)
            except PageAborted as exc:
                self.aborted = exc.counts
                raise
        if expired:
            counts = replace(counts, ttl_expired=expired)
        if dropped:
            counts = replace(counts, quiet_dropped=dropped)
        self.pages += 1
        self.sent += counts.sent
        self.host.backoff.reset()
        return counts

    async def advance(
        self, slot: int, next_state: bytes | None, last_read: tuple[int, str] | None, counts: PageCounts
    ) -> bool:
        """After a sent page: complete the task (its last page) or checkpoint it, then give it back on
        stop or to a waiting tenant. True when the task ends here."""
        claim, host = self.claim, self.host
        if slot != self.key_slot:
            self.key_slot, self.last_key = slot, None
        if last_read is not None:  # the last row read, sent or dropped as a moved duplicate
            self.last_key = last_read
        if next_state is None and slot == claim.slot_to:
            await asyncio.to_thread(task_leases.complete, host.runtime.sessions, claim, counts=counts, held=self.held)
            host.tasks_done += 1
            log.info(
                "task %s done: %d pages, %d sent in %.1fs",
                self.name,
                self.pages,
                self.sent,
                time.monotonic() - self.started,
            )
            return True
        resume_slot, resume_state, resume_key = (
            (slot, next_state, self.last_key)
            if next_state is not None
            else (self.after_slot.get(slot, slot + 1), None, None)
        )
        await asyncio.to_thread(
            task_leases.checkpoint,
            host.runtime.sessions,
            claim,
            current_slot=resume_slot,
            paging_state=resume_state,
            counts=counts,
            lease_s=host.lease_s,
            resume_key=resume_key,
            held=self.held,
        )
        self.held = False
        if host.stop.is_set():
            await asyncio.to_thread(task_leases.release, host.runtime.sessions, claim)
            metrics.task_releases("stop").inc()
            log.info("task %s released on stop at slot %d after %d pages", self.name, resume_slot, self.pages)
            return True
        return await self.yield_lane(resume_slot)

    async def yield_lane(self, resume_slot: int) -> bool:
        """Once the task has used its slice (and at most every FAIR_CHECK_S): give it back at the
        checkpoint just written when another tenant should have the lane. True when it did."""
        host = self.host
        now = time.monotonic()
        if now - self.started >= host.fair_slice_s and now - self.fair_checked >= FAIR_CHECK_S:
            self.fair_checked = now
            if await asyncio.to_thread(host.gives_lane_back, self.job.service, self.spare):
                # At the checkpoint just written: what was read ahead is dropped, the next owner
                # resumes here; a graceful release, not an attempt.
                await asyncio.to_thread(task_leases.release, host.runtime.sessions, self.claim)
                host.releases["yield"] += 1
                metrics.task_releases("yield").inc()
                log.info(
                    "task %s yielded its lane at slot %d after %d pages: %s",
                    self.name,
                    resume_slot,
                    self.pages,
                    "its tenant is served by another lane" if self.spare else "another tenant waits",
                )
                return True
        return False

    # ------------------------------------------------------------------ the lease
    async def keep_lease(self) -> None:
        """Renew the lease every lease_s / 3 while the task runs (a slow page keeps it); ``lost`` is
        set once another worker owns the task."""
        host, claim = self.host, self.claim
        while True:
            await asyncio.sleep(host.lease_s / 3)
            try:
                await asyncio.to_thread(task_leases.extend_lease, host.runtime.sessions, claim, lease_s=host.lease_s)
            except LeaseLost:
                self.lost.set()
                return
            except Exception as exc:  # transient: the next try or the next checkpoint renews it
                log.warning("lease renewal of %s/%s failed: %s", claim.job_id, claim.task_no, type(exc).__name__)


def _read_job(sessions: sessionmaker[Session], claim: Claim) -> tuple[jobs_sql.JobRow, PageHold | None]:
    with sessions() as session:
        job = jobs_sql.get_job(session, claim.job_id)
        hold = page_holds_sql.read(session, claim.job_id, claim.task_no)
    if job is None:
        raise JobGone(f"job {claim.job_id} is gone (pruned?)")
    return job, hold
