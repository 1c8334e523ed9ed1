"""Deletion wins every race (issue 14.5): subscribes, device registrations and token rotations racing
the deletion of their user or device, as real concurrent HTTP requests against the real stores,
leave no slot, index or token-index row behind; pruning finds rows MySQL no longer knows a holder
of; `notee reconcile` (full, and the scheduler's bounded batch) removes rows of users and devices
that are gone, and stale due-index rows."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from sqlalchemy import text

from notee.core.vocabulary import CycleTarget, Recipient, TopicTarget
from notee.domain import subscriptions as subs
from notee.store import users_sql
from notee.store.cql.counters import max_slot
from notee.store.cql.recipients import stream_recipients
from notee.usecases import reconcile, settle_withdrawals
from tests.support.registry import new_user, random_token
from tests.support.scheduler import scheduler

ITERATIONS = 25
CYCLE = {"days": ["MON"], "hour": 9, "minute": 0, "timezone": "UTC"}
BUCKET = CycleTarget("UTC", "MON", 9, 0)


@pytest.fixture()
def tenant(tenant):
    """The family's tenant with a TOPIC and a CYCLE template: (service, headers, their keys)."""
    news = tenant.template("TOPIC", "news")["notification_key"]
    remind = tenant.template("CYCLE", "remind")["notification_key"]
    return tenant.service, tenant.headers, news, remind


def slot_rows(st, service, key, target, method, type_):
    out = []
    for slot in range(max_slot(st, service, method, type_) + 1):
        for page, _ in stream_recipients(st, key, target, slot, 500):
            out += map(Recipient._make, page)
    return out


def leftovers(st, service, news, remind, user_id, tokens, topics):
    """Every row naming the user or one of the tokens: index partition, token index, slot rows."""
    found = [f"index {r.method}/{r.target}/{r.device_token!r}" for r in st.user_rows(user_id, service)]
    found += [f"token index {t[:12]}" for t in tokens if user_id in st.token_holders(service, t)]
    for topic in topics:
        found += [
            f"topic slot row {topic} {r.device_token[:12]}"
            for r in slot_rows(st, service, news, TopicTarget(topic), "TOPIC", "news")
            if r.user_id == user_id or r.device_token in tokens
        ]
    found += [
        f"cycle slot row {r.device_token[:12]}"
        for r in slot_rows(st, service, remind, BUCKET, "CYCLE", "remind")
        if r.user_id == user_id or r.device_token in tokens
    ]
    return found


def race(calls: list[Callable[[], Any]]) -> list[int]:
    """Start every call at the same instant (a barrier), return their HTTP statuses."""
    barrier = threading.Barrier(len(calls))

    def go(call):
        barrier.wait()
        return call().status_code

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(go, calls))


def test_writes_racing_a_user_deletion_leave_nothing_behind(client, st, tenant):
    svc, h, news, remind = tenant
    outcomes: dict[str, int] = {}
    for i in range(ITERATIONS):
        ta, tb, tc, ta2 = (random_token(p) for p in ("a", "b", "c", "a2"))
        u = new_user(client, h, devices=[(ta, "AOS"), (tb, "IOS")])
        assert client.put(f"/v1/users/{u}/subscriptions/topic/news/pre", headers=h).status_code in (200, 201)
        statuses = race(
            [
                partial(client.put, f"/v1/users/{u}/subscriptions/topic/news/t{i}", headers=h),
                partial(client.put, f"/v1/users/{u}/subscriptions/cycle/remind", json=CYCLE, headers=h),
                partial(client.post, f"/v1/users/{u}/devices", json={"token": tc, "os": "AOS"}, headers=h),
                partial(client.post, f"/v1/topics/news/b{i}/subscribers", json={"user_ids": [u]}, headers=h),
                partial(client.post, "/v1/devices/rotate", json={"old_token": ta, "new_token": ta2}, headers=h),
                partial(client.delete, f"/v1/users/{u}", headers=h),
            ]
        )
        assert statuses[-1] == 204, statuses
        assert all(s < 500 for s in statuses), statuses
        for name, s in zip(("topic", "cycle", "device", "bulk", "rotate"), statuses, strict=False):
            outcomes[f"{name} {s}"] = outcomes.get(f"{name} {s}", 0) + 1
        assert client.get(f"/v1/users/{u}", headers=h).status_code == 404
        left = leftovers(st, svc, news, remind, u, [ta, tb, tc, ta2], ["pre", f"t{i}", f"b{i}"])
        assert left == [], (i, statuses, left)
    # The race really raced: some writes landed before the deletion, some came after it (404).
    print("outcomes over", ITERATIONS, "iterations:", dict(sorted(outcomes.items())))
    assert outcomes.get("topic 404", 0) + outcomes.get("cycle 404", 0) > 0
    assert outcomes.get("topic 201", 0) + outcomes.get("cycle 201", 0) + outcomes.get("topic 200", 0) > 0


