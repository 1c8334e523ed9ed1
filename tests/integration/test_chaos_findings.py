"""What the chaos run (issue 31, chaos/) found, reproduced deterministically on the real stores.

A topic subscribe whose logged batch times out is answered 503 (``store_unavailable``), yet Cassandra
applies such a batch later (WriteTimeout of a logged batch: the batchlog replays it, with the
timestamp it was sent with). The client retries, as the API asks; the retry reads no index row yet,
takes a fresh ``no`` and writes its own rows. Before the fix, when the first batch landed the device
had two slot rows: every publish reached it twice, and an unsubscribe removed only the row the index
names, so it kept receiving the topic (docs/RELIABILITY.md, "Found by the chaos run"). Now a failed
write withdraws its rows (``withdrawals.write_or_withdraw``), with a newer timestamp that
shadows the late batch. The batchlog's replay is played here by holding the first attempt's rows
back and writing them after the retry under the first attempt's timestamp.
"""

from __future__ import annotations

import itertools

import pytest
from cassandra import WriteTimeout

from notee.domain import topic_subscriptions, withdrawals
from notee.store.cql.counters import max_slot
from notee.store.cql.recipients import stream_recipients
from tests.support.registry import make_device, make_template, make_user
from tests.support.withdrawals import recipients

_tok = itertools.count()


def test_a_subscribe_retried_after_a_batch_timeout_leaves_no_row_behind_its_unsubscribe(
    runtime, st, store_tenant, monkeypatch
):
    svc = store_tenant
    key = make_template(runtime, svc, "TOPIC", "news")
    user = make_user(runtime, svc)
    make_device(runtime, svc, user, f"chaos-{next(_tok):04d}-" + "x" * 20, "AOS")
    held: list[list[tuple[object, tuple[object, ...]]]] = []
    stamps: list[int] = []
    write_together = st.write_together
    cluster = st.session.cluster

    def times_out(units):  # the first attempt: the coordinator gives up, the batchlog keeps the batch
        held.extend(list(u) for u in units)
        stamps.append(cluster.timestamp_generator())  # the timestamp the batch was sent with
        monkeypatch.setattr(st, "write_together", write_together)
        raise WriteTimeout("Operation timed out", write_type=2)  # WriteType.BATCH: it will be replayed

    monkeypatch.setattr(st, "write_together", times_out)
    with pytest.raises(WriteTimeout), runtime.sessions.begin() as s:
        topic_subscriptions.subscribe_topic(s, st, svc, user, "news", "sports")
    with runtime.sessions.begin() as s:  # the client's retry
        topic_subscriptions.subscribe_topic(s, st, svc, user, "news", "sports")
    # The batchlog's replay of the first attempt lands, late, with the timestamp it was sent with.
    monkeypatch.setattr(cluster, "timestamp_generator", lambda: stamps[0])
    st.run(write_together(held))
    monkeypatch.undo()
    assert len(recipients(st, key, svc, "sports")) == 1, "one device, one row"
    with runtime.sessions.begin() as s:
        topic_subscriptions.unsubscribe_topic(s, st, svc, user, "news", "sports")
    assert recipients(st, key, svc, "sports") == [], "the device still receives the topic after its unsubscribe"


def test_a_cycle_subscribe_whose_batches_fail_leaves_no_row(runtime, st, store_tenant, monkeypatch):
    """The same rule on the cycle path (``materialise``): a batch that reports failure after Cassandra
    applied it (the worst case of a timeout) is withdrawn, so the failed subscribe wrote nothing."""
    from notee.core.vocabulary import CycleTarget
    from notee.domain import cycle_subscriptions
    from notee.domain.cycle_subscriptions import ScheduleRequest

    svc = store_tenant
    key = make_template(runtime, svc, "CYCLE", "remind")
    user = make_user(runtime, svc)
    make_device(runtime, svc, user, f"chaos-{next(_tok):04d}-" + "y" * 20, "AOS")
    add_cycle_device = st.add_cycle_device

    def applied_then_times_out(*args):
        add_cycle_device(*args).result()  # Cassandra applied it ...
        raise WriteTimeout("Operation timed out", write_type=2)  # ... and the coordinator answered late

    monkeypatch.setattr(st, "add_cycle_device", applied_then_times_out)
    with pytest.raises(WriteTimeout), runtime.sessions.begin() as s:
        cycle_subscriptions.subscribe_cycle(s, st, svc, user, "remind", ScheduleRequest(["MON"], 9, 0, "UTC"))
    target = CycleTarget("UTC", "MON", 9, 0)
    left = []
    for slot in range(max_slot(st, svc, "CYCLE", "remind") + 1):
        for page, _ in stream_recipients(st, key, target, slot, 100):
            left += page
    assert left == [], "a slot row of the failed subscribe is still there"
    assert [r for r in st.user_rows(user, svc) if r.method == "CYCLE"] == []


def test_a_withdrawal_failing_in_the_same_outage_is_tried_again(runtime, st, store_tenant, monkeypatch):
    """The chaos run's second finding (docs/RELIABILITY.md): the write timed out, and so did the first
    withdrawal (a node not yet convicted). The withdrawal is tried again, under the users' locks, so
    a user deleted right after the 503 has no row left for the batchlog's replay to revive."""
    svc = store_tenant
    key = make_template(runtime, svc, "TOPIC", "news")
    user = make_user(runtime, svc)
    make_device(runtime, svc, user, f"chaos-{next(_tok):04d}-" + "z" * 20, "AOS")
    monkeypatch.setattr(withdrawals, "WITHDRAW_WAITS_S", (0.01, 0.01))
    write_together, withdraw_rows = st.write_together, st.withdraw_rows
    failures = {"withdraw": 1}

    def applied_then_times_out(units):
        st.run(write_together(units))  # Cassandra applied the subscription's rows ...
        raise WriteTimeout("Operation timed out", write_type=2)  # ... and the coordinator answered late

    def first_removal_times_out(*args, **kwargs):
        if failures["withdraw"]:
            failures["withdraw"] -= 1
            raise WriteTimeout("Operation timed out", write_type=2)
        return withdraw_rows(*args, **kwargs)

    monkeypatch.setattr(st, "write_together", applied_then_times_out)
    monkeypatch.setattr(st, "withdraw_rows", first_removal_times_out)
    with pytest.raises(WriteTimeout), runtime.sessions.begin() as s:
        topic_subscriptions.subscribe_topic(s, st, svc, user, "news", "sports")
    assert failures["withdraw"] == 0, "the first withdrawal was not even tried"
    assert recipients(st, key, svc, "sports") == [], "the second withdrawal did not remove the slot row"
    assert [r for r in st.user_rows(user, svc) if r.method == "TOPIC"] == []
