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

import asyncio
import random
from datetime import datetime

import pytest
from cassandra.cluster import NoHostAvailable
from sqlalchemy import exc as sa_exc

from notee.core.errors import ProviderUnavailable
from notee.providers.breaker import CircuitBreaker
from notee.store import jobs_sql, task_leases
from notee.worker.outage import OutageBackoff, is_outage
from notee.worker.reader import PageReader


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


class _CassandraDownRuntime:
    """A process whose first Cassandra call (preparing its statements) meets an outage."""

    sessions = None

    @property
    def statements(self) -> object:
        raise NoHostAvailable("Unable to connect to any servers", {"127.0.0.1:9042": ConnectionRefusedError()})


def test_a_reader_that_cannot_prepare_its_statements_hands_the_outage_to_the_sender() -> None:
    """The reader's first Cassandra call is ``runtime.statements`` (prepared on first use). An outage
    there is handed to the sender like any read error, which releases the task; before, the reader
    died with it and the task waited on its queue for ever while its lease was renewed."""
    now = datetime(2026, 1, 1)
    claim = task_leases.Claim("j", 0, 0, 0, 0, None, 0, "lease")
    job = jobs_sql.JobRow(
        "j",
        "S",
        "k",
        "TOPIC",
        "news",
        "TOPIC",
        {"topic": "t"},
        None,
        None,
        {"title": "t", "body": "b"},
        "running",
        1,
        None,
        now,
        now,
        None,
    )
    reader = PageReader(_CassandraDownRuntime(), 100, claim, job)  # type: ignore[arg-type]

    async def first_item() -> object:
        await asyncio.wait_for(reader.run(), 5)
        return reader.queue.get_nowait()

    item = asyncio.run(first_item())
    assert isinstance(item, NoHostAvailable) and is_outage(item)
