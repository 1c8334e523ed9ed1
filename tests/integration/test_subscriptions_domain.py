"""Subscriptions at the domain level, against the real MariaDB and Cassandra."""

from __future__ import annotations

import gc
import itertools
import logging
import time
import uuid
import weakref

import pytest

from notee.core.errors import InvalidInput, NotFound
from notee.core.vocabulary import NO, ORIGIN, OS, TOKEN, USER, CycleTarget, Recipient, TopicTarget, device_of
from notee.domain import cycle_subscriptions, topic_subscriptions
from notee.domain import subscriptions as subs
from notee.domain.cycle_subscriptions import ScheduleRequest
from notee.store import templates_sql, users_sql
from notee.store.cassandra import PAGE_PROFILE, pages
from notee.store.cql.binder import BATCH_BYTES, MAX_UNIT_BYTES, row_bytes
from notee.store.cql.counters import NUMBER_RANGE, max_slot
from notee.store.cql.due import due_templates, timezones_in_use
from notee.store.cql.recipients import stream_recipients
from notee.store.cql.rows import SubscriptionRef
from tests.support.registry import make_device, make_service, make_template, make_user

_tok = itertools.count()


def token(prefix: str = "tok") -> str:
    return f"{prefix}-{next(_tok):06d}-" + "x" * 20


def call(runtime, fn, *args, **kwargs):
    """Run one subscriptions function the way its callers do: in a unit of work the caller commits."""
    with runtime.sessions.begin() as session:
        return fn(session, runtime.statements, *args, **kwargs)


@pytest.fixture()
def svc(store_tenant):
    """This module's name for the family's store-made tenant (tests/support/tenants.py)."""
    return store_tenant


def recipients(st, key, target, service, method, type_, fetch_size=100):
    out = []
    for slot in range(max_slot(st, service, method, type_) + 1):
        for page, _ in stream_recipients(st, key, target, slot, fetch_size):
            out += map(Recipient._make, page)
    return out


def test_topic_subscribe_materialises_per_device_and_is_idempotent(runtime, st, svc):
    key = make_template(runtime, svc, "TOPIC", "news")
    u = make_user(runtime, svc)
    t1, t2 = make_device(runtime, svc, u, token(), "AOS"), make_device(runtime, svc, u, token(), "IOS")

    assert call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", "sports")["status"] == "subscribed"
    got = recipients(st, key, TopicTarget("sports"), svc, "TOPIC", "news")
    assert sorted((r.device_token, r.device_os, r.user_id) for r in got) == sorted([(t1, "AOS", u), (t2, "IOS", u)])
    version, count, no = st.counters(svc, "TOPIC", "news")
    # The two devices numbered 1 and 2 from the range this process reserved (one counter increment).
    assert (count, no) == (1, NUMBER_RANGE)
    assert sorted(r.data["no"] for r in st.user_rows(u, svc) if not r.is_user_level) == [1, 2]

    assert (
        call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", "sports")["status"] == "already_subscribed"
    )
    assert st.counters(svc, "TOPIC", "news") == (version, 1, no)  # no number consumed, count unchanged
    assert sorted(r.data["no"] for r in st.user_rows(u, svc) if not r.is_user_level) == [1, 2]
    assert len(recipients(st, key, TopicTarget("sports"), svc, "TOPIC", "news")) == 2
    assert call(runtime, subs.list_subscriptions, svc, u) == [
        {
            "method": "TOPIC",
            "type": "news",
            "topic": "sports",
            "devices": 2,
            "registered_at": call(runtime, subs.list_subscriptions, svc, u)[0]["registered_at"],
        }
    ]


