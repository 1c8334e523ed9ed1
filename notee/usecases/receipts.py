"""Receipts from the apps (``POST /v1/receipts``, docs/ENGAGEMENT.md): each event names the
notification id its push carried (``notee.core.notification_id``) and says what happened to it
(``delivered``, ``opened``, ``clicked`` with an optional action, ``dismissed``).

Each event is checked on its own: an id that is malformed, unknown, of another service or of a job
gone from MySQL is ``not_found`` (one reason for all of them: nothing says whether another service
has it); an event stamped before the retention window (or for a notification older than it) is
``too_old``; one stamped more than ``receipts_future_s`` ahead is ``in_future``. The rest are stored
(Cassandra, idempotent per (notification id, event)) and counted once: a retried batch answers the
same events as ``duplicate``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from notee.core import metrics, notification_id
from notee.core.clock import aware_utc, naive_utc, now_utc, zone
from notee.core.settings import Settings
from notee.domain import services
from notee.store import jobs_sql
from notee.store.cql.engagement import ReceiptRow, ScopeKeys
from notee.store.runtime import Runtime
from notee.usecases import receipt_counting, receipt_webhooks

EVENTS = ("delivered", "opened", "clicked", "dismissed")


@dataclass(frozen=True, slots=True)
class ReceiptEvent:
    """One event of a batch, as the app sent it."""

    notification_id: str
    event: str
    at: datetime  # aware
    action: str | None = None


@dataclass(frozen=True, slots=True)
class Rejection:
    index: int  # the event's position in the batch
    notification_id: str
    reason: str  # REASONS


@dataclass(slots=True)
class ReceiptsResult:
    """``accepted``: events stored and counted now; ``duplicates``: events stored before (a retry);
    ``rejected``: one entry per refused event. The three add up to the batch."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[Rejection] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Source:
    """What a notification's events are counted under, and when it was made."""

    keys: ScopeKeys
    created_at: datetime  # aware


