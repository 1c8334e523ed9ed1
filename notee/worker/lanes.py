"""``notee worker``: claim fan-out tasks, page recipients out of Cassandra, send, checkpoint.

One asyncio loop per process. ``lanes`` coroutines each loop: claim a task (``SELECT … FOR UPDATE
SKIP LOCKED`` + lease), then run it:

    reader (thread)  --page-->  bounded queue (2 pages)  -->  sender  -->  checkpoint (MySQL)

* The reader pages one slot at a time with ``fetch_size`` rows; the queue holds at most
  ``READ_AHEAD`` pages, so memory is bounded by (lanes x (READ_AHEAD + 1)) pages, whatever the
  topic's size.
* After a page is sent, the task's checkpoint (slot, paging state after that page, counts) is
  written, fenced by the lease token. A SIGKILL therefore loses at most the page in flight: the
  lease expires, another worker claims the task and resumes from the checkpoint, so a device gets
  at most one duplicate.
* A lease keeper renews the lease every ``lease_s / 3`` while a page is slow.
* Fairness (docs/FANOUT.md): once a task has held its lane for ``fanout_fair_slice_s``, a checkpoint
  that finds another tenant waiting with fewer live leases gives the task back (a graceful release
  at that checkpoint) and the lane claims again; the claim serves that tenant first. With
  ``fanout_spare_lane`` the process runs one lane more, which only takes work of a tenant no lane
  serves, so such a tenant does not wait for a busy lane's next page.
* SIGTERM/SIGINT: stop claiming; each lane finishes (sends and checkpoints) its in-flight page,
  drops what it read ahead (not checkpointed, so not lost), releases the lease and exits. A page
  waiting to retry (Retry-After, backoff) wakes at once and its task is released *without* a
  checkpoint: the next owner re-sends that page (at most one page of duplicates). Lanes still busy
  after ``fanout_stop_grace_s`` are abandoned; their leases expire and another worker resumes.
* Per device: no MySQL and no Cassandra query. Per task: one job read (the rendered payload).
  Per page: one Cassandra page read and one MySQL checkpoint.
* Outages (a store error, a provider that cannot be reached): the task is released without
  advancing its checkpoint and claimable again after an exponential backoff (capped); such a
  graceful release does not count as an attempt. Only crashes and unexpected errors at the same
  checkpoint count towards the poison limit. A provider mostly unreachable opens its circuit
  breaker: no more sends to it until a probe gets through. A paging state the server rejects is
  dropped and the slot resumes after the last checkpointed row.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import os
import random
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from notee.core import heartbeat, logs, metrics
from notee.core.errors import ProviderConfigError, ProviderUnavailable
from notee.core.logs import announce_emulator
from notee.core.settings import Settings
from notee.core.vocabulary import (
    NO,
    ORIGIN,
    OS,
    TOKEN,
    USER,
    PageCounts,
    Recipient,
    RecipientRow,
    Target,
    UserTarget,
    decode_target,
    device_of,
)
from notee.domain.render import choose_variant
from notee.providers.base import Message
from notee.store import job_queue as store
from notee.store import registry_sql
from notee.store.cql.recipients import PagingStateRejected, stream_recipients
from notee.store.job_queue import Claim, JobCancelled, JobGone, LeaseLost
from notee.store.outage import is_store_outage
from notee.store.registry_sql import UserClock, recipient_locales, user_clocks
from notee.store.runtime import Runtime
from notee.usecases.deliver import DeliverySender, PageAborted, Stopping
from notee.usecases.publish import in_part, placement, task_slots, task_unit
from notee.usecases.queue_levels import watch_queue

log = logging.getLogger(__name__)

READ_AHEAD = 2  # pages read ahead of the sender per lane (bounded queue)
IDLE_POLL_S = 0.5  # how often each lane of an idle worker asks for work (they take turns: _idle_wait)
FAIR_CHECK_S = 0.25  # how often a busy lane asks whether another tenant waits (once its slice is used)
OUTAGE_BACKOFF_BASE_S = 1.0  # first wait after an outage; doubles per consecutive outage up to the cap


class OutageBackoff:
    """Exponential backoff with a cap for outages, shared by a worker's lanes: consecutive failures
    (whichever lane saw them) double the wait; the first page sent after it resets it. Equal
    jitter (half fixed, half random) so released tasks do not all come back at once."""

    def __init__(
        self, *, base_s: float = OUTAGE_BACKOFF_BASE_S, cap_s: float = 30.0, rng: random.Random | None = None
    ) -> None:
        self.base_s, self.cap_s = base_s, cap_s
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        ceiling = min(self.cap_s, self.base_s * 2**self.failures)
        self.failures += 1
        return float(ceiling / 2 + self._rng.uniform(0, ceiling / 2))

    def reset(self) -> None:
        self.failures = 0


def is_outage(exc: BaseException) -> bool:
    """A passing condition (store or provider unreachable): release and retry, never count it."""
    return isinstance(exc, ProviderUnavailable) or is_store_outage(exc)


# (service, job_id, messages, dry_run) -> counts (``targeted == len(messages)``). Retries, pruning
# and dead-lettering happen inside; it raises ProviderConfigError (PageAborted: with the counts of
# what the page did before the error) when the service's credentials are missing or unusable: the
# whole job fails once. Production: ``notee.usecases.deliver.DeliverySender``.
SendPage = Callable[[str, str, Sequence[Message], bool], Awaitable[PageCounts]]
# What the reader hands the sender, or the error that stopped it: (slot, paging state after the
# page, key (no, device_token) of the last row read, the page's recipient locales or None when the
# job has no variants, the recipients of the page to send: all of it, or those of the task's part,
# and how many of the part's it drops: quiet hours)
_ReadItem = (
    tuple[
        int,
        bytes | None,
        tuple[int, str] | None,
        dict[tuple[str, str], str] | None,
        list[RecipientRow],
        int,
    ]
    | Exception
)
_NO_CLOCK: UserClock = (None, None)
_ORIGIN = operator.itemgetter(ORIGIN)  # the hot path's scan of a page, in C
_NO_ORIGIN = {None}


class MovedRowFilter:
    """Drops the second row of a device met twice at one ``no`` of a slot: a token rotation writes the
    device's new row at the old row's ``no`` (with ``origin`` = the device's first token) before it
    deletes the old one, so a page read in between, or two pages split between the two rows, may
    hold both (docs/SCHEMA.md, "Rotation during a publish"). Rows come in (no, device_token) order,
    so remembering the devices of the last ``no`` is enough; pages without a moved row, that do not
    continue the last ``no``, pass through untouched (the hot path: one scan of ``origin``)."""

    __slots__ = ("devices", "no")

    def __init__(self, after: tuple[int, str] | None = None) -> None:
        # Resuming after a checkpointed row: its device counts as sent (its origin is not stored).
        self.no: int | None = after[0] if after else None
        self.devices: set[str] = {after[1]} if after else set()

    def __call__(self, page: list[RecipientRow]) -> list[RecipientRow]:
        if not page:
            return page
        if page[0][NO] != self.no and set(map(_ORIGIN, page)) == _NO_ORIGIN:
            last, i = page[-1][NO], len(page) - 1
            while i and page[i - 1][NO] == last:  # the rows of the last `no`: usually just one
                i -= 1
            self.no, self.devices = last, {r[TOKEN] for r in page[i:]}
            return page
        kept = []
        for r in page:
            if r[NO] != self.no:
                self.no, self.devices = r[NO], set()
            device = device_of(r)
            if device in self.devices:
                continue
            self.devices.add(device)
            kept.append(r)
        return kept


class _Part:
    """The recipient filter of one part of a planned job (local time, quiet hours): a recipient
    belongs to the part its deciding minute falls in (``jobs.placement``, ``jobs.in_part``), and is
    sent or, held in quiet hours by a dropping template, counted dropped. Computed once per
    (zone, window) per task.

    In a job whose slot rows carry their zone (``groups`` in the target, ``jobs.zone_groups``) the
    task reads only the rows of one stored ``zone``; ``lookup`` False: every one of them has the
    service's window, so one verdict decides the whole zone and no page needs a MySQL query."""

    SKIP, SEND, DROP = 0, 1, 2

    def __init__(self, target: dict[str, Any], task_no: int) -> None:
        self.target = target
        self.part, self.zone, self.lookup = task_unit(target, task_no)  # zone None: every row, any zone
        self._seen: dict[UserClock, int] = {}

    def decide(self, user_clock: UserClock) -> int:
        hit = self._seen.get(user_clock)
        if hit is None:
            minute, send = placement(self.target, *user_clock)
            hit = (self.SEND if send else self.DROP) if in_part(self.target, self.part, minute) else self.SKIP
            self._seen[user_clock] = hit
        return hit


def messages_for(
    page: Sequence[RecipientRow], payload: dict[str, Any], locales: dict[tuple[str, str], str] | None = None
) -> list[Message]:
    """One page's messages (pure, no I/O): every recipient gets the job's rendered payload, or, when
    the template has locale variants, the variant its locale (``locales``: (user_id, device_token) ->
    tag) matches best; nothing is rendered here."""
    ttl, priority = payload.get("ttl_seconds"), payload.get("priority") or "high"
    default = (payload["title"], payload["body"], payload.get("data") or {})
    variants: dict[str, dict[str, Any]] = payload.get("variants") or {}
    if not variants or not locales:
        title, body, data = default
        return [Message(r[TOKEN], r[OS], title, body, data, ttl, priority) for r in page]
    by_locale: dict[str | None, tuple[str, str, dict[str, str]]] = {None: default}
    out = []
    for r in page:
        locale = locales.get((r[USER], r[TOKEN]))
        text = by_locale.get(locale)
        if text is None:
            tag = choose_variant(locale, variants)
            v = variants[tag] if tag is not None else None
            text = by_locale[locale] = default if v is None else (v["title"], v["body"], v.get("data") or {})
        out.append(Message(r[TOKEN], r[OS], text[0], text[1], text[2], ttl, priority))
    return out


class Worker:
    def __init__(
        self,
        runtime: Runtime,
        send_page: SendPage,
        *,
        lanes: int = 2,
        spare_lane: bool = False,
        worker_id: str | None = None,
        lease_s: float | None = None,
        fetch_size: int | None = None,
        services: Sequence[str] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.runtime = runtime
        self.send_page = send_page
        self.lanes = lanes
        self.spare_lane = spare_lane  # one more lane, for tenants no lane serves (docs/FANOUT.md, fairness)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_s = lease_s or runtime.settings.fanout_lease_s
        self.fetch_size = fetch_size or runtime.settings.fanout_fetch_size
        self.services = list(services) if services else None  # None: every tenant's jobs
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
                    store.claim,
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
                await self._sleep(delay)
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
                await self.run_task(claim, spare=spare)

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

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            pass

    # ------------------------------------------------------------------ one task
    async def run_task(self, claim: Claim, *, spare: bool = False) -> None:
        sessions = self.runtime.sessions
        name = f"{claim.job_id}/{claim.task_no}"
        lost = asyncio.Event()
        keeper = asyncio.create_task(self._keep_lease(claim, lost))
        started = fair_checked = time.monotonic()
        pages = sent = 0
        aborted = PageCounts()  # what the page a provider configuration error stopped did before it
        last_key = claim.resume_key  # (no, device_token) of the last row sent in the current slot
        key_slot = claim.current_slot
        try:
            job = await asyncio.to_thread(_read_job, sessions, claim.job_id)
            logs.service.set(job.service)
            target = decode_target(job.target_kind, job.target)
            queue: asyncio.Queue[_ReadItem] = asyncio.Queue(maxsize=READ_AHEAD)
            service = job.service if job.payload.get("variants") else None  # locales needed: one query a page
            local = None
            if job.target.get("parts"):  # a planned job: this task sends only its part's recipients
                local = _Part(job.target, claim.task_no)
            # The slots left to walk: every slot of the range, or the occupied ones (jobs.task_plan).
            walk = task_slots(job.target, claim.current_slot, claim.slot_to)
            after_slot = dict(itertools.pairwise(walk))  # where the checkpoint goes once a slot is done
            reader = asyncio.create_task(
                self._read(
                    claim, job.notification_key, target, queue, walk, locales_of=service, local=(job.service, local)
                )
            )
            try:
                while True:
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        raise item
                    slot, next_state, last_read, locales, to_send, dropped = item
                    if lost.is_set():
                        raise LeaseLost(f"lease of {name} lost")
                    if self.stop.is_set():  # read ahead, not sent: the next owner resumes at the checkpoint
                        await asyncio.to_thread(store.release, sessions, claim)
                        metrics.task_releases("stop").inc()
                        log.info("task %s released on stop after %d pages", name, pages)
                        return
                    counts = PageCounts()
                    if to_send:
                        try:
                            counts = await self.send_page(
                                job.service, job.job_id, messages_for(to_send, job.payload, locales), job.dry_run
                            )
                        except PageAborted as exc:
                            aborted = exc.counts
                            raise
                    if dropped:
                        counts = replace(counts, quiet_dropped=dropped)
                    pages += 1
                    sent += counts.sent
                    self.backoff.reset()
                    if slot != key_slot:
                        key_slot, last_key = slot, None
                    if last_read is not None:  # the last row read, sent or dropped as a moved duplicate
                        last_key = last_read
                    last = next_state is None and slot == claim.slot_to
                    if last:
                        await asyncio.to_thread(store.complete, sessions, claim, counts=counts)
                        self.tasks_done += 1
                        log.info(
                            "task %s done: %d pages, %d sent in %.1fs", name, pages, sent, time.monotonic() - started
                        )
                        return
                    resume_slot, resume_state, resume_key = (
                        (slot, next_state, last_key)
                        if next_state is not None
                        else (after_slot.get(slot, slot + 1), None, None)
                    )
                    await asyncio.to_thread(
                        store.checkpoint,
                        sessions,
                        claim,
                        current_slot=resume_slot,
                        paging_state=resume_state,
                        counts=counts,
                        lease_s=self.lease_s,
                        resume_key=resume_key,
                    )
                    if self.stop.is_set():
                        await asyncio.to_thread(store.release, sessions, claim)
                        metrics.task_releases("stop").inc()
                        log.info("task %s released on stop at slot %d after %d pages", name, resume_slot, pages)
                        return
                    now = time.monotonic()
                    if now - started >= self.fair_slice_s and now - fair_checked >= FAIR_CHECK_S:
                        fair_checked = now
                        if await asyncio.to_thread(self._give_lane_back, job.service, spare):
                            # At the checkpoint just written: what was read ahead is dropped, the
                            # next owner resumes here; a graceful release, not an attempt.
                            await asyncio.to_thread(store.release, sessions, claim)
                            self.releases["yield"] += 1
                            metrics.task_releases("yield").inc()
                            log.info(
                                "task %s yielded its lane at slot %d after %d pages: %s",
                                name,
                                resume_slot,
                                pages,
                                "its tenant is served by another lane" if spare else "another tenant waits",
                            )
                            return
            finally:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
        except JobCancelled:
            log.info("task %s stopped: its job was cancelled", name)
        except LeaseLost as exc:
            log.warning("task %s: %s; another worker owns it now", name, exc)
        except JobGone as exc:  # nothing left to send: its tasks went with the job row
            log.warning("task %s: %s", name, exc)
        except Stopping:
            # The page was waiting to retry: give the task back at its last checkpoint (nothing of
            # this page was recorded, so the next owner re-sends it whole).
            try:
                await asyncio.to_thread(store.release, sessions, claim)
                metrics.task_releases("stop").inc()
                log.info("task %s released on stop while a page waited to retry; checkpoint unchanged", name)
            except LeaseLost:
                pass
        except ProviderConfigError as exc:
            # Every page of the job would meet the same error: the whole job fails once, here.
            log.error("job %s failed: provider configuration: %s", claim.job_id, exc.message)
            await self._fail_job(claim, f"provider configuration: {exc.message}", aborted)
        except PagingStateRejected as exc:
            # Not an outage and not poison: resume the slot after the checkpointed key from now on.
            log.warning(
                "task %s: Cassandra rejected the paging state (%s); resuming slot %d after key %s",
                name,
                exc,
                claim.current_slot,
                "(start)" if claim.resume_key is None else claim.resume_key[0],
            )
            self.releases["paging_state"] += 1
            metrics.task_releases("paging_state").inc()
            try:
                await asyncio.to_thread(store.forget_paging_state, sessions, claim)
            except Exception as forget_exc:  # the next claim meets the same state and comes back here
                log.warning("task %s: could not drop the paging state (%s)", name, type(forget_exc).__name__)
            await self._release(claim, delay_s=0.0, error="paging state rejected; resuming from the checkpointed key")
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            delay = self.backoff.next_delay()
            if is_outage(exc):
                if isinstance(exc, ProviderUnavailable):
                    delay = max(delay, exc.retry_in)
                log.warning(
                    "task %s: outage (%s); released without advancing, retry in %.1f s", name, error[:200], delay
                )
                self.releases["outage"] += 1
                metrics.task_releases("outage").inc()
                await self._release(claim, delay_s=delay, error=error)
            else:
                log.exception(
                    "task %s: unexpected error; released, counted as an attempt, retry in %.1f s", name, delay
                )
                self.releases["error"] += 1
                metrics.task_releases("error").inc()
                await self._release(claim, delay_s=delay, error=error, counts_as_attempt=True)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)

    def _give_lane_back(self, service: str, spare: bool) -> bool:
        """At a checkpoint: should this lane release its task of ``service``? A regular lane when
        another tenant waits with fewer live leases; the spare lane as soon as the tenant holds a
        lease besides this one (the regular lanes serve it; the spare lane stays free for the next)."""
        if spare:
            return store.live_leases(self.runtime.sessions, service) > 1
        # With a spare lane, a waiting tenant gets two idle polls to be claimed by it before the
        # busy lanes give up their pages for it (no churn for every small publish).
        waited = 2 * IDLE_POLL_S if self.spare_lane else 0.0
        return store.tenant_waiting(self.runtime.sessions, service, self.services, waited_s=waited)

    async def _release(self, claim: Claim, *, delay_s: float, error: str, counts_as_attempt: bool = False) -> None:
        """Give the task back. While MySQL itself is down, keep trying (with the outage backoff) so
        the release lands and does not count as a crash; give up on stop (the lease expires)."""
        name = f"{claim.job_id}/{claim.task_no}"
        while True:
            try:
                await asyncio.to_thread(
                    store.release,
                    self.runtime.sessions,
                    claim,
                    delay_s=delay_s,
                    error=error,
                    counts_as_attempt=counts_as_attempt,
                )
                return
            except LeaseLost:
                return
            except Exception as exc:
                if self.stop.is_set() or not is_store_outage(exc):
                    log.warning("task %s: release failed (%s); its lease will expire", name, type(exc).__name__)
                    return
                wait = self.backoff.next_delay()
                log.warning("task %s: release failed (%s); retrying in %.1f s", name, type(exc).__name__, wait)
                await self._sleep(wait)

    async def _fail_job(self, claim: Claim, error: str, counts: PageCounts) -> None:
        try:
            await asyncio.to_thread(store.fail_job, self.runtime.sessions, claim, error=error, counts=counts)
        except LeaseLost:  # another worker owns the task now; it meets the same error and fails the job
            pass

    async def _read(
        self,
        claim: Claim,
        key: str,
        target: Target,
        queue: asyncio.Queue[_ReadItem],
        walk: Sequence[int] = (),
        *,
        locales_of: str | None = None,
        local: tuple[str, _Part | None] = ("", None),
    ) -> None:
        """Producer: page the task's slots ``walk`` (from its checkpoint's on) into the bounded queue; with
        ``locales_of`` (the job's service, when its template has locale variants) each page comes
        with its recipients' locales, read in one MySQL query; with a ``local`` part (a planned
        job: local time, quiet hours) only the page's recipients of that part are to be sent (their
        zones and windows: one query). Small pages of consecutive finished slots are handed over
        together (``hand_over``)."""
        if isinstance(target, UserTarget):  # a scheduled single send: the user's devices as they are now
            try:
                page = await asyncio.to_thread(_user_devices, self.runtime.sessions, claim.job_id, target)
                locales = None
                if locales_of is not None and page:
                    locales = await asyncio.to_thread(self._locales, locales_of, page)
                last = (page[-1][NO], page[-1][TOKEN]) if page else None
                await queue.put((claim.slot_from, None, last, locales, page, 0))
            except Exception as exc:
                await queue.put(exc)
            return
        statements = await asyncio.to_thread(lambda: self.runtime.statements)
        # Pages of finished slots that together hold less than a page are handed over as one (a
        # sparse target: a few rows in each of many slots is one send and one checkpoint, not one
        # per slot); never more rows than a page, so a resend after a crash stays within one page.
        held_send: list[RecipientRow] = []  # the held pages' recipients to send
        held_rows = held_dropped = 0  # the held pages' rows read, and dropped (quiet hours)
        # The last held page's (slot, paging state after it, key of its last row): the checkpoint's.
        held_end: tuple[int, bytes | None, tuple[int, str] | None] | None = None

        async def hand_over() -> None:
            nonlocal held_send, held_rows, held_dropped, held_end
            if held_end is None:
                return
            (slot, next_state, last_read), to_send, dropped = held_end, held_send, held_dropped
            held_send, held_rows, held_dropped, held_end = [], 0, 0, None
            locales = None
            if locales_of is not None and to_send:
                locales = await asyncio.to_thread(self._locales, locales_of, to_send)
            await queue.put((slot, next_state, last_read, locales, to_send, dropped))

        try:
            for slot in walk:
                first = slot == claim.current_slot
                state = claim.paging_state if first else None
                after = claim.resume_key if first and state is None else None
                moved = MovedRowFilter(claim.resume_key if first else None)
                zone = local[1].zone if local[1] is not None else None
                pages = stream_recipients(statements, key, target, slot, self.fetch_size, state, after=after, zone=zone)
                while True:
                    item = await asyncio.to_thread(next, pages, None)
                    if item is None:
                        break
                    page, next_state = item
                    last_read = (page[-1][NO], page[-1][TOKEN]) if page else None
                    page = moved(page)
                    to_send, dropped = page, 0
                    if local[1] is not None and page and not local[1].lookup:
                        to_send, dropped = self._of_part(local[0], local[1], page)  # no I/O
                    elif local[1] is not None and page:
                        to_send, dropped = await asyncio.to_thread(self._of_part, local[0], local[1], page)
                    if held_rows + len(page) > self.fetch_size:
                        await hand_over()
                    held_send = held_send + to_send if held_send else to_send
                    held_rows += len(page)
                    held_dropped += dropped
                    held_end = (slot, next_state, last_read)
                    if next_state is not None:  # the slot goes on: its checkpoint needs this page's state
                        await hand_over()
            await hand_over()
        except Exception as exc:  # handed to the consumer, which releases the task
            await queue.put(exc)

    def _of_part(self, service: str, local: _Part, page: list[RecipientRow]) -> tuple[list[RecipientRow], int]:
        """The page's recipients this part sends, and how many it drops (quiet hours)."""
        if not local.lookup:  # one zone, the service's window: the same verdict for every row
            verdict = local.decide((local.zone or None, None))
            return (page, 0) if verdict == _Part.SEND else ([], len(page) if verdict == _Part.DROP else 0)
        with self.runtime.sessions() as session:
            clocks = user_clocks(session, service, {r[USER] for r in page})
        send, dropped = [], 0
        for r in page:
            verdict = local.decide(clocks.get(r[USER], _NO_CLOCK))
            if verdict == _Part.SEND:
                send.append(r)
            elif verdict == _Part.DROP:
                dropped += 1
        return send, dropped

    def _locales(self, service: str, page: Sequence[RecipientRow]) -> dict[tuple[str, str], str]:
        with self.runtime.sessions() as session:
            return recipient_locales(session, service, {r[USER] for r in page})

    async def _keep_lease(self, claim: Claim, lost: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await asyncio.to_thread(store.extend_lease, self.runtime.sessions, claim, lease_s=self.lease_s)
            except LeaseLost:
                lost.set()
                return
            except Exception as exc:  # transient: the next try or the next checkpoint renews it
                log.warning("lease renewal of %s/%s failed: %s", claim.job_id, claim.task_no, type(exc).__name__)


def _user_devices(sessions: sessionmaker[Session], job_id: str, target: UserTarget) -> list[RecipientRow]:
    """Every device of a scheduled single send's user, read when it is sent (one MySQL query per job:
    a user has a handful of devices). A user deleted since has none: the job targets 0."""
    with sessions() as session:
        job = store.get_job(session, job_id)
        if job is None:
            raise JobGone(f"job {job_id} is gone (pruned?)")
        rows = registry_sql.list_devices(session, job.service, target.user_id)
    return [Recipient(r.device_token, r.device_os, target.user_id) for r in rows]


def _read_job(sessions: sessionmaker[Session], job_id: str) -> store.JobRow:
    with sessions() as session:
        job = store.get_job(session, job_id)
    if job is None:
        raise JobGone(f"job {job_id} is gone (pruned?)")
    return job


async def _heartbeat(worker: Worker, path: str | None) -> None:
    """Beat while the event loop turns (a blocked loop stops the beats; notee healthcheck worker)."""
    while not worker.stop.is_set():
        heartbeat.beat(path)
        await worker._sleep(heartbeat.WORKER_INTERVAL_S)


async def _main(runtime: Runtime, lanes: int, services: Sequence[str] | None) -> None:
    announce_emulator(runtime.settings, "worker")
    exporter = metrics.serve(runtime.settings.worker_metrics_port, runtime.settings.metrics_host, "worker")
    watch_queue(runtime)  # the job queue's levels on every scrape
    stop = asyncio.Event()
    sender = DeliverySender(runtime, stop)
    worker = Worker(
        runtime, sender, lanes=lanes, spare_lane=runtime.settings.fanout_spare_lane, services=services, stop=stop
    )
    grace = runtime.settings.fanout_stop_grace_s
    loop = asyncio.get_running_loop()
    running = asyncio.ensure_future(worker.run())

    def abandon() -> None:
        if not running.done():
            log.warning(
                "worker %s: lanes still busy %.0f s after the stop signal; abandoning them (their "
                "leases expire and another worker resumes from the last checkpoint)",
                worker.worker_id,
                grace,
            )
            running.cancel()

    def on_signal() -> None:
        if not stop.is_set():
            stop.set()
            loop.call_later(grace, abandon)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    beats = asyncio.create_task(_heartbeat(worker, runtime.settings.heartbeat_file))
    try:
        await running
    except asyncio.CancelledError:
        if not stop.is_set():
            raise
    finally:
        worker.stop.set()
        await beats
        await sender.close()
        if exporter is not None:
            exporter.close()


def run(settings: Settings, *, lanes: int = 2, services: Sequence[str] | None = None) -> None:
    """Entry point of ``notee worker``: runs until SIGTERM/SIGINT, then stops gracefully."""
    runtime = Runtime(settings)
    try:
        asyncio.run(_main(runtime, lanes, services))
    finally:
        runtime.close()