def test_two_topics_of_one_type_and_count_definition(runtime, st, svc):
    key = make_template(runtime, svc, "TOPIC", "news")
    u1, u2 = make_user(runtime, svc), make_user(runtime, svc)
    make_device(runtime, svc, u1, token())
    make_device(runtime, svc, u2, token())
    call(runtime, topic_subscriptions.subscribe_topic, svc, u1, "news", "a")
    call(runtime, topic_subscriptions.subscribe_topic, svc, u1, "news", "b")
    call(runtime, topic_subscriptions.subscribe_topic, svc, u2, "news", "a")
    # count = distinct users with at least one subscription of (service, TOPIC, news)
    assert st.counters(svc, "TOPIC", "news")[1] == 2
    assert {s["topic"] for s in call(runtime, subs.list_subscriptions, svc, u1)} == {"a", "b"}

    assert call(runtime, topic_subscriptions.unsubscribe_topic, svc, u1, "news", "a") is True
    assert st.counters(svc, "TOPIC", "news")[1] == 2  # u1 still has "b"
    assert [r.user_id for r in recipients(st, key, TopicTarget("a"), svc, "TOPIC", "news")] == [u2]
    assert call(runtime, topic_subscriptions.unsubscribe_topic, svc, u1, "news", "b") is True
    assert st.counters(svc, "TOPIC", "news")[1] == 1
    assert recipients(st, key, TopicTarget("b"), svc, "TOPIC", "news") == []
    assert call(runtime, topic_subscriptions.unsubscribe_topic, svc, u1, "news", "b") is False
    assert call(runtime, subs.list_subscriptions, svc, u1) == []
    assert st.user_rows(u1, svc) == []
    # `no` only grows: the three numbers handed out came from the process's one reserved range.
    assert st.counters(svc, "TOPIC", "news")[2] == NUMBER_RANGE


def test_single_subscribes_number_devices_from_a_process_range(runtime, st, svc):
    """take_numbers: threads share the process's reserved range (one counter increment per
    NUMBER_RANGE numbers), never hand out a number twice, and a direct allocation retires the range."""
    from concurrent.futures import ThreadPoolExecutor

    sizes = [1, 2, 3] * 40  # 240 numbers in 120 requests from 8 threads
    with ThreadPoolExecutor(8) as pool:
        taken = [no for got in pool.map(lambda n: st.take_numbers(svc, "TOPIC", "ranged", n), sizes) for no in got]
    assert sorted(taken) == list(range(1, sum(sizes) + 1))  # no gap, no number twice
    reserved = st.counters(svc, "TOPIC", "ranged")[2]
    assert reserved == 3 * NUMBER_RANGE  # three reservations for 240 numbers

    last = st.allocate_numbers(svc, "TOPIC", "ranged", 1000)
    assert last == reserved + 1000
    assert st.take_numbers(svc, "TOPIC", "ranged", 2) == [last + 1, last + 2]  # after the allocation
    big = st.take_numbers(svc, "TOPIC", "ranged", 3 * NUMBER_RANGE)  # more than a range: reserved whole
    assert big == list(range(last + 3, last + 3 + 3 * NUMBER_RANGE))


def test_a_group_of_topic_subscribes_answers_each_pair_as_it_would_alone(runtime, st, svc):
    """subscribe_topics (the API's grouped single subscribes, the bulk endpoint): one call, each pair
    answered as if the pairs ran one after the other; unknown users answer None and stop nobody;
    every counter moves once per subscription and once per user new to the type."""
    from notee.usecases import reconcile

    key = make_template(runtime, svc, "TOPIC", "news")
    a = make_user(runtime, svc)
    ta = make_device(runtime, svc, a, token())
    b = make_user(runtime, svc)  # no device: the user-level row alone
    c = make_user(runtime, svc)
    tc1, tc2 = make_device(runtime, svc, c, token(), "AOS"), make_device(runtime, svc, c, token(), "IOS")
    assert (
        call(runtime, topic_subscriptions.subscribe_topic, svc, c, "news", "old")["status"] == "subscribed"
    )  # c: in the type
    unknown = str(uuid.uuid4())
    wanted = [(a, "x"), (b, "x"), (unknown, "x"), (a, "x"), (a, "y"), (c, "x"), (c, "old"), (b, "x")]
    with runtime.engine.connect() as db:
        got = topic_subscriptions.subscribe_topics(db, st, svc, "news", wanted)
    assert got == [
        {"status": "subscribed", "devices": 1},
        {"status": "subscribed", "devices": 0},
        None,
        {"status": "already_subscribed", "devices": 1},  # the same pair again sees the first one's rows
        {"status": "subscribed", "devices": 1},
        {"status": "subscribed", "devices": 2},
        {"status": "already_subscribed", "devices": 2},
        {"status": "already_subscribed", "devices": 0},
    ]
    assert st.counters(svc, "TOPIC", "news")[1] == 3  # a and b new to the type (a once, for two topics), c before
    assert {t: n for _, t, n in st.topic_subscribers(svc, "news")} == {"old": 1, "x": 3, "y": 1}
    assert sorted(r.device_token for r in recipients(st, key, TopicTarget("x"), svc, "TOPIC", "news")) == sorted(
        [ta, tc1, tc2]
    )
    assert [r.device_token for r in recipients(st, key, TopicTarget("y"), svc, "TOPIC", "news")] == [ta]
    assert sorted((r.target, r.device_token) for r in st.user_rows(b, svc)) == [("x", "")]
    # Asked again, alone, each pair is already there; and reconcile finds nothing to repair.
    assert call(runtime, topic_subscriptions.subscribe_topic, svc, a, "news", "y") == {
        "status": "already_subscribed",
        "devices": 1,
    }
    reconcile.reconcile(runtime, service=svc)
    assert st.counters(svc, "TOPIC", "news")[1] == 3
    assert {t: n for _, t, n in st.topic_subscribers(svc, "news")} == {"old": 1, "x": 3, "y": 1}


