"""Sparse targets cost what they hold (issue 19.3, docs/FANOUT.md "Occupancy"): a job walks only the
slots its topic or cycle bucket occupies (target_slots), packed into few tasks, and still reaches
every subscriber exactly once; a template whose occupancy is unknown is walked slot by slot; the
backfill and the prune keep that true. Real stores, real subscriptions through the API, a real
worker, the emulator.

The rules of this topic that need no server are in tests/unit/test_sparse_targets.py."""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from notee.core import clock
from notee.core.vocabulary import BLOCKS_PER_SLOT, SLOT_SIZE, CycleTarget, TopicTarget
from notee.scheduler.runner import Scheduler
from notee.store.cql.rows import target_name
from notee.usecases import occupancy
from notee.usecases.publish import task_plan
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import count_rows, emulator_runtime, run_worker_until_idle
from tests.support.registry import new_service, new_template, new_user, random_token

TYPE = "sparse"

SPREAD = 300_000  # numbers taken by other subscriptions of the type between two of ours: 10 slots apart


pytestmark = pytest.mark.tenant(credentials=True)


@pytest.fixture()
def tenant(tenant):
    """The family's tenant with a TOPIC template of type ``TYPE``."""
    tenant.template("TOPIC", TYPE, title="Hello {{name}}", body="Body")
    return tenant


def _subscribe(client, headers, user_id, topic):
    r = client.put(f"/v1/users/{user_id}/subscriptions/topic/{TYPE}/{topic}", headers=headers)
    assert r.status_code in (200, 201), r.text


def _spread_subscribers(client, runtime, service, headers, topic, n, users=None):
    """n one-device users subscribed to ``topic``, other subscriptions of the type taking SPREAD
    numbers before each: their rows land in n different slots; the counter ends past 3,000,000.
    Returns their tokens; ``users`` (a dict) gets token -> user_id."""
    tokens = []
    for _ in range(n):
        runtime.statements.allocate_numbers(service, "TOPIC", TYPE, SPREAD)
        token = random_token("sp")
        user = new_user(client, headers, devices=[(token, "AOS")])
        _subscribe(client, headers, user, topic)
        tokens.append(token)
        if users is not None:
            users[token] = user
    return tokens


def _publish(client, headers, topic):
    r = client.post(f"/v1/topics/{TYPE}/{topic}/publish", json={"variables": {"name": "K"}}, headers=headers)
    assert r.status_code == 202, r.text
    return r.json()["job_id"]


def _deliver(service):
    rt = emulator_runtime()
    try:
        run_worker_until_idle(rt, [service])
    finally:
        rt.close()


def _tasks(runtime, job_id):
    with runtime.engine.connect() as conn:
        return conn.execute(
            text("SELECT slot_from, slot_to, pages FROM fanout_task WHERE job_id = :j ORDER BY task_no"),
            {"j": job_id},
        ).all()


def _key(runtime, service, method="TOPIC"):
    with runtime.engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT notification_key FROM notification_template WHERE service = :s AND notification_method = :m"
                " AND notification_type = :t"
            ),
            {"s": service, "m": method, "t": TYPE},
        ).scalar_one()


def _now_us():
    return int(datetime.now(UTC).timestamp() * 1_000_000)


def test_a_sparse_topic_is_one_task_over_its_occupied_slots_and_reaches_exactly_its_subscribers(
    client, tenant, emulator
):
    service, headers = tenant
    runtime = client.app.state.runtime
    tokens = _spread_subscribers(client, runtime, service, headers, "few", 10)
    other = random_token("other")  # a subscriber of another topic of the type, in one of the same slots
    _subscribe(client, headers, new_user(client, headers, devices=[(other, "AOS")]), "many")
    top = runtime.statements.counters(service, "TOPIC", TYPE)[2] // SLOT_SIZE
    assert top >= 100  # the type's counter is past 3,000,000: a full walk would be 101+ tasks

    job_id = _publish(client, headers, "few")
    tasks = _tasks(runtime, job_id)
    assert len(tasks) <= 2, tasks
    job = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    occupied = job["target"]["slots"]
    assert len(occupied) == 10 and occupied == sorted(occupied) and occupied[-1] <= top
    _deliver(service)

    job = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert job["state"] == "done", job
    assert (job["targeted"], job["sent"], job["failed"]) == (10, 10, 0)
    assert deliveries_per_token(emulator, [*tokens, other], "fcm") == {t: 1 for t in tokens} | {other: 0}
    assert sum(t.pages for t in _tasks(runtime, job_id)) == 1  # the occupied slots' few rows: one page