def test_writes_racing_a_device_removal_leave_no_rows_for_a_removed_device(client, st, tenant):
    svc, h, news, remind = tenant
    outcomes: dict[str, int] = {}
    for i in range(ITERATIONS):
        ta, ta2, keep = random_token("a"), random_token("a2"), random_token("k")
        u = new_user(client, h, devices=[(ta, "AOS"), (keep, "IOS")])
        assert client.put(f"/v1/users/{u}/subscriptions/topic/news/pre", headers=h).status_code in (200, 201)
        statuses = race(
            [
                partial(client.put, f"/v1/users/{u}/subscriptions/topic/news/d{i}", headers=h),
                partial(client.put, f"/v1/users/{u}/subscriptions/cycle/remind", json=CYCLE, headers=h),
                partial(client.post, f"/v1/users/{u}/devices", json={"token": ta, "os": "AOS"}, headers=h),
                partial(client.post, "/v1/devices/rotate", json={"old_token": ta, "new_token": ta2}, headers=h),
                partial(client.delete, f"/v1/users/{u}/devices/{ta}", headers=h),
            ]
        )
        assert all(s < 500 for s in statuses), statuses
        for name, s in zip(("topic", "cycle", "register", "rotate", "remove"), statuses, strict=True):
            outcomes[f"{name} {s}"] = outcomes.get(f"{name} {s}", 0) + 1
        devices = {d["token"] for d in client.get(f"/v1/users/{u}/devices", headers=h).json()["items"]}
        listed = {
            (s["method"], s.get("topic") or s["schedule"]["canonical"])
            for s in client.get(f"/v1/users/{u}/subscriptions", headers=h).json()["items"]
        }
        rows = st.user_rows(u, svc)
        for tok in (ta, ta2, keep):
            mine = {(r.method, r.target) for r in rows if r.device_token == tok}
            if tok in devices:  # a device that exists carries every subscription of its user
                assert mine == listed, (i, statuses, tok[:4], mine, listed)
            else:  # a device that does not exist has no row anywhere
                assert mine == set(), (i, statuses, tok[:4], mine)
                assert u not in st.token_holders(svc, tok)
                for topic in ("pre", f"d{i}"):
                    assert tok not in {
                        r.device_token for r in slot_rows(st, svc, news, TopicTarget(topic), "TOPIC", "news")
                    }
                assert tok not in {r.device_token for r in slot_rows(st, svc, remind, BUCKET, "CYCLE", "remind")}
    print("outcomes over", ITERATIONS, "iterations:", dict(sorted(outcomes.items())))


def test_pruning_removes_rows_mysql_no_longer_knows_a_holder_of(client, runtime, st, tenant):
    svc, h, news, _ = tenant
    tok = random_token("p")
    u = new_user(client, h, devices=[(tok, "AOS")])
    v = new_user(client, h, devices=[(tok, "AOS")])
    for user in (u, v):
        assert client.put(f"/v1/users/{user}/subscriptions/topic/news/p", headers=h).status_code == 201
    # A leftover: MySQL lost u's device row (a failure halfway, an old race), Cassandra kept its rows.
    with runtime.sessions.begin() as s:
        users_sql.delete_device(s, svc, u, tok)
    with runtime.sessions.begin() as s:
        subs.prune_token(s, st, svc, tok, "UNREGISTERED")
    assert [r for r in st.user_rows(u, svc) if r.device_token == tok] == []
    assert [r for r in st.user_rows(v, svc) if r.device_token == tok] == []
    assert st.token_holders(svc, tok) == []
    assert [r for r in slot_rows(st, svc, news, TopicTarget("p"), "TOPIC", "news") if r.device_token == tok] == []
    with runtime.sessions() as s:
        assert users_sql.holders_of_token(s, svc, tok) == []


def _leave_rows_of_a_deleted_user_and_a_removed_device(client, runtime, st, tenant):
    """Rows Cassandra keeps for a user and a device MySQL lost (as an old race or a failure halfway
    left them), plus a live user whose rows must survive; a stale due row of a bucket nobody uses."""
    svc, h, news, remind = tenant
    gone_tok, dead_tok, live_tok = random_token("g"), random_token("d"), random_token("l")
    gone = new_user(client, h, devices=[(gone_tok, "AOS")])
    live = new_user(client, h, devices=[(dead_tok, "AOS"), (live_tok, "IOS")])
    for user in (gone, live):
        assert client.put(f"/v1/users/{user}/subscriptions/topic/news/r", headers=h).status_code == 201
        assert client.put(f"/v1/users/{user}/subscriptions/cycle/remind", json=CYCLE, headers=h).status_code == 201
    with runtime.sessions.begin() as s:  # MySQL only: the cascade removes gone's device too
        s.execute(text("DELETE FROM `user` WHERE service = :s AND user_id = :u"), {"s": svc, "u": gone})
        users_sql.delete_device(s, svc, live, dead_tok)
    stale = CycleTarget("UTC", "SUN", 3, 33)
    st.run(
        st.mark_due(
            service=svc, type_="remind", notification_key=remind, timezone="UTC", days=["SUN"], hour=3, minute=33
        )
    )
    return svc, news, remind, gone, live, gone_tok, dead_tok, live_tok, stale


