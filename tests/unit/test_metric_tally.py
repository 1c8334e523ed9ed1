"""``HistogramTally``: after a flush, the histogram reads what ``observe`` per amount would have left."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from notee.core.metric_tally import HistogramTally

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _pair() -> tuple[CollectorRegistry, Histogram, CollectorRegistry, Histogram]:
    a, b = CollectorRegistry(), CollectorRegistry()
    ha = Histogram("lat_seconds", "x", ["provider"], buckets=BUCKETS, registry=a)
    hb = Histogram("lat_seconds", "x", ["provider"], buckets=BUCKETS, registry=b)
    return a, ha, b, hb


def _exposed(registry: CollectorRegistry) -> bytes:
    return b"\n".join(line for line in generate_latest(registry).splitlines() if b"_created" not in line)


def test_a_flushed_tally_reads_as_observe_per_amount_including_the_bounds_themselves() -> None:
    rng = random.Random(7)
    amounts = [*BUCKETS, 0.0, 31.0, 1e9, *(rng.expovariate(30) for _ in range(5_000))]
    a, ha, b, hb = _pair()
    tally = HistogramTally(hb.labels("fcm"))
    for i, amount in enumerate(amounts):
        ha.labels("fcm").observe(amount)
        tally.observe(amount)
        if i % 97 == 0:  # flushed at arbitrary points, as reads end
            tally.flush()
    tally.flush()
    assert _exposed(a) == _exposed(b)
    tally.flush()  # nothing new: nothing added twice
    assert _exposed(a) == _exposed(b)


def test_before_a_flush_nothing_is_added_and_a_child_of_other_internals_is_observed_per_amount() -> None:
    _, _, _, hb = _pair()
    tally = HistogramTally(hb.labels("apns"))
    tally.observe(0.2)
    assert hb.labels("apns")._sum.get() == 0  # type: ignore[attr-defined]
    tally.flush()
    assert hb.labels("apns")._sum.get() == 0.2  # type: ignore[attr-defined]

    class Plain:
        def __init__(self) -> None:
            self.seen: list[float] = []

        def observe(self, amount: float) -> None:
            self.seen.append(amount)

    plain = Plain()
    fallback = HistogramTally(plain)  # type: ignore[arg-type]
    fallback.observe(0.5)
    fallback.observe(2.0)
    assert plain.seen == []
    fallback.flush()
    assert plain.seen == [0.5, 2.0]