def test_a_template_whose_occupancy_is_unknown_walks_every_slot_until_backfilled(client, tenant, emulator):
    service, headers = tenant
    runtime = client.app.state.runtime
    st = runtime.statements
    tokens = _spread_subscribers(client, runtime, service, headers, "old", 3)
    key = _key(runtime, service)
    # As if written before target_slots existed: no marker, no occupancy rows.
    st.forget_occupancy_known(key)
    st.delete_occupancy_target(_now_us(), key, "old")
    assert st.occupancy(key, TopicTarget("old")) is None
    top = st.counters(service, "TOPIC", TYPE)[2] // SLOT_SIZE

    first = _publish(client, headers, "old")
    assert len(_tasks(runtime, first)) == top + 1  # every slot, one per task: nothing skipped
    _deliver(service)
    assert deliveries_per_token(emulator, tokens, "fcm") == {t: 1 for t in tokens}

    report = occupancy.backfill(runtime, service=service)
    assert report["templates_marked"] == 1 and report["rows_noted"] == 3
    assert occupancy.backfill(runtime, service=service)["templates_marked"] == 0  # idempotent
    blocks = st.occupancy(key, TopicTarget("old"))
    assert blocks is not None and len(blocks) == 3
    second = _publish(client, headers, "old")
    assert len(_tasks(runtime, second)) == 1
    _deliver(service)
    assert deliveries_per_token(emulator, tokens, "fcm") == {t: 2 for t in tokens}  # once per publish


def test_subscribe_unsubscribe_resubscribe_then_publish_loses_and_duplicates_nothing(client, tenant, emulator):
    service, headers = tenant
    runtime = client.app.state.runtime
    users: dict[str, str] = {}
    tokens = _spread_subscribers(client, runtime, service, headers, "churn", 4, users)
    gone, back = tokens[0], tokens[1]
    for t in (gone, back):
        r = client.delete(f"/v1/users/{users[t]}/subscriptions/topic/{TYPE}/churn", headers=headers)
        assert r.status_code == 204
    runtime.statements.allocate_numbers(service, "TOPIC", TYPE, SPREAD)
    _subscribe(client, headers, users[back], "churn")  # a new number, in a new slot
    key = _key(runtime, service)
    blocks = runtime.statements.occupancy(key, TopicTarget("churn"))
    assert blocks is not None and len(blocks) == 5  # the emptied slots' entries stay (stale, harmless)

    job_id = _publish(client, headers, "churn")
    assert len(_tasks(runtime, job_id)) <= 2
    _deliver(service)
    job = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert (job["state"], job["targeted"], job["sent"]) == ("done", 3, 3)
    assert deliveries_per_token(emulator, tokens, "fcm") == {t: int(t != gone) for t in tokens}

    # The prune deletes the emptied blocks (nobody wrote them for a day: simulated by its clock) and
    # keeps the occupied ones; the next publish still reaches everyone once.
    day_later = _now_us() + 2 * occupancy.PRUNE_AFTER_S * 1_000_000
    report = occupancy.prune(runtime, max_rows=None, now_us=day_later)
    assert report["occupancy_empty_blocks_removed"] >= 2
    after = runtime.statements.occupancy(key, TopicTarget("churn"))
    held = {
        r.data["slot"]
        for t in tokens
        for r in runtime.statements.user_type_rows(users[t], service, "TOPIC", TYPE)
        if not r.is_user_level
    }
    assert after is not None and set(after) == held and len(held) == 3
    again = _publish(client, headers, "churn")
    _deliver(service)
    job = client.get(f"/v1/jobs/{again}", headers=headers).json()
    assert (job["state"], job["targeted"], job["sent"]) == ("done", 3, 3)
    assert deliveries_per_token(emulator, tokens, "fcm") == {t: 2 * int(t != gone) for t in tokens}


def test_the_prune_keeps_a_block_written_again_and_drops_a_deleted_templates_rows(client, tenant):
    service, headers = tenant
    runtime = client.app.state.runtime
    st = runtime.statements
    _spread_subscribers(client, runtime, service, headers, "keep", 1)
    key = _key(runtime, service)
    stale = (key, "keep", 99_999, 99_999 * BLOCKS_PER_SLOT)  # a block nobody holds rows in
    st.run([st.session.execute_async(st.occupancy_insert, stale)])
    # Checked as if a day had passed, but the block was written again after the check read its
    # writetime: the delete (USING TIMESTAMP <that writetime>) must not remove the newer write.
    day_later = _now_us() + 2 * occupancy.PRUNE_AFTER_S * 1_000_000
    candidates = [c for c in _candidates(runtime, key) if c[3] == stale[2]]
    st.run([st.session.execute_async(st.occupancy_insert, stale)])  # written again (a newer timestamp)
    assert occupancy._delete_empty(runtime, candidates) == 1  # found empty and deleted at the old writetime
    assert stale[2] in (st.occupancy(key, TopicTarget("keep")) or {})  # the newer write survived
    assert occupancy.prune(runtime, max_rows=None, now_us=day_later)["occupancy_empty_blocks_removed"] >= 1
    assert stale[2] not in (st.occupancy(key, TopicTarget("keep")) or {})

    r = client.delete(f"/v1/templates/TOPIC/{TYPE}", headers=headers)
    assert r.status_code == 204
    report = occupancy.prune(runtime, max_rows=None)
    assert report["occupancy_dead_rows_removed"] >= 1 and report["occupancy_markers_removed"] >= 1
    assert st.occupancy(key, TopicTarget("keep")) is None  # marker gone: as if unknown (never read: key dead)
    rows = list(st.session.execute(st.occupancy_select, (key, "keep")))
    assert rows == []


