"""The reader of one claimed task (``PageReader``): its recipients paged out of Cassandra into a bounded
queue, ahead of the sender (a page becomes messages in notee/worker/messages.py).

* The reader pages one slot at a time with ``fetch_size`` rows; the queue holds at most
  ``READ_AHEAD`` pages, so memory is bounded by (lanes x (READ_AHEAD + 1)) pages, whatever the
  topic's size.
* Pages of consecutive finished slots that together hold less than a page are handed over as one
  (a sparse target: one send and one checkpoint, not one per slot).
* ``MovedRowFilter`` drops a device's second row at one ``no`` (a token rotation during the
  publish); ``_Part`` keeps a planned job's task to its part's recipients (local time, quiet hours).
* Per device: no MySQL and no Cassandra query. Per page: one Cassandra page read, and one MySQL
  query for the recipients' locales (a template with locale variants), or profiles (a template
  rendered per recipient: ``notee/domain/personal.py``), or clocks (a part that needs them).
"""

from __future__ import annotations

import asyncio
import functools
import operator
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from notee.core.vocabulary import (
    NO,
    ORIGIN,
    TOKEN,
    USER,
    AudienceTarget,
    ConditionTarget,
    CycleTarget,
    Recipient,
    RecipientRow,
    TopicTarget,
    UserTarget,
    decode_target,
    device_of,
)
from notee.store import jobs_sql, users_sql
from notee.store.cql.recipients import stream_recipients
from notee.store.cql.statements import Statements
from notee.store.mysql import db_now
from notee.store.recipient_sql import recipient_profiles, recipient_tags
from notee.store.runtime import Runtime
from notee.store.task_leases import Claim, JobGone
from notee.store.users_sql import UserClock, recipient_locales, user_clocks
from notee.usecases.planning import in_part, placement, task_slots, task_unit
from notee.worker.audience_rows import (
    MEMBERS,
    AudiencePage,
    AudienceRead,
    ConditionRows,
    Once,
    RowFilter,
    audience_page,
    condition_topics,
    decode_key,
    encode_key,
    keep_platforms,
    load_members,
    one_per_device,
)

READ_AHEAD = 2  # pages read ahead of the sender per lane (bounded queue)