def test_a_group_whose_template_is_missing_or_of_the_other_method_fails_whole_and_writes_nothing(runtime, st, svc):
    make_template(runtime, svc, "CYCLE", "remind")
    u = make_user(runtime, svc)
    make_device(runtime, svc, u, token())
    for type_, error in (("remind", InvalidInput), ("nothing", NotFound)):
        with runtime.engine.connect() as db, pytest.raises(error):
            topic_subscriptions.subscribe_topics(db, st, svc, type_, [(u, "x"), (str(uuid.uuid4()), "x")])
    assert st.user_rows(u, svc) == []


def test_the_subscribe_statements_lock_until_the_connection_returns_and_fail_like_sqlalchemys(runtime, svc):
    """subscription_sql runs the topic subscribe's statements on the DBAPI cursor: the users' locks
    still last until the connection goes back to the pool, and a lost connection is still
    SQLAlchemy's OperationalError (the API's 503), invalidates the connection and is counted."""
    from prometheus_client import REGISTRY
    from sqlalchemy import exc as sa_exc
    from sqlalchemy import text

    from notee.store import subscription_sql as subsql

    u = make_user(runtime, svc)
    probe = "SELECT user_id FROM `user` WHERE service = :s AND user_id = :u FOR UPDATE NOWAIT"

    def locked_elsewhere() -> bool:
        with runtime.engine.connect() as other:
            try:
                other.execute(text(probe), {"s": svc, "u": u}).all()
            except sa_exc.OperationalError:
                return True
            return False

    with runtime.engine.connect() as db:
        assert subsql.lock_users_zones(db, svc, [u, str(uuid.uuid4())], exclusive=True) == {u: ""}
        assert list(subsql.subscribe_context(db, svc, "news", [u]).devices) == [u]
        assert locked_elsewhere()
    assert not locked_elsewhere()  # the pool's reset on return rolled the transaction back

    def outages() -> float:
        return REGISTRY.get_sample_value("notee_store_errors_total", {"store": "mysql", "kind": "outage"}) or 0.0

    before = outages()
    with runtime.engine.connect() as db:
        ((conn_id,),) = subsql._driver_rows(db, "SELECT CONNECTION_ID()", {})
        with runtime.engine.connect() as killer:
            killer.exec_driver_sql(f"KILL {int(conn_id)}")
        with pytest.raises(sa_exc.OperationalError) as err:
            subsql.lock_users_zones(db, svc, [u], exclusive=True)
        assert err.value.connection_invalidated and db.invalidated
    assert outages() == before + 1
    with runtime.engine.connect() as db:  # the pool hands out a working connection again
        assert subsql.lock_users_zones(db, svc, [u]) == {u: ""}


