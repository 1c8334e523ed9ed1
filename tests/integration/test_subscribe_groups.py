"""notee.api.subscribe_groups: concurrent single topic subscribes of a (service, type) go in one call.

The grouping itself is tested with a call whose progress the test controls (a lone request goes at
once; requests arriving during a call go together in the next; each gets its own answer, its own
404, or the group's error; a cancelled request cancels nobody else's). Then through the HTTP API
against the real stores: requests held behind a MySQL row lock form one group, and each still gets
the answer it would have had alone; a drain's consecutive calls share its MySQL connection, each
call's locks ending with it, and a failed call gives the connection back.
The rules of this topic that need no server are in tests/unit/test_subscribe_groups.py.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from tests.support.registry import new_service, new_template, new_user, random_token
from tests.support.waiting import wait_for


def group_sizes() -> tuple[float, float]:
    """(groups, requests) recorded by notee_subscribe_group_size so far."""
    count = REGISTRY.get_sample_value("notee_subscribe_group_size_count") or 0.0
    total = REGISTRY.get_sample_value("notee_subscribe_group_size_sum") or 0.0
    return count, total


def test_subscribes_queued_behind_a_call_are_one_group_through_the_api(client, runtime, settings, service_id):
    """The first request's call waits on a MySQL row lock the test holds; six more requests of the
    same type arrive meanwhile. Released, they are answered by one more call, each as it would be
    alone: 201 for the new ones, 200 for a repeat, 404 for the unknown user."""
    h = new_service(client, settings, service_id)
    new_template(client, h, "TOPIC", "news")
    blocked = new_user(client, h, devices=[(random_token(), "AOS")])
    users = [new_user(client, h, devices=[(random_token(), "IOS")]) for _ in range(4)]
    unknown = str(uuid.uuid4())
    before = group_sizes()

    def put(user_id: str) -> int:
        return client.put(f"/v1/users/{user_id}/subscriptions/topic/news/t", headers=h).status_code

    with runtime.engine.connect() as holder, ThreadPoolExecutor(8) as pool:
        holder.execute(
            text("SELECT user_id FROM `user` WHERE service = :s AND user_id = :u FOR UPDATE"),
            {"s": service_id, "u": blocked},
        )
        try:
            first = pool.submit(put, blocked)
            wait_for(
                lambda: group_sizes()[0] == before[0] + 1, timeout=30, interval=0.01, what="the first call started"
            )  # its call started: it waits on the lock
            groups = client.app.state.subscribe_groups
            queued = []
            # One at a time, each in the API's loop before the next is sent: the group answers them in
            # the order they arrived (the repeat of users[0] after its first request).
            for n, user in enumerate([*users, unknown, users[0]], 1):
                queued.append(pool.submit(put, user))
                wait_for(
                    lambda n=n: groups.waiting(service_id, "news") == n,
                    timeout=30,
                    interval=0.01,
                    what=f"request {n} waiting",
                )
            assert not first.done()
        finally:
            holder.rollback()  # the lock ends: the first call goes on, then the six in one more
        assert first.result(timeout=30) == 201
        assert [f.result(timeout=30) for f in queued] == [201, 201, 201, 201, 404, 200]
    after = group_sizes()
    assert (after[0] - before[0], after[1] - before[1]) == (2, 7)  # two calls: 1 request, then 6
    assert runtime.statements.counters(service_id, "TOPIC", "news")[1] == 5


def held_lock(runtime, service_id: str, user_id: str):
    """A connection holding ``user_id``'s row lock until its rollback."""
    holder = runtime.engine.connect()
    holder.execute(
        text("SELECT user_id FROM `user` WHERE service = :s AND user_id = :u FOR UPDATE"),
        {"s": service_id, "u": user_id},
    )
    return holder