# What the reader hands the sender, or the error that stopped it: (slot, paging state after the
# page, key (no, device_token) of the last row read, the page's recipient locales (or profiles: a
# template rendered per recipient) or None when the job needs neither, the recipients of the page to send: all of it, or those of the task's part,
# and how many of the part's it drops: quiet hours)
ReadItem = (
    tuple[
        int,
        bytes | None,
        tuple[int, str] | None,
        dict[tuple[str, str], Any] | None,
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


class PageReader:
    """The producer of one claimed task: pages its slots (from its checkpoint's on) into ``queue``
    (at most READ_AHEAD pages ahead of the sender). When the job's template has locale variants
    each page comes with its recipients' locales, read in one MySQL query; in a planned job (local
    time, quiet hours) only the page's recipients of the task's part are to be sent (their zones and
    windows: one query, or none when the task reads one stored zone)."""

    __slots__ = (
        "claim",
        "fetch_size",
        "held_dropped",
        "held_end",
        "held_rows",
        "held_send",
        "job",
        "keep",
        "key",
        "locales_of",
        "once",
        "part",
        "personal",
        "queue",
        "runtime",
        "service",
        "tags",
        "target",
        "walk",
    )

    def __init__(self, runtime: Runtime, fetch_size: int, claim: Claim, job: jobs_sql.JobRow) -> None:
        self.runtime, self.fetch_size, self.claim = runtime, fetch_size, claim
        self.key, self.service, self.job = job.notification_key, job.service, job
        self.target = decode_target(job.target_kind, job.target)
        # Rows of a Cassandra walk to leave out: a condition's (set by run) or other platforms'.
        platforms = getattr(self.target, "platforms", ())
        self.keep: RowFilter | None = keep_platforms(platforms) if platforms else None
        # What a filter's held pages go through before they are sent (each device once; blocking).
        self.once: RowFilter | None = None
        self.queue: asyncio.Queue[ReadItem] = asyncio.Queue(maxsize=READ_AHEAD)
        # The job's service when its template has locale variants (their locales: one query a page)
        # or is rendered per recipient (their profiles: one query a page).
        self.personal = "personal" in job.payload
        self.tags = self.personal and "tags" in job.payload["personal"].get("fields", ())
        self.locales_of = job.service if job.payload.get("variants") or self.personal else None
        # A planned job: this task sends only its part's recipients.
        self.part = _Part(job.target, claim.task_no) if job.target.get("parts") else None
        # The slots left to walk: every slot of the range, or the occupied ones (jobs.task_plan).
        self.walk = task_slots(job.target, claim.current_slot, claim.slot_to, claim.task_no)
        # Pages of finished slots that together hold less than a page are handed over as one (a
        # sparse target: a few rows in each of many slots is one send and one checkpoint, not one
        # per slot); never more rows than a page, so a resend after a crash stays within one page.
        self.held_send: list[RecipientRow] = []  # the held pages' recipients to send
        self.held_rows = self.held_dropped = 0  # the held pages' rows read, and dropped (quiet hours)
        # The last held page's (slot, paging state after it, key of its last row): the checkpoint's.
        self.held_end: tuple[int, bytes | None, tuple[int, str] | None] | None = None

    async def run(self) -> None:
        """Page every slot of ``walk`` into the queue, then the pages still held; an error is handed
        to the consumer (which releases the task) in place of a page."""
        if isinstance(self.target, UserTarget):  # a scheduled single send: the user's devices as they are now
            await self._read_user(self.target)
            return
        acquired = False
        try:  # preparing the statements is the process's first Cassandra call: it may meet an outage too
            if isinstance(self.target, AudienceTarget):
                await self._read_audience(self.target)
                return
            statements = await asyncio.to_thread(lambda: self.runtime.statements)
            topic: TopicTarget | CycleTarget
            if isinstance(self.target, ConditionTarget):
                walked, others = condition_topics(self.job.target, self.claim.task_no)
                members = await asyncio.to_thread(self._members, statements, others)
                acquired = True  # (a failed acquire has released itself)
                self.keep = ConditionRows(self.job.target, self.claim.task_no, members, self.target.platforms)
                topic = TopicTarget(walked)
            else:
                topic = self.target
            for slot in self.walk:
                await self._read_slot(statements, topic, slot)
            await self._hand_over()
        except Exception as exc:  # handed to the consumer, which releases the task
            await self.queue.put(exc)
        finally:
            if acquired:
                MEMBERS.release(self.job.job_id)

    def _members(self, statements: Statements, topics: list[str]) -> dict[str, frozenset[str]]:
        """The condition's other topics' members (``MEMBERS``: loaded once per job in this process)."""
        cap = self.runtime.settings.condition_members_max
        return MEMBERS.acquire(self.job.job_id, topics, lambda t: load_members(statements, self.job, t, cap))

    async def _read_audience(self, target: AudienceTarget) -> None:
        """An audience job's slots from MySQL, page by page after the checkpoint's (user_id,
        device_token) (the task's paging state); each page's paging state is its last key while the
        slot goes on, so a crash resends at most one page."""
        claim = self.claim
        now = await asyncio.to_thread(self._db_now)
        once = Once(target, now)
        if "users" not in target.spec:
            self.once = functools.partial(self._one_per_device, once)
        for slot in self.walk:
            after = decode_key(claim.paging_state) if slot == claim.current_slot else None
            while True:
                at = AudiencePage(slot, after, self.fetch_size, now)
                read = await asyncio.to_thread(self._audience_page, target, at)
                once.shared.update(read.shared)  # before _take: it may hand the page over
                after = read.last
                await self._take(slot, read.rows, encode_key(after) if after else None, None)
                if after is None:  # a short page: the slot is done
                    break
        await self._hand_over()

    def _one_per_device(self, once: Once, rows: list[RecipientRow]) -> list[RecipientRow]:
        if not once.shared:  # no row read so far is of a token held twice: nothing to ask
            return rows
        with self.runtime.sessions() as session:
            return one_per_device(session, self.job, once, rows)

    def _db_now(self) -> datetime:
        with self.runtime.sessions() as session:
            return db_now(session)

    def _audience_page(self, target: AudienceTarget, at: AudiencePage) -> AudienceRead:
        with self.runtime.sessions() as session:
            return audience_page(session, self.job, target, at)

    async def _read_user(self, target: UserTarget) -> None:
        try:
            page = await asyncio.to_thread(_user_devices, self.runtime.sessions, self.claim.job_id, target)
            locales = None
            if self.locales_of is not None and page:
                locales = await asyncio.to_thread(self._locales, self.locales_of, page)
            last = (page[-1][NO], page[-1][TOKEN]) if page else None
            await self.queue.put((self.claim.slot_from, None, last, locales, page, 0))
        except Exception as exc:
            await self.queue.put(exc)

    async def _read_slot(self, statements: Statements, target: TopicTarget | CycleTarget, slot: int) -> None:
        """One slot's pages, from the checkpoint's paging state or key when it is the task's current
        slot; each page held, and handed over once the slot goes on or the held rows fill a page."""
        claim, part = self.claim, self.part
        first = slot == claim.current_slot
        state = claim.paging_state if first else None
        after = claim.resume_key if first and state is None else None
        moved = MovedRowFilter(claim.resume_key if first else None)
        zone = part.zone if part is not None else None
        pages = stream_recipients(statements, self.key, target, slot, self.fetch_size, state, after=after, zone=zone)
        while True:
            item = await asyncio.to_thread(next, pages, None)
            if item is None:
                return
            page, next_state = item
            last_read = (page[-1][NO], page[-1][TOKEN]) if page else None
            page = moved(page)
            if self.keep is not None:
                page = self.keep(page)
            await self._take(slot, page, next_state, last_read)

    async def _take(
        self, slot: int, page: list[RecipientRow], next_state: bytes | None, last_read: tuple[int, str] | None
    ) -> None:
        """Hold one page read (its part's recipients of it, in a planned job); hand the held pages
        over once the slot goes on or they would fill more than a page."""
        part = self.part
        to_send, dropped = page, 0
        if part is not None and page and not part.lookup:
            to_send, dropped = self._of_part(part, page)  # no I/O
        elif part is not None and page:
            to_send, dropped = await asyncio.to_thread(self._of_part, part, page)
        if self.held_rows + len(page) > self.fetch_size:
            await self._hand_over()
        self.held_send = self.held_send + to_send if self.held_send else to_send
        self.held_rows += len(page)
        self.held_dropped += dropped
        self.held_end = (slot, next_state, last_read)
        if next_state is not None:  # the slot goes on: its checkpoint needs this page's state
            await self._hand_over()

    async def _hand_over(self) -> None:
        """Queue the held pages as one (with their recipients' locales when the job needs them)."""
        if self.held_end is None:
            return
        (slot, next_state, last_read), to_send, dropped = self.held_end, self.held_send, self.held_dropped
        self.held_send, self.held_rows, self.held_dropped, self.held_end = [], 0, 0, None
        if self.once is not None and to_send:
            to_send = await asyncio.to_thread(self.once, to_send)
        locales = None
        if self.locales_of is not None and to_send:
            locales = await asyncio.to_thread(self._locales, self.locales_of, to_send)
        await self.queue.put((slot, next_state, last_read, locales, to_send, dropped))

    def _of_part(self, local: _Part, page: list[RecipientRow]) -> tuple[list[RecipientRow], int]:
        """The page's recipients this part sends, and how many it drops (quiet hours)."""
        if not local.lookup:  # one zone, the service's window: the same verdict for every row
            verdict = local.decide((local.zone or None, None))
            return (page, 0) if verdict == _Part.SEND else ([], len(page) if verdict == _Part.DROP else 0)
        with self.runtime.sessions() as session:
            clocks = user_clocks(session, self.service, {r[USER] for r in page})
        send, dropped = [], 0
        for r in page:
            verdict = local.decide(clocks.get(r[USER], _NO_CLOCK))
            if verdict == _Part.SEND:
                send.append(r)
            elif verdict == _Part.DROP:
                dropped += 1
        return send, dropped

    def _locales(self, service: str, page: Sequence[RecipientRow]) -> dict[tuple[str, str], Any]:
        with self.runtime.sessions() as session:
            if self.personal:
                users = {r[USER] for r in page}
                profiles = recipient_profiles(session, service, users)
                if not self.tags:
                    return {k: (*v, None) for k, v in profiles.items()}
                tags = recipient_tags(session, service, users)  # the template reads recipient.tags
                return {k: (*v, tags.get(k[0], {})) for k, v in profiles.items()}
            return recipient_locales(session, service, {r[USER] for r in page})


def _user_devices(sessions: sessionmaker[Session], job_id: str, target: UserTarget) -> list[RecipientRow]:
    """Every device of a scheduled single send's user, read when it is sent (one MySQL query per job:
    a user has a handful of devices). A user deleted since has none: the job targets 0."""
    with sessions() as session:
        job = jobs_sql.get_job(session, job_id)
        if job is None:
            raise JobGone(f"job {job_id} is gone (pruned?)")
        rows = users_sql.list_devices(session, job.service, target.user_id)
    return [Recipient(r.device_token, r.device_os, target.user_id) for r in rows]