def test_cycle_default_timezone_and_resubscribe_replaces(runtime, st, svc):
    key = make_template(runtime, svc, "CYCLE", "remind")
    u = make_user(runtime, svc)
    t = make_device(runtime, svc, u, token())
    r = call(runtime, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["WED", "MON"], 22, 0))
    assert r["schedule"] == "MON,WED 22:00 Asia/Seoul"
    for day in ("MON", "WED"):
        assert [
            x.device_token for x in recipients(st, key, CycleTarget("Asia/Seoul", day, 22, 0), svc, "CYCLE", "remind")
        ] == [t]
        assert (svc, key, "remind") in due_templates(st, "Asia/Seoul", day, 22, 0)
    assert "Asia/Seoul" in timezones_in_use(st)
    assert (
        call(runtime, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["MON", "WED"], 22, 0))[
            "status"
        ]
        == "already_subscribed"
    )

    call(
        runtime, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["FRI"], 7, 30, "Europe/Berlin")
    )
    for day in ("MON", "WED"):
        assert recipients(st, key, CycleTarget("Asia/Seoul", day, 22, 0), svc, "CYCLE", "remind") == []
    assert [
        x.user_id for x in recipients(st, key, CycleTarget("Europe/Berlin", "FRI", 7, 30), svc, "CYCLE", "remind")
    ] == [u]
    listed = call(runtime, subs.list_subscriptions, svc, u)
    assert [s["schedule"]["canonical"] for s in listed] == ["FRI 07:30 Europe/Berlin"]
    assert st.counters(svc, "CYCLE", "remind")[1] == 1
    assert len([r for r in st.user_rows(u, svc)]) == 2  # user-level row + one device row

    assert call(runtime, cycle_subscriptions.unsubscribe_cycle, svc, u, "remind") is True
    assert recipients(st, key, CycleTarget("Europe/Berlin", "FRI", 7, 30), svc, "CYCLE", "remind") == []
    assert st.user_rows(u, svc) == [] and st.counters(svc, "CYCLE", "remind")[1] == 0


def test_cycle_uses_service_timezone(runtime, st, service_id):
    svc = make_service(runtime, service_id, tz="America/New_York")
    make_template(runtime, svc, "CYCLE", "r")
    u = make_user(runtime, svc)
    assert (
        call(runtime, cycle_subscriptions.subscribe_cycle, svc, u, "r", ScheduleRequest(["SUN"], 9, 0))["schedule"]
        == "SUN 09:00 America/New_York"
    )


BAD = [
    (
        "topic too long",
        lambda rt, svc, u: call(rt, topic_subscriptions.subscribe_topic, svc, u, "news", "x" * 51),
        InvalidInput,
    ),
    (
        "topic control char",
        lambda rt, svc, u: call(rt, topic_subscriptions.subscribe_topic, svc, u, "news", "a\x07b"),
        InvalidInput,
    ),
    (
        "hour 24",
        lambda rt, svc, u: call(
            rt, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["MON"], 24, 0)
        ),
        InvalidInput,
    ),
    (
        "minute 60",
        lambda rt, svc, u: call(
            rt, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["MON"], 0, 60)
        ),
        InvalidInput,
    ),
    (
        "unknown day",
        lambda rt, svc, u: call(
            rt, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["FUN"], 0, 0)
        ),
        InvalidInput,
    ),
    (
        "unknown tz",
        lambda rt, svc, u: call(
            rt, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["MON"], 0, 0, "Mars/X")
        ),
        InvalidInput,
    ),
    (
        "topic on cycle template",
        lambda rt, svc, u: call(rt, topic_subscriptions.subscribe_topic, svc, u, "remind", "t"),
        InvalidInput,
    ),
    (
        "cycle on topic template",
        lambda rt, svc, u: call(
            rt, cycle_subscriptions.subscribe_cycle, svc, u, "news", ScheduleRequest(["MON"], 0, 0)
        ),
        InvalidInput,
    ),
    (
        "unknown template",
        lambda rt, svc, u: call(rt, topic_subscriptions.subscribe_topic, svc, u, "nope", "t"),
        NotFound,
    ),
    (
        "unknown user",
        lambda rt, svc, u: call(rt, topic_subscriptions.subscribe_topic, svc, "0" * 36, "news", "t"),
        NotFound,
    ),
    (
        "bulk too many",
        lambda rt, svc, u: call(rt, topic_subscriptions.bulk_subscribe_topic, svc, "news", "t", [u] * 1001),
        InvalidInput,
    ),
    (
        "bulk bad topic",
        lambda rt, svc, u: call(rt, topic_subscriptions.bulk_subscribe_topic, svc, "news", "x" * 51, [u]),
        InvalidInput,
    ),
]


@pytest.mark.parametrize("name,call,error", BAD, ids=[b[0] for b in BAD])
def test_bad_input_writes_nothing(runtime, st, svc, name, call, error):
    make_template(runtime, svc, "TOPIC", "news")
    make_template(runtime, svc, "CYCLE", "remind")
    u = make_user(runtime, svc)
    make_device(runtime, svc, u, token())
    with pytest.raises(error):
        call(runtime, svc, u)
    assert st.user_rows(u, svc) == []
    for method, type_ in (("TOPIC", "news"), ("CYCLE", "remind"), ("TOPIC", "nope")):
        assert st.counters(svc, method, type_) == (0, 0, 0)
    with runtime.sessions() as s:
        assert len(users_sql.list_devices(s, svc, u)) == 1


