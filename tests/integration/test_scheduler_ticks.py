"""The cycle_tick ledger (notee/store/ticks.py): a minute is claimed by exactly one owner, only the
owner finishes it, a dead owner's minute is taken over after its lease, skipped rows never flip."""

from __future__ import annotations

import secrets
import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, literal_column, update
from sqlalchemy.exc import DBAPIError

from notee.store import ticks
from tests.support.scheduler import tick_states, utc

M = utc(2026, 7, 1, 12, 0)


@pytest.fixture()
def ns() -> str:
    return "test-" + secrets.token_hex(6)


def claim(runtime, ns, owner, minute=M, lease_s=120):
    with runtime.sessions.begin() as s:
        return ticks.claim(s, namespace=ns, minute_utc=minute, owner=owner, lease_s=lease_s)


def finish(runtime, ns, owner, state="done", minute=M):
    with runtime.sessions.begin() as s:
        return ticks.finish(s, namespace=ns, minute_utc=minute, owner=owner, state=state, jobs=3)


def test_one_claim_per_minute_and_only_the_owner_finishes(runtime, ns):
    assert claim(runtime, ns, "a") is True
    assert claim(runtime, ns, "b") is False  # live lease
    assert finish(runtime, ns, "b") is False
    assert finish(runtime, ns, "a") is True
    assert claim(runtime, ns, "b", lease_s=0) is False  # finished minutes are never taken over
    with runtime.sessions() as s:
        row = ticks.get(s, namespace=ns, minute_utc=M)
    assert (row.state, row.owner, row.jobs, row.attempts) == ("done", "a", 3, 1)
    assert row.finished_at is not None


def test_an_expired_claim_is_taken_over_once(runtime, ns):
    assert claim(runtime, ns, "dead")
    # The dead owner claimed an hour ago (database clock); racers use a 10-minute lease, so the dead
    # claim is expired for all of them and the winner's fresh claim is live for the others.
    with runtime.sessions.begin() as s:
        s.execute(
            update(ticks.cycle_tick)
            .where(ticks.cycle_tick.c.namespace == ns)
            .values(claimed_at=func.timestampadd(literal_column("HOUR"), -1, func.utc_timestamp(6)))
        )
    winners = []
    barrier = threading.Barrier(4)

    def race(owner):
        barrier.wait(timeout=30)
        if claim(runtime, ns, owner, lease_s=600):
            winners.append(owner)

    threads = [threading.Thread(target=race, args=(f"r{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1, winners  # taken over once, by one racer
    assert finish(runtime, ns, "dead") is False  # the dead owner can no longer finish it
    with runtime.sessions() as s:
        row = ticks.get(s, namespace=ns, minute_utc=M)
    assert (row.owner, row.attempts, row.state) == (winners[0], 2, "running")
    assert finish(runtime, ns, winners[0]) is True


def test_concurrent_claims_of_a_fresh_minute_have_one_winner(runtime, ns):
    winners = []
    barrier = threading.Barrier(6)

    def race(owner):
        barrier.wait(timeout=30)
        if claim(runtime, ns, owner):
            winners.append(owner)

    threads = [threading.Thread(target=race, args=(f"r{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1


def test_skipped_minutes_are_recorded_once_and_never_claimed(runtime, ns):
    minutes = [M + timedelta(minutes=i) for i in range(3)]
    assert claim(runtime, ns, "a", minute=minutes[1])
    with runtime.sessions.begin() as s:
        assert ticks.record_skipped(s, namespace=ns, minutes=minutes, owner="x", before=M + timedelta(hours=1)) == 2
    assert tick_states(runtime, ns) == {minutes[0]: "skipped", minutes[1]: "running", minutes[2]: "skipped"}
    assert claim(runtime, ns, "b", minute=minutes[0], lease_s=0) is False


def test_minutes_at_or_after_now_minus_grace_are_never_recorded_skipped(runtime, ns):
    minutes = [M + timedelta(minutes=i) for i in range(4)]
    with runtime.sessions.begin() as s:
        assert ticks.record_skipped(s, namespace=ns, minutes=minutes, owner="x", before=minutes[2]) == 2
    assert tick_states(runtime, ns) == {minutes[0]: "skipped", minutes[1]: "skipped"}


def test_the_store_refuses_bad_states_and_unaligned_minutes(runtime, ns):
    with pytest.raises(ValueError):
        finish(runtime, ns, "a", state="skipped")
    with pytest.raises(DBAPIError, match="ck_tick_minute"):  # CHECK (SECOND(minute_utc) = 0)
        claim(runtime, ns, "a", minute=M + timedelta(seconds=30))
    assert tick_states(runtime, ns) == {}
