"""Every invariant of a chaos run, in the report's order: ``chaos.ledger``'s, then the hostile
clients' (``chaos.ledger_edge``) and Notee's own counters' (``chaos.ledger_prom``)."""

from __future__ import annotations

from collections.abc import Iterable

from chaos.ledger import Bounds, Event, Ledger, Result, by_mark, check_ledger
from chaos.ledger_edge import check_hostile, check_hostile_latency
from chaos.ledger_prom import check_job_counts, check_prometheus


def check_all(events: Iterable[Event], deliveries: list[Event], bounds: Bounds) -> list[Result]:
    led = Ledger.of(events)
    return [
        *check_ledger(led, deliveries, bounds),
        check_hostile(led),
        check_hostile_latency(led),
        check_job_counts(led, by_mark(deliveries), bounds),
        check_prometheus(led, deliveries),
    ]