def test_slot_boundary_streams_every_recipient_once(runtime, st, svc):
    key = make_template(runtime, svc, "TOPIC", "big")
    st.allocate_numbers(svc, "TOPIC", "big", 29_990)  # start the `no` counter near the first slot boundary
    users = [make_user(runtime, svc) for _ in range(25)]
    tokens = {make_device(runtime, svc, u, token("slot")): u for u in users}
    results = call(runtime, topic_subscriptions.bulk_subscribe_topic, svc, "big", "all", users)
    assert {r["status"] for r in results} == {"subscribed"}
    assert max_slot(st, svc, "TOPIC", "big") == 1

    seen, per_slot = [], {}
    for slot in (0, 1):
        pages = list(stream_recipients(st, key, TopicTarget("all"), slot, fetch_size=4))
        assert all(len(p) <= 4 for p, _ in pages) and pages[-1][1] is None
        per_slot[slot] = [r[TOKEN] for p, _ in pages for r in p]
        seen += per_slot[slot]
    assert sorted(seen) == sorted(tokens) and len(seen) == len(set(seen))
    assert len(per_slot[0]) == 9 and len(per_slot[1]) == 16  # nos 29991..29999 | 30000..30015

    # Resume from a checkpointed paging state: the rest of the slot, nothing twice.
    gen = stream_recipients(st, key, TopicTarget("all"), 1, fetch_size=6)
    first, state = next(gen)
    rest = [r[TOKEN] for p, _ in stream_recipients(st, key, TopicTarget("all"), 1, 6, state) for r in p]
    assert sorted([r[TOKEN] for r in first] + rest) == sorted(per_slot[1])


def test_page_statements_select_the_recipient_fields_in_order(st):
    """stream_recipients hands on the driver's rows, read by position (``RecipientRow``, TOKEN ...
    ORIGIN): a column added, dropped or moved in a page statement must fail here."""
    for stmt in (st.topic_page, st.topic_page_after, st.topic_page_zone, st.topic_page_zone_after):
        assert tuple(column[2] for column in stmt.result_metadata) == Recipient._fields
    for stmt in (st.cycle_page, st.cycle_page_after):
        assert tuple(column[2] for column in stmt.result_metadata) == Recipient._fields
    names = ("device_token", "device_os", "user_id", "no", "origin")
    assert tuple(map(Recipient._fields.index, names)) == (TOKEN, OS, USER, NO, ORIGIN)
    r = Recipient("tok", "AOS", "u1", 7, "first")
    assert (r[TOKEN], r[OS], r[USER], r[NO], r[ORIGIN]) == ("tok", "AOS", "u1", 7, "first")
    assert device_of(r) == r.device == "first" and device_of(("tok", "AOS", "u1", 7, None)) == "tok"


def test_a_read_page_is_freed_without_the_garbage_collector(runtime, st, svc):
    """Each page is its own request (``cassandra.pages``); the driver's future of that request and
    its timeout timer point at each other, so unless ``pages`` cuts that cycle a page read stays in
    memory until the cyclic garbage collector runs (one collection per page: docs/BENCHMARKS.md,
    slot walk). With the collector off, the page's future must be gone once its reader lets go."""
    key = make_template(runtime, svc, "TOPIC", "news")
    users = [make_user(runtime, svc) for _ in range(3)]
    for u in users:
        make_device(runtime, svc, u, token("gc"))
    call(runtime, topic_subscriptions.bulk_subscribe_topic, svc, "news", "gc", users)
    stmt = st.topic_page.bind((0, key, "gc"))
    stmt.fetch_size = 2
    gc.collect()
    gc.disable()
    try:
        futures, rows = [], 0
        for result in pages(st.session, stmt, None, PAGE_PROFILE):
            futures.append(weakref.ref(result.response_future))
            rows += len(result.current_rows)
            del result
        assert rows == 3 and len(futures) == 2
        # The driver's I/O thread may still be finishing the last page's callback (its frame holds
        # the future for a moment); a reference cycle would keep it alive for good.
        deadline = time.monotonic() + 5
        while any(f() is not None for f in futures) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [f() for f in futures] == [None, None], "a page's future outlived its reader: a reference cycle"
    finally:
        gc.enable()
    # The cut does not take the timeout away: a page still waits at most the request timeout
    # (tests/integration/test_cassandra_page_timeout.py).


