"""A passing outage never fails a job (issue 14, items 1-2), at unit level on the real stores:

- the outage backoff doubles up to its cap and resets;
- the circuit breaker opens on a mostly-unreachable page, refuses while open, probes, closes;
- a task's attempt counter counts crashes and unexpected errors at one checkpoint, not graceful
  releases; a checkpoint restarts the count;
- a worker whose sends hit a store outage more often than the poison limit still finishes the job,
  every device once; an unexpected error repeated at one checkpoint fails the task loudly;
- a paging state Cassandra rejects resumes the slot after the checkpointed key: nothing lost,
  nothing twice;
- transport errors in a fan-out: a refused provider opens the circuit (nothing is dead-lettered)
  and the job completes once the provider is back (without a breaker, tests/integration/test_providers_delivery.py
  ::test_an_unreachable_provider_is_not_the_devices_failure).
The long versions (60 s quorum loss, MariaDB killed 30 s, provider refusing 60 s) are in tests/faults/.
Here, the rules that need no server; tests/integration/test_fanout_outages.py has the rest.
"""

from __future__ import annotations

import random

import pytest
from sqlalchemy import exc as sa_exc

from notee.core.errors import ProviderUnavailable
from notee.providers.breaker import CircuitBreaker
from notee.worker.lanes import OutageBackoff, is_outage


def test_outage_backoff_doubles_up_to_the_cap_and_resets() -> None:
    b = OutageBackoff(base_s=1.0, cap_s=8.0, rng=random.Random(7))
    delays = [b.next_delay() for _ in range(7)]
    ceilings = [1, 2, 4, 8, 8, 8, 8]
    for d, c in zip(delays, ceilings, strict=False):
        assert c / 2 <= d <= c  # equal jitter: at least half the ceiling, never above it
    b.reset()
    assert 0.5 <= b.next_delay() <= 1.0


def test_outage_classification() -> None:
    assert is_outage(ProviderUnavailable("fcm unreachable"))
    assert is_outage(sa_exc.OperationalError("SELECT 1", {}, Exception("2003 Can't connect")))
    from cassandra import Unavailable
    from cassandra.cluster import NoHostAvailable

    assert is_outage(Unavailable("quorum lost")) and is_outage(NoHostAvailable("none", {}))
    assert not is_outage(ValueError("a bug")) and not is_outage(KeyError("payload"))


def test_circuit_breaker_opens_refuses_probes_and_closes() -> None:
    now = [100.0]
    br = CircuitBreaker(open_s=2.0, max_open_s=5.0, clock=lambda: now[0])
    assert br.record("fcm", sent=100, unreachable=50) is False  # half is not "most": stays closed
    assert br.blocked_for("fcm") == 0 and not br.probing("fcm")
    assert br.record("fcm", sent=100, unreachable=51) is True  # most of the page: open
    assert br.blocked_for("fcm") == pytest.approx(2.0) and not br.probing("fcm")
    assert br.blocked_for("apns") == 0  # per provider
    now[0] += 2.0
    assert br.blocked_for("fcm") == 0 and br.probing("fcm")  # half-open: one probe
    assert br.record("fcm", sent=1, unreachable=1) is True  # the probe failed: open twice as long
    assert br.blocked_for("fcm") == pytest.approx(4.0)
    now[0] += 4.0
    assert br.record("fcm", sent=1, unreachable=1) is True
    assert br.blocked_for("fcm") == pytest.approx(5.0)  # capped
    now[0] += 5.0
    assert br.record("fcm", sent=1, unreachable=0) is False  # the probe got an answer: closed
    assert br.blocked_for("fcm") == 0 and not br.probing("fcm") and br.opened == 3
