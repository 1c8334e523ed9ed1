"""Engagement webhooks (docs/WEBHOOKS.md "Engagement events"): the receipts of a batch, handed to the
webhook outbox for the endpoints of the service that opted in to their kind.

Kept cheap for the receipts' path: which receipt kinds a service's endpoints want is cached per API
process for ``ttl_s`` (a service without such an endpoint costs no MySQL read on most batches), and
a batch that has something to send writes one outbox row per (kind, endpoint, up to the batch bound)
in one transaction. A cached "wanted" that went stale (the endpoint was deleted) writes nothing: the
write selects the endpoints that want the kind now."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from notee.core import notification_id
from notee.core.settings import Settings
from notee.store import receipt_outbox_sql
from notee.store.cql.engagement import ReceiptRow
from notee.store.runtime import Runtime


@dataclass(slots=True)
class HookCache:
    """service -> (until, the receipt.* kinds its endpoints want). One per API process; bounded."""

    ttl_s: float = 5.0
    max_items: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _items: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)

    def wanted(self, runtime: Runtime, service: str) -> frozenset[str]:
        held = self._items.get(service)
        if held is not None and self.clock() < held[0]:
            return held[1]
        with runtime.sessions() as session:
            kinds = receipt_outbox_sql.wanted_kinds(session, service)
        while len(self._items) >= self.max_items:
            self._items.pop(next(iter(self._items)), None)
        self._items[service] = (self.clock() + self.ttl_s, kinds)
        return kinds


def event_body(row: ReceiptRow) -> dict[str, object]:
    """One receipt as a webhook carries it."""
    return {
        "notification_id": f"{row.source}.{row.device}",
        "job_id": notification_id.job_id_of(row.source) or row.source,
        "event": row.event,
        "action": row.action,
        "at": row.at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "received": row.received.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }


def emit(runtime: Runtime, settings: Settings, hooks: HookCache, service: str, rows: Sequence[ReceiptRow]) -> int:
    """Queue ``rows`` (stored receipts) for the endpoints that want their kinds; returns the outbox
    rows written. Raises a store error (the caller answers 503: the app retries the batch, and its
    events, stored already, are sent again: at least once)."""
    kinds = hooks.wanted(runtime, service)
    if not kinds:
        return 0
    per_kind: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        kind = f"receipt.{row.event}"
        if kind in kinds:
            per_kind.setdefault(kind, []).append(event_body(row))
    if not per_kind:
        return 0
    written = 0
    with runtime.sessions.begin() as session:
        for kind, events in per_kind.items():
            written += receipt_outbox_sql.emit_receipts(
                session,
                service,
                kind,
                events,
                batch=settings.webhook_receipt_batch_events,
                window_s=settings.webhook_receipt_window_s,
            )
    return written