def test_bulk_reports_per_user(runtime, st, svc):
    make_template(runtime, svc, "TOPIC", "news")
    users = [make_user(runtime, svc) for _ in range(5)]
    for u in users[:4]:
        make_device(runtime, svc, u, token())
    call(runtime, topic_subscriptions.subscribe_topic, svc, users[0], "news", "t")
    unknown = "f" * 36
    res = call(runtime, topic_subscriptions.bulk_subscribe_topic, svc, "news", "t", [*users, unknown, users[1]])
    assert [r["status"] for r in res] == [
        "already_subscribed",
        "subscribed",
        "subscribed",
        "subscribed",
        "subscribed",
        "not_found",
    ]
    assert st.counters(svc, "TOPIC", "news")[1] == 5
    assert call(runtime, subs.list_subscriptions, svc, users[4])[0]["devices"] == 0  # no device yet: user-level only


def test_device_lifecycle(runtime, st, svc, caplog):
    tkey = make_template(runtime, svc, "TOPIC", "news")
    ckey = make_template(runtime, svc, "CYCLE", "remind")
    u = make_user(runtime, svc)
    call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", "t")
    call(runtime, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["TUE"], 8, 0, "UTC"))

    def topic():
        return sorted(r.device_token for r in recipients(st, tkey, TopicTarget("t"), svc, "TOPIC", "news"))

    def cycle():
        return sorted(
            r.device_token for r in recipients(st, ckey, CycleTarget("UTC", "TUE", 8, 0), svc, "CYCLE", "remind")
        )

    assert topic() == [] == cycle()

    # a new device gets the user's subscriptions
    d1 = make_device(runtime, svc, u, token("a"), "IOS")
    call(runtime, subs.on_device_added, svc, u, d1, "IOS")
    call(runtime, subs.on_device_added, svc, u, d1, "IOS")  # idempotent
    assert topic() == [d1] == cycle()
    d2 = make_device(runtime, svc, u, token("b"))
    call(runtime, subs.on_device_added, svc, u, d2, "AOS")
    assert topic() == sorted([d1, d2]) == cycle()

    # removal
    subs.on_device_removed(runtime.statements, svc, u, d2)
    assert topic() == [d1] == cycle()

    # rotation old -> new (registry rewrote MySQL first)
    new = token("rot")
    with runtime.sessions.begin() as s:
        from datetime import datetime

        users_sql.rotate_token(s, service=svc, old=d1, new=new, now=datetime.utcnow())
    call(runtime, subs.on_token_rotated, svc, d1, new)
    assert topic() == [new] == cycle()
    assert [r.device_os for r in recipients(st, tkey, TopicTarget("t"), svc, "TOPIC", "news")] == ["IOS"]

    # prune: removed from both stores, one log line saying why
    other = make_user(runtime, svc)
    make_device(runtime, svc, other, new, "IOS")  # a token shared by two users
    call(runtime, topic_subscriptions.subscribe_topic, svc, other, "news", "t")
    assert topic() == [new, new]
    with caplog.at_level(logging.INFO, logger="notee.domain.subscriptions"):
        call(runtime, subs.prune_token, svc, new, "Unregistered")
    lines = [r.getMessage() for r in caplog.records if "pruned" in r.getMessage()]
    assert len(lines) == 1 and "Unregistered" in lines[0] and new not in lines[0]
    assert topic() == [] == cycle()
    with runtime.sessions() as s:
        assert users_sql.holders_of_token(s, svc, new) == []
    assert len(call(runtime, subs.list_subscriptions, svc, u)) == 2  # the user's subscriptions stay


def test_user_deleted_removes_everything(runtime, st, svc):
    tkey = make_template(runtime, svc, "TOPIC", "news")
    make_template(runtime, svc, "CYCLE", "remind")
    u, keep = make_user(runtime, svc), make_user(runtime, svc)
    make_device(runtime, svc, u, token())
    make_device(runtime, svc, keep, token())
    for x in (u, keep):
        call(runtime, topic_subscriptions.subscribe_topic, svc, x, "news", "t")
        call(runtime, topic_subscriptions.subscribe_topic, svc, x, "news", "t2")
    call(runtime, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["MON"], 1, 2, "UTC"))
    call(runtime, subs.on_user_deleted, svc, u)
    assert st.user_rows(u, svc) == []
    assert [r.user_id for r in recipients(st, tkey, TopicTarget("t"), svc, "TOPIC", "news")] == [keep]
    assert st.counters(svc, "TOPIC", "news")[1] == 1
    assert st.counters(svc, "CYCLE", "remind")[1] == 0


