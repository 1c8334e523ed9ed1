"""The 30-minute chaos run of seed 3131 (issue 31, docs/RELIABILITY.md "Found by the chaos run"),
reproduced deterministically on the real stores: an API process is killed while its subscribe's
batch is unanswered (a Cassandra node just lost, not yet convicted), so its withdrawal is kept as
``unanswered``; the client retries on another API, whose subscribe reads no row yet (the batch is
still in a coordinator's batchlog) and writes the subscription under fresh numbers; the batchlog
then replays the first batch. Its slot row has a number of its own and no index row names it: the
device got every topic publish twice for 14 minutes, until the scheduled ``notee reconcile``
applied the kept withdrawal (its ``unanswered`` records wait ``UNANSWERED_FOR``). The retry holds
the user's row exclusively, so no writer of that user can still wait on a batch: it applies the
kept withdrawals first (``withdrawals.settle_locked``).
"""

from __future__ import annotations

import itertools

import pytest

from notee.domain import topic_subscriptions, withdrawals
from notee.usecases import settle_withdrawals
from tests.support.registry import make_device, make_template, make_user
from tests.support.withdrawals import ProcessDied, Unanswered, kept, recipients

_tok = itertools.count()


def subscribe(runtime, st, svc, user, via):
    """The client's retry, through a Session (bulk endpoint) or a Core connection (the API's hot path)."""
    if via == "session":
        with runtime.sessions.begin() as s:
            return topic_subscriptions.subscribe_topic(s, st, svc, user, "news", "sports")
    with runtime.engine.connect() as db:
        try:
            return topic_subscriptions.subscribe_topic(db, st, svc, user, "news", "sports")
        finally:
            topic_subscriptions.end_transaction(db)


def killed_subscribe(runtime, st, svc, user, monkeypatch):
    """The first attempt: its batch is held back unanswered and its process dies; returns the batch."""
    held: list[list[tuple[object, tuple[object, ...]]]] = []
    write_together = st.write_together

    def hangs(units):
        held.extend(list(u) for u in units)
        monkeypatch.setattr(st, "write_together", write_together)
        return [Unanswered()]

    monkeypatch.setattr(withdrawals, "INTENT_AFTER_S", 0.05)
    monkeypatch.setattr(st, "write_together", hangs)
    with pytest.raises(ProcessDied), runtime.sessions.begin() as s:
        topic_subscriptions.subscribe_topic(s, st, svc, user, "news", "sports")
    monkeypatch.undo()
    assert held, "the first attempt wrote no batch"
    assert kept(runtime, svc, user) == ["unanswered"], "nothing kept before the batch's outcome was known"
    return held


@pytest.mark.parametrize("via", ["session", "connection"])
def test_a_retry_after_a_killed_writer_leaves_one_row_when_the_batchlog_replays_later(
    runtime, st, store_tenant, monkeypatch, via
):
    svc = store_tenant
    key = make_template(runtime, svc, "TOPIC", "news")
    user = make_user(runtime, svc)
    token = make_device(runtime, svc, user, f"retry-{next(_tok):04d}-" + "r" * 20, "AOS")
    held = killed_subscribe(runtime, st, svc, user, monkeypatch)
    assert subscribe(runtime, st, svc, user, via)["status"] == "subscribed"  # it read no row yet
    st.run(st.write_together(held))  # the batchlog's late replay, with the first attempt's timestamp
    # Nothing settles it in between: no reconcile, no remover (the chaos run's 14 minutes).
    found = recipients(st, key, svc, "sports")
    assert [r.device_token for r in found] == [token], "the device has two slot rows: every publish twice"
    assert kept(runtime, svc, user) == [], "the retry, holding the user exclusively, left the kept withdrawal"
    with runtime.sessions.begin() as s:
        topic_subscriptions.unsubscribe_topic(s, st, svc, user, "news", "sports")
    assert recipients(st, key, svc, "sports") == [], "the device still receives the topic after its unsubscribe"
    assert settle_withdrawals.settle_pending(runtime, svc)["withdrawals_settled"] == 0


def test_a_retry_after_a_killed_writer_whose_batch_landed_keeps_its_rows(runtime, st, store_tenant, monkeypatch):
    """The batchlog replayed before the retry: the killed attempt's rows are in effect, the retry finds
    them (``already_subscribed``) and writes nothing; its record is gone."""
    svc = store_tenant
    key = make_template(runtime, svc, "TOPIC", "news")
    user = make_user(runtime, svc)
    token = make_device(runtime, svc, user, f"retry-{next(_tok):04d}-" + "l" * 20, "AOS")
    held = killed_subscribe(runtime, st, svc, user, monkeypatch)
    st.run(st.write_together(held))
    landed = recipients(st, key, svc, "sports")
    assert subscribe(runtime, st, svc, user, "connection")["status"] == "already_subscribed"
    assert recipients(st, key, svc, "sports") == landed and [r.device_token for r in landed] == [token]
    assert kept(runtime, svc, user) == []


def test_an_unsubscribe_before_the_killed_writers_batch_lands_keeps_it_out(runtime, st, store_tenant, monkeypatch):
    """No retry this time: the user unsubscribes (204) while the killed attempt's batch is still in a
    batchlog. The unsubscribe holds the user's row exclusively, so it applies the young ``unanswered``
    record too (a tombstone above the batch's timestamp); the late replay then brings nothing back.
    Under the shared lock it skipped records younger than ``UNANSWERED_FOR``, and the subscription
    came back after the 204 until reconcile."""
    svc = store_tenant
    key = make_template(runtime, svc, "TOPIC", "news")
    user = make_user(runtime, svc)
    make_device(runtime, svc, user, f"retry-{next(_tok):04d}-" + "u" * 20, "AOS")
    held = killed_subscribe(runtime, st, svc, user, monkeypatch)
    with runtime.sessions.begin() as s:
        topic_subscriptions.unsubscribe_topic(s, st, svc, user, "news", "sports")
    assert kept(runtime, svc, user) == [], "the unsubscribe left the kept withdrawal for reconcile"
    st.run(st.write_together(held))  # the batchlog's late replay, after the acknowledged unsubscribe
    assert recipients(st, key, svc, "sports") == [], "the subscription came back after its unsubscribe"