def test_a_drains_calls_share_its_connection_and_each_calls_locks_end_with_it(
    client, runtime, settings, service_id, monkeypatch
):
    """User A's subscribe waits on A's row lock (held by the test) while B's queues behind it, and
    B's row lock is held too. A's lock released, the drain's first call ends and its second waits on
    B's: on the same connection, and A's row is free (the first call's transaction ended, though the
    connection is still the drain's). B's lock released, the drain ends and gives the connection back."""
    h = new_service(client, settings, service_id)
    new_template(client, h, "TOPIC", "news")
    a, b = (new_user(client, h, devices=[(random_token(), "AOS")]) for _ in range(2))
    from notee.domain import topic_subscriptions

    used = []
    real = topic_subscriptions.subscribe_topics

    def recording(db, st, service, type_, wanted):
        used.append(db)
        return real(db, st, service, type_, wanted)

    monkeypatch.setattr(topic_subscriptions, "subscribe_topics", recording)
    groups = client.app.state.subscribe_groups

    def put(user_id: str) -> int:
        return client.put(f"/v1/users/{user_id}/subscriptions/topic/news/t", headers=h).status_code

    holds = {u: held_lock(runtime, service_id, u) for u in (a, b)}
    checked_out = runtime.engine.pool.checkedout()
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(put, a)
            wait_for(
                lambda: len(used) == 1, timeout=30, interval=0.01, what="the first call"
            )  # its call waits on A's lock
            second = pool.submit(put, b)
            wait_for(
                lambda: groups.waiting(service_id, "news") == 1, timeout=30, interval=0.01, what="one request waiting"
            )
            holds[a].rollback()
            assert first.result(timeout=30) == 201
            wait_for(
                lambda: len(used) == 2, timeout=30, interval=0.01, what="the second call"
            )  # the second call, waiting on B's lock
            assert used[1] is used[0]
            with runtime.engine.connect() as probe:  # A's lock ended with the first call
                row = probe.execute(
                    text("SELECT user_id FROM `user` WHERE service = :s AND user_id = :u FOR UPDATE NOWAIT"),
                    {"s": service_id, "u": a},
                ).one()
                assert row.user_id == a
            holds[b].rollback()
            assert second.result(timeout=30) == 201
    finally:
        for holder in holds.values():
            holder.close()
    wait_for(
        lambda: runtime.engine.pool.checkedout() == checked_out - 2,
        timeout=30,
        interval=0.01,
        what="the connections back in the pool",
    )  # the drain's and the holders'


def test_a_failed_call_gives_its_connection_back(client, runtime, settings, service_id):
    """A call that fails (no template of the type) leaves the drain without a connection: the pool
    has it back, and the drain's next call checks out another."""
    from notee.api.subscribe_groups import _StoreDrain
    from notee.core.errors import NotFound as NoTemplate

    new_template(client, new_service(client, settings, service_id), "TOPIC", "news")
    drain = _StoreDrain(runtime)
    checked_out = runtime.engine.pool.checkedout()
    with pytest.raises(NoTemplate):
        drain.call(service_id, "no-such-type", [(str(uuid.uuid4()), "t")])
    assert runtime.engine.pool.checkedout() == checked_out
    assert drain.call(service_id, "news", [(str(uuid.uuid4()), "t")]) == [None]  # an unknown user
    assert runtime.engine.pool.checkedout() == checked_out + 1  # kept while calls succeed
    drain.close()
    assert runtime.engine.pool.checkedout() == checked_out


def test_a_calls_locks_end_before_the_drains_next_call_and_when_the_drain_ends(client, runtime, settings, service_id):
    """The rollback ending a call's transaction is the drain's next call's first statement (the call
    is answered one round trip earlier), or the pool's reset when the drain gives the connection back:
    the users' locks never outlive either."""
    from notee.api.subscribe_groups import _StoreDrain

    h = new_service(client, settings, service_id)
    new_template(client, h, "TOPIC", "news")
    a, b = (new_user(client, h, devices=[(random_token(), "AOS")]) for _ in range(2))

    def locked(user_id: str) -> bool:
        with runtime.engine.connect() as probe:
            try:
                probe.execute(
                    text("SELECT user_id FROM `user` WHERE service = :s AND user_id = :u FOR UPDATE NOWAIT"),
                    {"s": service_id, "u": user_id},
                ).one()
            except Exception as exc:  # lock wait / NOWAIT refusal
                assert "lock" in str(exc).lower(), exc
                return True
            return False

    drain = _StoreDrain(runtime)
    try:
        assert drain.call(service_id, "news", [(a, "t")]) == [{"status": "subscribed", "devices": 1}]
        assert locked(a)  # answered; its transaction ends with the drain's next statement
        assert drain.call(service_id, "news", [(b, "t")]) == [{"status": "subscribed", "devices": 1}]
        assert not locked(a) and locked(b)
    finally:
        drain.close()
    assert not locked(b)
