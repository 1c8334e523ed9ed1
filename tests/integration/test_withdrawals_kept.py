"""The chaos run's open case (issue 31, docs/RELIABILITY.md "Found by the chaos run"), reproduced
deterministically on the real stores: a subscribe's logged batch times out (answered 503) and is
replayed later by Cassandra's batchlog, with the timestamp it was sent with, while its withdrawal
fails all three tries (or the process dies before it knows the batch's outcome). The withdrawal is
kept in MySQL (``subscription_withdrawal``) and applied later, ``USING TIMESTAMP`` just after the
failed write's, by the next remover of the user's rows or by ``notee reconcile``. The batchlog's
replay is played by holding the failed attempt's rows back and writing them afterwards: they carry
their own write timestamp (``USING TIMESTAMP``), as the replayed batch does.

Without the kept withdrawal, each of these leaves the replayed rows for good: the device keeps
receiving the topic after an acknowledged unsubscribe, removal, rotation or user deletion.
"""

from __future__ import annotations

import itertools

import pytest
from cassandra import WriteTimeout

from notee.domain import topic_subscriptions, users, withdrawals
from notee.usecases import reconcile, settle_withdrawals
from tests.support.registry import make_device, make_template, make_user
from tests.support.withdrawals import ProcessDied, Unanswered, kept, recipients

_tok = itertools.count()


def topic_rows(st, user, svc):
    return [r for r in st.user_rows(user, svc) if r.method == "TOPIC"]


class Outage:
    """A subscribe whose batch times out and is held back (the batchlog keeps it), and whose
    withdrawal fails every try; ``replay`` plays the batchlog's late replay of the held batch."""

    def __init__(self, st, monkeypatch):
        self.st, self.mp = st, monkeypatch
        self.write_together = st.write_together
        self.held: list[list[tuple[object, tuple[object, ...]]]] = []
        monkeypatch.setattr(withdrawals, "WITHDRAW_WAITS_S", (0.01, 0.01))

    def start(self) -> None:
        def times_out(units):
            self.held.extend(list(u) for u in units)
            self.mp.setattr(self.st, "write_together", self.write_together)  # the retry's batch goes through
            raise WriteTimeout("Operation timed out", write_type=2)  # WriteType.BATCH: it will be replayed

        def withdrawal_times_out(*args, **kwargs):
            raise WriteTimeout("Operation timed out", write_type=0)

        self.mp.setattr(self.st, "write_together", times_out)
        self.mp.setattr(self.st, "withdraw_rows", withdrawal_times_out)

    def end(self) -> None:
        self.mp.undo()

    def replay(self) -> None:
        self.st.run(self.write_together(self.held))


def failed_subscribe(runtime, st, svc, user, monkeypatch) -> Outage:
    outage = Outage(st, monkeypatch)
    outage.start()
    with pytest.raises(WriteTimeout), runtime.sessions.begin() as s:
        topic_subscriptions.subscribe_topic(s, st, svc, user, "news", "sports")
    outage.end()
    assert outage.held, "the subscribe wrote no batch"
    return outage


def setup(runtime, svc, letter):
    key = make_template(runtime, svc, "TOPIC", "news")
    user = make_user(runtime, svc)
    token = make_device(runtime, svc, user, f"kept-{next(_tok):04d}-" + letter * 20, "AOS")
    return key, user, token


def test_a_withdrawal_failing_every_try_is_kept_before_the_request_answers(runtime, st, store_tenant, monkeypatch):
    svc = store_tenant
    _, user, _ = setup(runtime, svc, "a")
    failed_subscribe(runtime, st, svc, user, monkeypatch)
    assert kept(runtime, svc, user) == ["failed"], "the failed write's withdrawal was not kept"


@pytest.mark.parametrize("remover", ["unsubscribe", "remove_device", "rotate", "delete_user"])
def test_a_kept_withdrawal_is_applied_by_the_next_remover(runtime, st, store_tenant, monkeypatch, remover):
    """The chaos run's case: the user was deleted (or unsubscribed, or its device removed or rotated)
    0.35 s after the 503, before the batchlog replayed the batch; the remover read no row and the
    replayed rows stayed. Now the remover applies the kept withdrawal first, so the replay is shadowed."""
    svc = store_tenant
    key, user, token = setup(runtime, svc, "b")
    outage = failed_subscribe(runtime, st, svc, user, monkeypatch)
    with runtime.sessions.begin() as s:
        if remover == "unsubscribe":
            topic_subscriptions.unsubscribe_topic(s, st, svc, user, "news", "sports")
        elif remover == "remove_device":
            users.remove_device(s, st, svc, user, token)
        elif remover == "rotate":
            users.rotate_token(s, st, svc, old_token=token, new_token=token + "-new")
        else:
            users.delete_user(s, st, svc, user)
    assert kept(runtime, svc, user) == [], "the remover did not apply the kept withdrawal"
    outage.replay()  # the batchlog's replay lands after the acknowledged removal
    assert recipients(st, key, svc, "sports") == [], f"the device still receives the topic after {remover}"
    assert topic_rows(st, user, svc) == []