def test_the_marker_check_looks_templates_up_a_batch_at_a_time(runtime, store_tenant, monkeypatch):
    """The markers are every template ever created (every tenant's): the prune looks them up in
    MySQL KEYS_PER_LOOKUP at a time, never one query per key, and forgets only the dead ones."""
    from notee.store import templates_sql
    from tests.support.registry import make_template

    st = runtime.statements
    live = make_template(runtime, store_tenant, "TOPIC", "marked")
    dead = str(uuid.uuid4())  # a marker whose template is gone
    for key in (live, dead):
        st.mark_occupancy_known(key, "created")
    singles: list[str] = []
    batches: list[int] = []
    by_key, by_batch = templates_sql.get_template_by_key, templates_sql.methods_of_keys
    monkeypatch.setattr(templates_sql, "get_template_by_key", lambda s, k: singles.append(k) or by_key(s, k))
    monkeypatch.setattr(templates_sql, "methods_of_keys", lambda s, ks: batches.append(len(ks)) or by_batch(s, ks))
    cursor = st.reconcile_cursor(occupancy.WALK)
    try:
        report = occupancy.prune(runtime, max_rows=0)  # no walk: the marker check alone
    finally:
        st.set_reconcile_cursor(occupancy.WALK, cursor)  # the scheduled walk goes on where it was
    assert live not in singles and dead not in singles and singles == []
    assert batches and max(batches) <= occupancy.KEYS_PER_LOOKUP
    assert report["occupancy_markers_removed"] >= 1
    assert st.occupancy(live, TopicTarget("x")) == {} and st.occupancy(dead, TopicTarget("x")) is None


def _candidates(runtime, key, topic="keep"):
    """The prune's candidates of one target: its partition only (a scan from the first token read every
    tenant's rows, every earlier run's too)."""
    target = target_name(TopicTarget(topic))
    rows = runtime.cql.execute(
        f"SELECT slot, block, writetime(noted) AS w FROM {runtime.keyspaces.notification}.target_slots"
        " WHERE notification_key = %s AND target = %s",
        (key, target),
    )
    return [(key, "TOPIC", target, r.slot, r.block, r.w) for r in rows]


def test_a_sparse_cycle_bucket_is_one_task_and_reaches_exactly_its_subscribers(client, settings, service_id, emulator):
    headers = new_service(client, settings, service_id, credentials=True)
    new_template(client, headers, "CYCLE", TYPE)
    runtime = client.app.state.runtime
    minute = clock.floor_minute(datetime(2026, 12, 2, 13, 7, tzinfo=UTC))
    bucket = clock.due_buckets(minute, "Asia/Seoul")[0]
    other = CycleTarget(bucket.timezone, bucket.day, bucket.hour, (bucket.minute + 1) % 60)
    tokens, elsewhere = [], random_token("cy-other")
    for _i in range(6):
        runtime.statements.allocate_numbers(service_id, "CYCLE", TYPE, SPREAD * 2)
        token = random_token("cy")
        user = new_user(client, headers, devices=[(token, "AOS")])
        r = client.put(
            f"/v1/users/{user}/subscriptions/cycle/{TYPE}",
            json={"days": [bucket.day], "hour": bucket.hour, "minute": bucket.minute, "timezone": bucket.timezone},
            headers=headers,
        )
        assert r.status_code in (200, 201), r.text
        tokens.append(token)
    user = new_user(client, headers, devices=[(elsewhere, "AOS")])
    r = client.put(
        f"/v1/users/{user}/subscriptions/cycle/{TYPE}",
        json={"days": [other.day], "hour": other.hour, "minute": other.minute, "timezone": other.timezone},
        headers=headers,
    )
    assert r.status_code in (200, 201), r.text
    key = _key(runtime, service_id, "CYCLE")
    ranges, walked = task_plan(runtime.statements, service_id, "CYCLE", TYPE, key, bucket)
    assert len(ranges) == 1 and walked is not None and len(walked) == 6
    assert target_name(bucket) == f"Asia/Seoul {bucket.day} {bucket.hour:02d}:{bucket.minute:02d}"

    result = Scheduler(runtime, namespace="sparse-" + secrets.token_hex(6)).run_minute(minute, now=minute)
    with runtime.engine.connect() as conn:
        mine = [
            j
            for j in result.job_ids
            if conn.execute(text("SELECT service FROM fanout_job WHERE job_id = :j"), {"j": j}).scalar() == service_id
        ]
    assert len(mine) == 1
    assert count_rows(runtime, service_id) == (1, 1)
    _deliver(service_id)
    job = client.get(f"/v1/jobs/{mine[0]}", headers=headers).json()
    assert (job["state"], job["targeted"], job["sent"]) == ("done", 6, 6), job
    assert deliveries_per_token(emulator, [*tokens, elsewhere], "fcm") == {t: 1 for t in tokens} | {elsewhere: 0}