class SourceCache:
    """Sources (job or single send) by (service, source), for ``ttl_s``: a batch of a popular job
    costs no MySQL read. Unknown sources are kept too (briefly), so a flood of forged ids costs one
    lookup per id per ``ttl_s``. One per API process; bounded."""

    def __init__(self, ttl_s: float = 60.0, max_items: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self.max_items, self.clock = ttl_s, max_items, clock
        self._items: dict[tuple[str, str], tuple[float, Source | None]] = {}

    def get(self, service: str, source: str) -> tuple[bool, Source | None]:
        held = self._items.get((service, source))
        if held is None or self.clock() >= held[0]:
            return False, None
        return True, held[1]

    def put(self, service: str, source: str, value: Source | None) -> None:
        while len(self._items) >= self.max_items:
            self._items.pop(next(iter(self._items)), None)
        self._items[(service, source)] = (self.clock() + self.ttl_s, value)


def scope_keys(type_: str, topic: str | None, created_at: datetime, timezone: str) -> ScopeKeys:
    """The keys a notification is counted under: its day is its creation day in ``timezone``."""
    day = aware_utc(created_at).astimezone(zone(timezone)).date().isoformat()
    return ScopeKeys(type_, f"{type_} {topic}" if topic is not None else None, day)


def find_sources(runtime: Runtime, cache: SourceCache, service: str, sources: set[str]) -> dict[str, Source | None]:
    """Each of ``sources`` of ``service`` (None: unknown or another service's), from the cache, else
    MySQL (a job) or Cassandra (a single send)."""
    out: dict[str, Source | None] = {}
    missing = []
    for s in sources:
        hit, value = cache.get(service, s)
        if hit:
            out[s] = value
        else:
            missing.append(s)
    if not missing:
        return out
    with runtime.sessions() as session:
        timezone = services.get_service(session, service).timezone
        for s in missing:
            job_id = notification_id.job_id_of(s)
            found: Source | None = None
            if job_id is not None:
                job = jobs_sql.get_job(session, job_id, service)
                if job is not None:
                    topic = job.target.get("topic") if job.target_kind == "TOPIC" else None
                    found = Source(scope_keys(job.type_, topic, job.created_at, timezone), aware_utc(job.created_at))
            else:
                single = runtime.statements.source_row(service, s)
                if single is not None:
                    type_, day, _, _ = single
                    found = Source(ScopeKeys(type_, None, day), aware_utc(datetime.fromisoformat(day)))
            cache.put(service, s, found)
            out[s] = found
    return out


@dataclass(slots=True)
class Caches:
    """The per-process caches of the receipts' path (and its intents' watch thread)."""

    sources: SourceCache = field(default_factory=SourceCache)
    hooks: receipt_webhooks.HookCache = field(default_factory=receipt_webhooks.HookCache)
    intents: receipt_counting.IntentWatch = field(default_factory=receipt_counting.IntentWatch)


def post_receipts(
    runtime: Runtime, settings: Settings, caches: Caches, service: str, events: Sequence[ReceiptEvent]
) -> ReceiptsResult:
    """Check, store, count and queue for the engagement webhooks a batch (module docstring). Raises a
    store error (an outage: 503) when the batch could not be stored, counted or queued; events stored
    before the error are duplicates on retry (not counted again, queued again: at least once), and
    their jobs are kept for the scheduler's recount (``receipt_counting``), which counts them."""
    now = now_utc()
    oldest = now - timedelta(days=settings.receipts_retention_days)
    newest = now + timedelta(seconds=settings.receipts_future_s)
    result = ReceiptsResult()
    parsed = [notification_id.parse(e.notification_id) for e in events]
    sources = find_sources(runtime, caches.sources, service, {p[0] for p in parsed if p is not None})
    rows: list[ReceiptRow] = []
    keys_of: list[ScopeKeys] = []
    received = naive_utc(now)
    for i, (e, p) in enumerate(zip(events, parsed, strict=True)):
        source = sources.get(p[0]) if p is not None else None
        reason = _refusal(e, source, oldest, newest)
        if reason is not None or p is None or source is None:
            result.rejected.append(Rejection(i, e.notification_id, reason or "not_found"))
            continue
        rows.append(ReceiptRow(p[0], p[1], e.event, e.action, naive_utc(e.at), received))
        keys_of.append(source.keys)
    if rows:
        # Rows that landed but whose count failed, or may have (a timeout), or a process that dies in
        # between: their jobs are kept in MySQL for the scheduler's recount before this answers.
        with receipt_counting.KeepUnlessCounted(
            caches.intents, runtime.sessions, service, {r.source for r in rows}
        ) as guard:
            stored = runtime.statements.store_receipts(service, rows, settings.receipts_retention_days * 86_400)
            new = stored.new
            if stored.contested:  # another request wrote some of its rows at once: the recount settles them
                guard.keep_anyway()
            counts: dict[tuple[str, ScopeKeys, str], int] = {}
            for row, keys, is_new in zip(rows, keys_of, new, strict=True):
                if is_new:
                    counts[(row.source, keys, row.event)] = counts.get((row.source, keys, row.event), 0) + 1
            if counts:
                guard.check_deadline()
                runtime.statements.count(service, counts)
        result.accepted = sum(new)
        result.duplicates = len(rows) - result.accepted
        for (_, _, event), n in counts.items():
            metrics.RECEIPTS.labels(service=service, event=event).inc(n)
        # After the count: a failure here answers 503, and the retry (its events now duplicates,
        # counted already) queues every stored event again.
        receipt_webhooks.emit(runtime, settings, caches.hooks, service, rows)
    return result


def _refusal(e: ReceiptEvent, source: Source | None, oldest: datetime, newest: datetime) -> str | None:
    if source is None:
        return "not_found"
    if e.at > newest:
        return "in_future"
    if e.at < oldest or source.created_at < oldest:
        return "too_old"
    return None