def test_a_kept_withdrawal_is_applied_by_reconcile(runtime, st, store_tenant, monkeypatch):
    """No remover and no retry come: the scheduled reconcile applies it. (A client's retry, a topic
    subscribe, applies it itself: tests/integration/test_withdrawals_retry.py.)"""
    svc = store_tenant
    key, user, _ = setup(runtime, svc, "c")
    outage = failed_subscribe(runtime, st, svc, user, monkeypatch)
    report = reconcile.reconcile(runtime, service=svc)
    assert report["withdrawals_settled"] == 1
    assert kept(runtime, svc, user) == []
    outage.replay()
    assert recipients(st, key, svc, "sports") == [], "the failed subscribe's replayed row stayed"
    assert topic_rows(st, user, svc) == []
    assert reconcile.reconcile(runtime, service=svc)["withdrawals_settled"] == 0


def test_a_kept_withdrawal_spares_the_retry(runtime, st, store_tenant, monkeypatch):
    """The client's retry (fresh numbers, a newer timestamp) applies the kept withdrawal before it
    reads, and keeps its own rows: the withdrawal shadows the failed write only."""
    svc = store_tenant
    key, user, token = setup(runtime, svc, "c")
    outage = failed_subscribe(runtime, st, svc, user, monkeypatch)
    with runtime.sessions.begin() as s:  # the client's retry
        topic_subscriptions.subscribe_topic(s, st, svc, user, "news", "sports")
    assert kept(runtime, svc, user) == []
    retry = recipients(st, key, svc, "sports")
    outage.replay()
    assert recipients(st, key, svc, "sports") == retry, "one device, one row: the retry's"
    assert len(retry) == 1 and retry[0].device_token == token
    with runtime.sessions.begin() as s:
        topic_subscriptions.unsubscribe_topic(s, st, svc, user, "news", "sports")
    assert recipients(st, key, svc, "sports") == [], "the device still receives the topic after its unsubscribe"
    assert reconcile.reconcile(runtime, service=svc)["withdrawals_settled"] == 0


@pytest.mark.parametrize("settler", ["reconcile", "delete_user"])
def test_a_process_killed_while_its_batch_is_unanswered_leaves_a_withdrawal_to_settle(
    runtime, st, store_tenant, monkeypatch, settler
):
    """The process-death window: the batch is unanswered past ``INTENT_AFTER_S`` (a node not yet
    convicted), so the writer keeps its withdrawal as ``unanswered`` and waits on; the process is
    killed then (no handler runs); the batchlog replays the batch later. A remover holding the user
    exclusively (or reconcile, once no writer can still wait) applies it: the replay is shadowed."""
    svc = store_tenant
    key, user, _ = setup(runtime, svc, "d")
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
    assert kept(runtime, svc, user) == ["unanswered"], "nothing kept before the batch's outcome was known"
    # No retry (a topic subscribe retried applies it itself: tests/integration/test_withdrawals_retry.py).
    # Too young for reconcile or an unsubscribe (a shared lock): its writer might still wait on the batch.
    assert settle_withdrawals.settle_pending(runtime, svc)["withdrawals_settled"] == 0
    if settler == "delete_user":  # the user's exclusive lock: no writer of its rows still waits
        with runtime.sessions.begin() as s:
            users.delete_user(s, st, svc, user)
        assert kept(runtime, svc, user) == []
        st.run(write_together(held))  # the batchlog's replay, with the first attempt's timestamp
        assert recipients(st, key, svc, "sports") == [], "the device still receives the topic after its user's deletion"
        return
    monkeypatch.setattr(settle_withdrawals, "UNANSWERED_FOR", withdrawals.UNANSWERED_FOR * 0)
    assert settle_withdrawals.settle_pending(runtime, svc)["withdrawals_settled"] == 1
    st.run(write_together(held))  # the batchlog's replay, with the first attempt's timestamp
    assert recipients(st, key, svc, "sports") == [], "the killed attempt's row came back"


def test_an_unanswered_batch_that_then_succeeds_keeps_nothing(runtime, st, store_tenant, monkeypatch):
    """A slow batch that succeeds: its withdrawal was kept while it was unanswered, and is forgotten
    once it succeeds; its rows stay."""
    svc = store_tenant
    key, user, token = setup(runtime, svc, "e")
    monkeypatch.setattr(withdrawals, "INTENT_AFTER_S", 0.0)  # every batch counts as slow
    recorded = []
    record = withdrawals.withdrawals_sql.record

    def spy(sessions, write, state):
        recorded.append(state)
        return record(sessions, write, state)

    monkeypatch.setattr(withdrawals.withdrawals_sql, "record", spy)
    with runtime.sessions.begin() as s:
        topic_subscriptions.subscribe_topic(s, st, svc, user, "news", "sports")
    assert recorded == ["unanswered"]
    assert kept(runtime, svc, user) == []
    assert [r.device_token for r in recipients(st, key, svc, "sports")] == [token]
