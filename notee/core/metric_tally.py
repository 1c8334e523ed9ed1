"""``HistogramTally``: observations of one labelled histogram counted locally and added to it in one
step per ``flush``. The HTTP/2 connection observes every response's latency
(``notee_provider_response_seconds``) and flushes once per read (~50 responses on a busy fan-out):
one bucket increment per occupied bucket and one to the sum per read, instead of a lock, a bucket
loop and two increments per response (~0.6 µs of a worker's CPU per push, docs/BENCHMARKS.md round
3, fourth part). What Prometheus reads after a flush is what ``observe`` per amount would have left
(tests/unit/test_metric_tally.py); between flushes the tally holds at most one read's answers.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client import Histogram


class HistogramTally:
    """Counts ``observe(amount)`` per bucket of ``child`` (one labelled child of a ``Histogram``) until
    ``flush``. A child whose internals are not the ones this was written against (``_upper_bounds``,
    ``_buckets``, ``_sum`` of prometheus_client 0.2x) is observed per amount at ``flush`` instead."""

    __slots__ = ("_amounts", "_bounds", "_buckets", "_child", "_counts", "_sum", "_total")

    def __init__(self, child: Histogram) -> None:
        self._child = child
        inner: Any = child
        bounds = getattr(inner, "_upper_bounds", None)
        buckets = getattr(inner, "_buckets", None)
        total = getattr(inner, "_sum", None)
        usable = isinstance(bounds, list) and isinstance(buckets, list) and len(buckets) == len(bounds)
        self._bounds: list[float] | None = bounds if usable and total is not None else None
        self._buckets: list[Any] = buckets if self._bounds is not None and isinstance(buckets, list) else []
        self._total: Any = total
        self._counts = [0] * len(self._buckets)
        self._amounts: list[float] = []  # the fallback: amounts kept for ``observe`` at flush
        self._sum = 0.0

    def observe(self, amount: float) -> None:
        bounds = self._bounds
        if bounds is None:
            self._amounts.append(amount)
            return
        # observe() puts an amount in the first bucket whose upper bound is >= it: bisect_left
        self._counts[bisect_left(bounds, amount)] += 1
        self._sum += amount

    def flush(self) -> None:
        """Add what was counted since the last flush to the histogram."""
        if self._bounds is None:
            amounts, self._amounts = self._amounts, []
            for amount in amounts:
                self._child.observe(amount)
            return
        counts = self._counts
        if not any(counts):
            return
        self._total.inc(self._sum)
        for i, n in enumerate(counts):
            if n:
                self._buckets[i].inc(n)
                counts[i] = 0
        self._sum = 0.0