def test_a_user_whose_schedule_names_a_zone_this_host_does_not_know_can_be_deleted(runtime, st, svc, monkeypatch):
    """Subscribed while the zone was known; then this host's tz database lacks it (older tzdata, a
    withdrawn zone): listing and deleting the user still work, and the slot rows go (issue 14, item 5)."""
    from notee.domain import rules

    key = make_template(runtime, svc, "CYCLE", "remind")
    u = make_user(runtime, svc)
    t = make_device(runtime, svc, u, token())
    call(
        runtime, cycle_subscriptions.subscribe_cycle, svc, u, "remind", ScheduleRequest(["TUE"], 6, 45, "America/Nuuk")
    )
    bucket = CycleTarget("America/Nuuk", "TUE", 6, 45)
    assert [r.device_token for r in recipients(st, key, bucket, svc, "CYCLE", "remind")] == [t]
    known = rules._zones()
    monkeypatch.setattr(rules, "_zones", lambda: known - {"America/Nuuk"})  # this host's tzdata lacks it now
    assert not rules.is_portable_timezone("America/Nuuk")

    [listed] = call(runtime, subs.list_subscriptions, svc, u)
    assert listed["schedule"]["canonical"] == "TUE 06:45 America/Nuuk"
    call(runtime, subs.on_user_deleted, svc, u)
    assert st.user_rows(u, svc) == []
    assert recipients(st, key, bucket, svc, "CYCLE", "remind") == []
    assert st.counters(svc, "CYCLE", "remind")[1] == 0


def test_template_deleted_disables_then_reconcile_removes(runtime, st, svc):
    from notee.usecases import reconcile

    key = make_template(runtime, svc, "TOPIC", "news")
    u = make_user(runtime, svc)
    make_device(runtime, svc, u, token())
    call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", "t")
    with runtime.sessions.begin() as s:
        templates_sql.delete_template(s, svc, "TOPIC", "news")
    subs.on_template_deleted(runtime.statements, svc, "TOPIC", "news", key)
    assert call(runtime, subs.list_subscriptions, svc, u) == []
    assert st.counters(svc, "TOPIC", "news")[1] == 0

    # A new template of the same type starts fresh; the dead rows are cleaned on touch.
    key2 = make_template(runtime, svc, "TOPIC", "news")
    assert call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", "t")["status"] == "subscribed"
    assert st.counters(svc, "TOPIC", "news")[1] == 1
    assert recipients(st, key, TopicTarget("t"), svc, "TOPIC", "news") == []
    assert len(recipients(st, key2, TopicTarget("t"), svc, "TOPIC", "news")) == 1

    # Deleted again, then reconcile deletes the dead rows everywhere.
    with runtime.sessions.begin() as s:
        templates_sql.delete_template(s, svc, "TOPIC", "news")
    subs.on_template_deleted(runtime.statements, svc, "TOPIC", "news", key2)
    report = reconcile.reconcile(runtime, service=svc)
    assert report["dead_rows_removed"] == 2
    assert st.user_rows(u, svc) == []
    assert recipients(st, key2, TopicTarget("t"), svc, "TOPIC", "news") == []