def _assert_only_live_rows_remain(st, svc, news, remind, gone, live, gone_tok, dead_tok, live_tok, stale):
    assert st.user_rows(gone, svc) == []
    assert {r.device_token for r in st.user_rows(live, svc)} == {"", live_tok}
    for tok in (gone_tok, dead_tok):
        assert st.token_holders(svc, tok) == []
    assert st.token_holders(svc, live_tok) == [live]
    topic = {r.device_token for r in slot_rows(st, svc, news, TopicTarget("r"), "TOPIC", "news")}
    cycle = {r.device_token for r in slot_rows(st, svc, remind, BUCKET, "CYCLE", "remind")}
    assert topic == {live_tok} == cycle
    due = {(d[0], d[1], d[2], d[3]) for d in st.scan_due() if d[4] == remind}
    assert ("UTC", "MON", 9, 0) in due and (stale.timezone, stale.day, stale.hour, stale.minute) not in due


def test_reconcile_removes_rows_of_users_and_devices_that_no_longer_exist(client, runtime, st, tenant):
    state = _leave_rows_of_a_deleted_user_and_a_removed_device(client, runtime, st, tenant)
    report = reconcile.reconcile(runtime, service=state[0])
    assert report["users_removed"] == 1 and report["device_rows_removed"] == 2, report
    assert report["due_buckets_removed"] >= 1, report
    _assert_only_live_rows_remain(st, *state)
    assert st.counters(state[0], "TOPIC", "news")[1] == 1  # the live user only


def test_scheduled_reconcile_batches_walk_the_index_and_clean_the_due_index(client, runtime, st, tenant):
    state = _leave_rows_of_a_deleted_user_and_a_removed_device(client, runtime, st, tenant)
    # The test's own partitions beyond those two users' (a fresh keyspace holds no others): eight in
    # all, so a batch of 5 rows ends at a partition boundary before the last one, wherever the
    # partitioner puts them.
    _, h, *_ = tenant
    for _ in range(6):
        more = new_user(client, h, devices=[(random_token("m"), "AOS")])
        assert client.put(f"/v1/users/{more}/subscriptions/topic/news/other", headers=h).status_code == 201
    st.set_reconcile_cursor(reconcile.WALK, None)
    # A small batch stops at the first partition end after 5 rows and leaves the cursor there. Which
    # partitions come first is the partitioner's choice among every earlier run's too (a partition
    # of 142 rows was there once), so the batch is compared with those partitions as read before it.
    settle_withdrawals.settle_pending(runtime)  # what the batch does first: nothing left to settle then
    rows, last = _first_partitions(st, 5)
    first = reconcile.reconcile_batch(runtime, max_rows=5)
    cursor = st.reconcile_cursor(reconcile.WALK)
    assert first["walk_done"] == 0 and cursor == last, (first, cursor, last)
    assert 5 <= first["index_rows_walked"] == rows, (first, rows)  # the partition it was in, finished
    # ... and the next runs go on from it (the keyspace may hold every earlier test's rows too)
    totals = dict(first)
    for _ in range(1_000):
        report = reconcile.reconcile_batch(runtime, max_rows=5_000)
        for k, v in report.items():
            totals[k] = totals.get(k, 0) + v
        if report["walk_done"]:
            break
    assert totals["walk_done"] == 1
    assert st.reconcile_cursor(reconcile.WALK) is None  # the next walk starts from the first partition
    assert totals["users_removed"] >= 1 and totals["device_rows_removed"] >= 2, totals
    _assert_only_live_rows_remain(st, *state)


def _first_partitions(st, budget: int) -> tuple[int, int | None]:
    """The rows of the index's first partitions in token order, up to the first partition end at or
    after ``budget`` rows, and the last one's token: what one reconcile batch of that budget walks."""
    seen, last = 0, None
    for token, _user, _svc, _row in st.scan_index_from(reconcile.MIN_TOKEN, 1000):
        if token != last:
            if seen >= budget:
                break
            last = token
        seen += 1
    return seen, last


def test_the_scheduler_runs_one_reconcile_batch_per_period_across_replicas(runtime):
    a = scheduler(runtime)
    b = scheduler(runtime, namespace=a.namespace)
    now = a.clock()
    results = [a.reconcile_periodic(now), b.reconcile_periodic(now)]
    assert sum(r is not None for r in results) == 1, results
    done = next(r for r in results if r is not None)
    assert {"index_rows_walked", "users_removed", "device_rows_removed", "due_buckets_removed"} <= set(done)
