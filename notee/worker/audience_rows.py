"""What a task reads besides a topic's or cycle bucket's rows (docs/AUDIENCES.md "Design"):

* a condition job's row filter (``ConditionRows``): a row of the walked topic is kept when the
  condition holds for its device's memberships and the device is in no earlier walked topic, so
  every device is sent once; the memberships of the condition's other topics are read once per job
  and worker process into sets (``MEMBERS``), kept while a task of the job runs here;
* a platforms filter for Cassandra rows (``keep_platforms``);
* an audience job's pages from MySQL (``audience_page``), and its checkpoint: the last
  (user_id, device_token) read, as the task's paging state bytes (``encode_key``/``decode_key``).

A device is keyed by its token (and a rotated row also by its first token, ``origin``), not by
(user_id, device_token): a push reaches a token, and a token several users share is one device, so
"in topic b" means "this token gets b's pushes", whichever of its users subscribed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from notee.core.audience import audience_from_json
from notee.core.vocabulary import ORIGIN, OS, TOKEN, USER, AudienceTarget, RecipientRow, TopicTarget
from notee.domain.conditions import parse_condition
from notee.store import audience_sql, audience_users_sql, jobs_sql
from notee.store.audience_sql import AudienceQuery
from notee.store.cql.recipients import stream_recipients
from notee.store.cql.statements import Statements
from notee.usecases.planning import task_plan, walk_of

RowFilter = Callable[[list[RecipientRow]], list[RecipientRow]]
MEMBER_PAGE = 5000  # rows per page when a topic's members are loaded
MEMBER_READERS = 4  # slots of a topic read at once when its members are loaded


class ConditionTooLarge(RuntimeError):
    """A topic whose members a condition job loads has more than NOTEE_CONDITION_MEMBERS_MAX of them
    (its counter was under the cap at publish): the job fails, saying so."""


def load_members(statements: Statements, job: jobs_sql.JobRow, topic: str, members_max: int) -> frozenset[str]:
    """The tokens (and first tokens of rotated rows) subscribed to ``topic`` with the job's template:
    every occupied slot of it read in pages of ``MEMBER_PAGE``, up to ``MEMBER_READERS`` slots at
    once (a condition's first page waits for this). ConditionTooLarge past ``members_max``."""
    target = TopicTarget(topic)
    ranges, slots = task_plan(statements, job.service, job.method, job.type_, job.notification_key, target)
    walk = slots if slots is not None else list(range(ranges[0][0], ranges[-1][1] + 1))
    members: set[str] = set()
    lock = threading.Lock()

    def read(slot: int) -> None:
        for page, _ in stream_recipients(statements, job.notification_key, target, slot, MEMBER_PAGE):
            found = {r[TOKEN] for r in page} | {r[ORIGIN] for r in page if r[ORIGIN]}
            with lock:
                members.update(found)
                if len(members) > 2 * members_max:  # two keys per rotated row at most
                    raise ConditionTooLarge(f"topic {topic!r} has more than {members_max} members")

    with ThreadPoolExecutor(max_workers=min(MEMBER_READERS, len(walk)) or 1) as pool:
        for done in [pool.submit(read, slot) for slot in walk]:
            done.result()
    return frozenset(members)


@dataclass
class _Entry:
    sets: dict[str, frozenset[str]] = field(default_factory=dict)
    users: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemberCache:
    """The loaded memberships of condition jobs in this process: one entry per job with a task
    running here (``acquire``/``release``). An idle entry (no task of its job runs here) is kept
    until another job is acquired (the job's next task here reuses it), then dropped: memory holds
    the sets of the jobs running here, and at most the last one besides."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, _Entry] = {}

    def acquire(
        self, job_id: str, topics: Iterable[str], load: Callable[[str], frozenset[str]]
    ) -> dict[str, frozenset[str]]:
        """The sets of ``topics`` for the job, loaded by ``load`` once per job (a second task of the
        job waits for the first's load instead of loading again)."""
        with self._lock:
            for other in [j for j, e in self._jobs.items() if e.users == 0 and j != job_id]:
                del self._jobs[other]
            entry = self._jobs.setdefault(job_id, _Entry())
            entry.users += 1
        try:
            with entry.lock:
                for topic in topics:
                    if topic not in entry.sets:
                        entry.sets[topic] = load(topic)
                return dict(entry.sets)
        except BaseException:
            self.release(job_id)
            raise

    def release(self, job_id: str) -> None:
        with self._lock:
            entry = self._jobs.get(job_id)
            if entry is not None:
                entry.users = max(0, entry.users - 1)

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._jobs)


MEMBERS = MemberCache()


def condition_topics(target: dict[str, Any], task_no: int) -> tuple[str, list[str]]:
    """(the topic a condition job's task walks, the topics whose members it needs: the others)."""
    _, walk = walk_of(target, task_no)
    return str(walk["topic"]), [t for t in target["topics"] if t != walk["topic"]]


class ConditionRows:
    """The row filter of one task of a condition job: keeps a row when the condition holds for its
    device and the device is in no topic walked before this task's (precomputed: the verdict of
    each combination of the other topics' memberships, so a row costs a few set lookups)."""

    __slots__ = ("allowed", "platforms", "sets")

    def __init__(
        self, target: dict[str, Any], task_no: int, members: dict[str, frozenset[str]], platforms: Iterable[str] = ()
    ) -> None:
        condition = parse_condition(target["condition"])
        index, walk = walk_of(target, task_no)
        walked = str(walk["topic"])
        earlier = {str(w["topic"]) for w in target["walks"][:index]}
        others = [t for t in condition.topics if t != walked]
        self.sets = [members[t] for t in others]
        self.platforms = frozenset(platforms)
        self.allowed = set()
        for mask in range(1 << len(others)):
            member = {walked} | {t for j, t in enumerate(others) if mask >> j & 1}
            if condition.holds(member) and not member & earlier:
                self.allowed.add(mask)

    def __call__(self, page: list[RecipientRow]) -> list[RecipientRow]:
        kept = []
        sets, allowed, platforms = self.sets, self.allowed, self.platforms
        for r in page:
            if platforms and r[OS] not in platforms:
                continue
            token, origin = r[TOKEN], r[ORIGIN]
            mask = 0
            for j, s in enumerate(sets):
                if token in s or (origin is not None and origin in s):
                    mask |= 1 << j
            if mask in allowed:
                kept.append(r)
        return kept


def keep_platforms(platforms: Iterable[str]) -> RowFilter:
    """The rows of devices of ``platforms`` only (a topic publish narrowed by platforms)."""
    wanted = frozenset(platforms)
    return lambda page: [r for r in page if r[OS] in wanted]


# ----------------------------------------------------------------------------- audience walks


def encode_key(key: tuple[str, str]) -> bytes:
    """An audience task's checkpoint: the last (user_id, device_token) read (both ASCII, no NUL)."""
    return f"{key[0]}\x00{key[1]}".encode("ascii")


def decode_key(state: bytes | None) -> tuple[str, str] | None:
    if not state:
        return None
    user_id, _, token = state.decode("ascii").partition("\x00")
    return user_id, token


@dataclass(frozen=True, slots=True)
class AudiencePage:
    """Where one page of an audience task is read: the slot, the key after which it starts, how many
    rows at most, and ``now`` (naive UTC, the database clock when the task started: elapsed-time
    predicates compare with it)."""

    slot: int
    after: tuple[str, str] | None
    limit: int
    now: datetime


@dataclass(frozen=True, slots=True)
class AudienceRead:
    """One page of an audience task: its rows to send, the key of the last device read (None: the
    slot holds no more; the slot goes on when the page was full, whatever was left out of it), and
    the tokens of its rows another user of the service holds too (a filter's: those rows go through
    ``one_per_device``; a user list's page has each device once already)."""

    rows: list[RecipientRow]
    last: tuple[str, str] | None
    shared: frozenset[str]


def audience_page(session: Session, job: jobs_sql.JobRow, target: AudienceTarget, at: AudiencePage) -> AudienceRead:
    """One page of an audience job's devices (``AudienceRead``)."""
    if "users" in target.spec:
        rows = audience_users_sql.user_list_page(
            session, job.service, job.job_id, at.slot, at.after, at.limit, target.platforms
        )
        shared: frozenset[str] = frozenset()
    else:
        marked = audience_sql.marked_page(session, job.service, _query(target, at.now), at.slot, at.after, at.limit)
        rows = [(user_id, token, os_) for user_id, token, os_, _ in marked]
        shared = frozenset(token for _, token, _, held_twice in marked if held_twice)
    last = (rows[-1][0], rows[-1][1]) if len(rows) >= at.limit else None
    return AudienceRead([(token, os_, user_id, 0, None) for user_id, token, os_ in rows], last, shared)


def _query(target: AudienceTarget, now: datetime) -> AudienceQuery:
    return AudienceQuery(audience_from_json(target.spec["audience"]), target.platforms or None, now)


@dataclass(frozen=True, slots=True)
class Once:
    """What ``one_per_device`` needs of a filter's task: the target, ``now`` of its pages and the
    tokens its pages marked as held by several users (kept for the task: a later row of such a
    token was marked too)."""

    target: AudienceTarget
    now: datetime
    shared: set[str] = field(default_factory=set)


def one_per_device(session: Session, job: jobs_sql.JobRow, once: Once, rows: list[RecipientRow]) -> list[RecipientRow]:
    """The rows of a filter's pages (handed over together) without those of a token several matching
    users hold, except the lowest user's: each device is sent once. The pages marked the shared
    tokens as they were read (``AudienceRead.shared``), so nearly every page needs no query here;
    the audience's holders are read only for the shared tokens among ``rows``."""
    shared = sorted({r[TOKEN] for r in rows} & once.shared) if once.shared else []
    if not shared:
        return rows
    first = audience_users_sql.first_holders(session, job.service, _query(once.target, once.now), shared)
    return [r for r in rows if first.get(r[TOKEN], r[USER]) == r[USER]]