def test_reconcile_fixes_count_drift(runtime, st, svc):
    from notee.usecases import reconcile

    make_template(runtime, svc, "TOPIC", "news")
    ckey = make_template(runtime, svc, "CYCLE", "remind")
    users = [make_user(runtime, svc) for _ in range(3)]
    for u in users:
        call(runtime, topic_subscriptions.subscribe_topic, svc, u, "news", "a")
    call(runtime, topic_subscriptions.subscribe_topic, svc, users[0], "news", "b")
    call(
        runtime,
        cycle_subscriptions.subscribe_cycle,
        svc,
        users[0],
        "remind",
        ScheduleRequest(["SAT"], 3, 4, "Pacific/Auckland"),
    )
    st.add_count(svc, "TOPIC", "news", 7)  # drift, e.g. a timed-out increment that did land
    st.add_count(svc, "CYCLE", "remind", -1)
    report = reconcile.reconcile(runtime, service=svc)
    assert st.counters(svc, "TOPIC", "news")[1] == 3
    assert st.counters(svc, "CYCLE", "remind")[1] == 1
    assert report["counts_fixed"] == 2
    assert (svc, ckey, "remind") in due_templates(st, "Pacific/Auckland", "SAT", 3, 4)

    # After unsubscribing, reconcile drops the bucket from the due index.
    call(runtime, cycle_subscriptions.unsubscribe_cycle, svc, users[0], "remind")
    reconcile.reconcile(runtime, service=svc)
    assert (svc, ckey, "remind") not in due_templates(st, "Pacific/Auckland", "SAT", 3, 4)


def _fcm_like(prefix: str) -> str:
    return token(prefix) + "y" * 140  # FCM tokens are ~163 characters: rows heavy enough to split batches


def test_a_user_with_many_devices_is_subscribed_whole(runtime, st, svc):
    """A user whose rows outweigh one logged batch (MAX_UNIT_BYTES) is written in several batches, the
    user-level row after its device rows; every device gets exactly one slot row and one index row."""
    key = make_template(runtime, svc, "TOPIC", "news")
    many, few = make_user(runtime, svc), make_user(runtime, svc)
    tokens = [make_device(runtime, svc, many, _fcm_like("many")) for _ in range(70)]
    few_token = make_device(runtime, svc, few, _fcm_like("few"))
    rows = st.topic_subscription_rows(
        SubscriptionRef(svc, many, "news", key, "t", 1),
        [(i, t, "AOS") for i, t in enumerate(tokens)],
        with_user_level=True,
        zone="",
    )
    assert sum(row_bytes(r) for r in rows) > MAX_UNIT_BYTES  # the case under test

    assert call(runtime, topic_subscriptions.subscribe_topic, svc, many, "news", "t") == {
        "status": "subscribed",
        "devices": 70,
    }
    res = call(runtime, topic_subscriptions.bulk_subscribe_topic, svc, "news", "u", [many, few])
    assert [r["status"] for r in res] == ["subscribed", "subscribed"]
    for topic, expected in (("t", tokens), ("u", [*tokens, few_token])):
        got = [r.device_token for r in recipients(st, key, TopicTarget(topic), svc, "TOPIC", "news")]
        assert sorted(got) == sorted(expected)
    listed = {s["topic"]: s["devices"] for s in call(runtime, subs.list_subscriptions, svc, many)}
    assert listed == {"t": 70, "u": 70}
    assert st.counters(svc, "TOPIC", "news")[1] == 2  # each user counted once for the type


def test_bulk_users_share_logged_batches_and_are_counted_once(runtime, st, svc):
    """Many one-device users share logged batches (write_together); each gets its rows and its
    user-level row, nothing twice, and a second identical request changes nothing."""
    key = make_template(runtime, svc, "TOPIC", "news")
    users = [make_user(runtime, svc) for _ in range(120)]
    tokens = {make_device(runtime, svc, u, _fcm_like("bulk")): u for u in users}
    units = [
        st.topic_subscription_rows(
            SubscriptionRef(svc, u, "news", key, "t", 1),
            [(1, t, "AOS")],
            with_user_level=True,
            zone="",
        )
        for t, u in tokens.items()
    ]
    unit_bytes = sum(row_bytes(r) for r in units[0])
    assert 2 * unit_bytes <= BATCH_BYTES  # so users do share batches here

    assert {r["status"] for r in call(runtime, topic_subscriptions.bulk_subscribe_topic, svc, "news", "t", users)} == {
        "subscribed"
    }
    got = [(r.device_token, r.user_id) for r in recipients(st, key, TopicTarget("t"), svc, "TOPIC", "news")]
    assert sorted(got) == sorted(tokens.items())
    _, count, no = st.counters(svc, "TOPIC", "news")
    assert (count, no) == (120, 120)
    for u in users[:5]:
        assert call(runtime, subs.list_subscriptions, svc, u)[0]["devices"] == 1

    again = call(runtime, topic_subscriptions.bulk_subscribe_topic, svc, "news", "t", users)
    assert {r["status"] for r in again} == {"already_subscribed"}
    assert st.counters(svc, "TOPIC", "news")[1:] == (120, 120)
