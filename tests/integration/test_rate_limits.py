"""Per-tenant rate limits (issue 15, item 2): set by the admin per service and class, 429 with
Retry-After in the error format, one bucket per (service, class) in MySQL shared by every API process.

The rules of this topic that need no server are in tests/unit/test_rate_limits.py."""

from __future__ import annotations

import threading
import time

import httpx
from sqlalchemy import event

from notee.core.errors import RateLimited
from notee.domain import ratelimit
from notee.store import ratelimit_sql
from tests.support.registry import admin_headers, new_template
from tests.support.stores import snapshot


def _set(client, settings, service: str, klass: str, rate: float, burst: int) -> httpx.Response:
    return client.put(
        f"/v1/admin/services/{service}/rate-limits/{klass}",
        json={"rate": rate, "burst": burst},
        headers=admin_headers(settings),
    )


def test_admin_sets_gets_and_resets_limits(client, settings, make_tenant):
    service, key = make_tenant()
    admin = admin_headers(settings)
    r = client.get(f"/v1/admin/services/{service}/rate-limits", headers=admin)
    assert r.status_code == 200
    items = {i["class"]: i for i in r.json()["items"]}
    assert set(items) == {"publish", "send", "write", "read", "receipt"}
    assert items["publish"] == {
        "class": "publish",
        "rate": settings.rate_limit_publish_rate,
        "burst": settings.rate_limit_publish_burst,
        "custom": False,
    }
    r = _set(client, settings, service, "publish", 2.5, 7)
    assert r.status_code == 200 and r.json() == {"class": "publish", "rate": 2.5, "burst": 7, "custom": True}
    items = {
        i["class"]: i for i in client.get(f"/v1/admin/services/{service}/rate-limits", headers=admin).json()["items"]
    }
    assert items["publish"]["custom"] and not items["read"]["custom"]
    assert client.delete(f"/v1/admin/services/{service}/rate-limits/publish", headers=admin).status_code == 204
    items = {
        i["class"]: i for i in client.get(f"/v1/admin/services/{service}/rate-limits", headers=admin).json()["items"]
    }
    assert items["publish"]["custom"] is False and items["publish"]["rate"] == settings.rate_limit_publish_rate
    # Only the admin, only known services, classes and sane values.
    assert client.get(f"/v1/admin/services/{service}/rate-limits", headers=key).status_code == 401
    assert client.get("/v1/admin/services/NOSUCH_SVC/rate-limits", headers=admin).status_code == 404
    for klass, body in [
        ("bogus", {"rate": 1, "burst": 1}),
        ("read", {"rate": 0, "burst": 1}),
        ("read", {"rate": 1, "burst": 0}),
        ("read", {"rate": "5", "burst": 1}),
        ("read", {"rate": 1, "burst": 2.5}),
        ("read", {"rate": 1, "burst": True}),
        ("read", {"rate": 1}),
        ("read", {"rate": 1, "burst": 1, "x": 1}),
    ]:
        r = client.put(f"/v1/admin/services/{service}/rate-limits/{klass}", json=body, headers=admin)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", (klass, body, r.text)


def test_receipts_have_a_class_of_their_own_and_never_take_the_write_budget(client, settings, make_tenant):
    """Phones answering a big push post receipts with the app's client key: they are limited as
    `receipt`, so they neither use up the backend's `write` budget nor wait behind it."""
    service, key = make_tenant()
    r = client.post(
        f"/v1/admin/services/{service}/api-keys",
        json={"label": "app", "kind": "client"},
        headers=admin_headers(settings),
    )
    assert r.status_code == 201, r.text
    app = {"Authorization": f"Bearer {r.json()['api_key']}"}
    assert _set(client, settings, service, "write", 0.01, 1).status_code == 200
    assert _set(client, settings, service, "receipt", 0.01, 2).status_code == 200
    body = {"events": [{"notification_id": "not-an-id", "event": "delivered", "at": "2026-12-05T09:00:00Z"}]}
    got = [client.post("/v1/receipts", json=body, headers=app) for _ in range(3)]
    assert [r.status_code for r in got] == [200, 200, 429], [r.text for r in got]
    assert got[2].json()["error"]["details"][0]["ctx"]["class"] == "receipt"
    writes = [client.put(f"/v1/templates/SINGLE/w{i}", json={"title": "t", "body": "b"}, headers=key) for i in range(2)]
    assert [r.status_code for r in writes] == [201, 429]  # the receipts took none of its one token
    assert writes[1].json()["error"]["details"][0]["ctx"]["class"] == "write"


def test_used_up_limit_answers_429_with_retry_after_and_other_classes_and_tenants_go_on(client, settings, make_tenant):
    service, key = make_tenant()
    _, other_key = make_tenant()
    assert _set(client, settings, service, "read", 0.01, 3).status_code == 200
    got = [client.get("/v1/templates", headers=key) for _ in range(5)]
    assert [r.status_code for r in got] == [200, 200, 200, 429, 429]
    refused = got[3]
    assert refused.json()["error"]["code"] == "rate_limited"
    assert set(refused.json()["error"]) == {"code", "message", "details"}
    detail = refused.json()["error"]["details"][0]
    assert detail["type"] == "rate_limited" and detail["ctx"] == {"class": "read", "rate": 0.01, "burst": 3}
    assert 1 <= int(refused.headers["Retry-After"]) <= 100  # one token at 0.01/s: at most 100 s
    assert client.put("/v1/users/rl-user", json={}, headers=key).status_code == 201  # write: its own bucket
    assert client.get("/v1/templates", headers=other_key).status_code == 200  # another tenant: its own
    assert _set(client, settings, service, "read", 1000, 10).status_code == 200  # raised: back at once
    assert client.get("/v1/templates", headers=key).status_code == 200


def test_a_refused_publish_writes_nothing(client, runtime, settings, make_tenant):
    service, key = make_tenant()
    new_template(client, key, "TOPIC", "news")
    assert _set(client, settings, service, "publish", 0.01, 2).status_code == 200
    for _ in range(2):
        assert (
            client.post("/v1/topics/news/sports/publish", json={"variables": {"name": "x"}}, headers=key).status_code
            == 202
        )
    before = snapshot(runtime, service)
    r = client.post("/v1/topics/news/sports/publish", json={"variables": {"name": "x"}}, headers=key)
    assert r.status_code == 429 and "Retry-After" in r.headers
    assert snapshot(runtime, service) == before


def test_mysql_lost_while_taking_a_token_answers_503_not_500(client, runtime, settings, make_tenant):
    """MariaDB gone in the middle of the rate-limit UPDATE (CI's MariaDB restart under load caught it):
    the request is the outage's 503 in the error format. Committing the dead transaction afterwards
    raised PendingRollbackError in place of the outage, which the API answered with a bare 500."""
    _, key = make_tenant()
    assert client.get("/v1/templates", headers=key).status_code == 200  # the key cached, the bucket made
    killed: list[int] = []

    def kill_before_the_take(conn, _cursor, statement, _params, _context, _many) -> None:
        if not killed and statement.startswith("UPDATE rate_bucket"):
            (conn_id,) = conn.exec_driver_sql("SELECT CONNECTION_ID()").one()
            with runtime.engine.connect() as killer:
                killer.exec_driver_sql(f"KILL {int(conn_id)}")
            killed.append(conn_id)

    event.listen(runtime.engine, "before_cursor_execute", kill_before_the_take)
    try:
        r = client.put("/v1/users/rl-lost", json={}, headers=key)
    finally:
        event.remove(runtime.engine, "before_cursor_execute", kill_before_the_take)
    assert killed, "the token was never taken"
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "store_unavailable" and r.headers["Retry-After"] == "1"
    assert client.put("/v1/users/rl-lost", json={}, headers=key).status_code == 201  # nothing was written


def test_concurrent_takes_never_over_admit(client, runtime, settings, make_tenant):
    """40 threads race for a bucket of 15 tokens refilling at 0.01/s: 15 admitted, not one more."""
    service, _ = make_tenant()
    with runtime.sessions.begin() as session:
        ratelimit.set_limit(session, settings, service, "send", rate=0.01, burst=15)
    admitted, refused, start = [], [], threading.Barrier(40)

    def one():
        start.wait()
        with runtime.sessions() as session:
            try:
                ratelimit.admit(session, settings, service, "send")
                admitted.append(1)
            except RateLimited:
                refused.append(1)
            finally:
                session.commit()

    threads = [threading.Thread(target=one) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(admitted), len(refused)) == (15, 25)


def test_a_bucket_made_by_a_concurrent_first_request_is_no_refusal(client, runtime, settings, make_tenant):
    """Two first requests of a new bucket race: one's UPDATE finds no bucket, the other creates the
    bucket before the first checks whether one exists. The first is admitted, not refused (this
    answered 429 at rate 1e6, burst 1e7 in `make bench`)."""
    service, _ = make_tenant()
    with runtime.sessions.begin() as session:
        ratelimit.set_limit(session, settings, service, "write", rate=1e6, burst=10_000_000)
    first_update: list[int] = []
    with runtime.sessions() as session:
        real_execute = session.execute

        def execute(statement, params=None, **kwargs):
            result = real_execute(statement, params, **kwargs)
            if not first_update:  # this request's UPDATE has looked: now the other request makes the bucket
                first_update.append(result.rowcount)
                with runtime.sessions.begin() as other:
                    ratelimit_sql.create(other, service, "write")
            return result

        session.execute = execute  # type: ignore[method-assign]
        assert ratelimit_sql.take(session, service, "write", rate=1000.0, burst=5000.0) is True
        session.commit()
    assert first_update == [0]  # the race really happened: the first UPDATE found no bucket


def test_two_api_processes_share_one_limit(processes, client, settings, make_tenant):
    service, key = make_tenant()
    rate, burst = 0.2, 10
    assert _set(client, settings, service, "read", rate, burst).status_code == 200
    a, b = processes.api(name="api-a"), processes.api(name="api-b")
    statuses: dict[str, list[int]] = {"a": [], "b": []}
    began = time.monotonic()
    for i in range(30):
        name, api = ("a", a) if i % 2 == 0 else ("b", b)
        r = httpx.get(api.url + "/v1/templates", headers=key, timeout=10)
        assert r.status_code in (200, 429), r.text
        statuses[name].append(r.status_code)
    elapsed = time.monotonic() - began
    admitted = sum(s == 200 for v in statuses.values() for s in v)
    # The burst, plus whatever the elapsed time refilled; one process alone would admit 10 of its 15.
    assert burst <= admitted <= burst + int(elapsed * rate) + 1, (admitted, elapsed, statuses)
    assert 200 in statuses["a"] and 200 in statuses["b"], statuses
    assert 429 in statuses["a"] and 429 in statuses["b"], statuses


def _bucket_updates(runtime) -> tuple[list[str], object]:
    seen: list[str] = []

    def count(_conn, _cursor, statement, _params, _context, _many) -> None:
        if statement.startswith("UPDATE rate_bucket"):
            seen.append(statement)

    event.listen(runtime.engine, "before_cursor_execute", count)
    return seen, count


def _slowed(factor: float):
    """A clock running ``factor`` times slower than the host's: the process's allowance then sees the
    test's requests as ``factor`` times faster, so what it does for a busy process does not depend on
    how fast this (shared, loaded) machine answers them."""
    base = time.monotonic()
    return lambda: base + (time.monotonic() - base) / factor


def test_a_busy_process_admits_most_requests_without_an_update(client, runtime, settings, make_tenant, monkeypatch):
    """Under load, one UPDATE takes tokens for the next requests: far fewer statements than requests."""
    monkeypatch.setattr(client.app.state.allowance, "_clock", _slowed(4))
    service, key = make_tenant()
    assert _set(client, settings, service, "read", 100_000, 1_000_000).status_code == 200
    assert client.get("/v1/templates", headers=key).status_code == 200  # the key cached
    updates, listener = _bucket_updates(runtime)
    try:
        statuses = [client.get("/v1/templates", headers=key).status_code for _ in range(600)]
    finally:
        event.remove(runtime.engine, "before_cursor_execute", listener)
    assert statuses == [200] * 600
    assert len(updates) <= 600 // 2, f"{len(updates)} UPDATEs for 600 requests"  # one each before: 600


def test_tokens_taken_ahead_never_admit_more_than_the_limit(client, runtime, settings, make_tenant):
    """Four threads admit requests as the edge does (a token held by the process, else an UPDATE that
    also takes ahead), faster than the limit: never more than the burst plus what the elapsed time
    refilled, and requests were admitted from tokens taken ahead (fewer UPDATEs than admissions).
    The limit is low enough for a loaded machine to outrun it: the threads run until each has been
    refused (a bound, not a duration, decides when they stop)."""
    from notee.api.auth import authenticate_service

    service, _ = make_tenant()
    rate, burst = 40.0, 1_000  # a take-ahead may hold up to min(40 x HOLD_S, 1,000 / 8) = 2 tokens
    with runtime.sessions.begin() as session:
        ratelimit.set_limit(session, settings, service, "read", rate=rate, burst=burst)
    allowance = ratelimit.Allowance()
    updates, listener = _bucket_updates(runtime)
    admitted, refused, ahead_taken = [0] * 4, [0] * 4, [0] * 4
    start = threading.Barrier(4)
    lasts = 120.0  # a bound only: each thread stops at its first refusal after the burst is used up

    def one(i: int) -> None:
        start.wait()
        end = time.monotonic() + lasts
        while time.monotonic() < end and not refused[i]:
            if allowance.take(service, "read"):
                admitted[i] += 1
                ahead_taken[i] += 1
                continue
            try:
                authenticate_service(runtime, settings, None, "read", known=service, allowance=allowance)
                admitted[i] += 1
            except RateLimited:
                refused[i] += 1

    began = time.monotonic()
    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        event.remove(runtime.engine, "before_cursor_execute", listener)
    elapsed = time.monotonic() - began
    assert sum(admitted) <= burst + int(elapsed * rate) + 1, (sum(admitted), elapsed)
    assert all(refused), ("a thread never reached the limit", refused)
    assert sum(ahead_taken) > 0, "nothing was admitted from tokens taken ahead"
    taken_ahead_updates = [u for u in updates if "LEAST(" in u]
    assert taken_ahead_updates, "no UPDATE took tokens ahead"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _busy(allowance: ratelimit.Allowance, clock: _Clock, service: str, klass: str) -> None:
    """The allowance has seen (service, class) at 400 requests a second for a window."""
    for _ in range(int(400 * ratelimit.Allowance.WINDOW_S) + 1):
        allowance.take(service, klass)
        clock.now += 1 / 400


def _tat(runtime, service: str, klass: str, *, set_ahead_s: float | None = None) -> float:
    """The bucket's theoretical arrival time; ``set_ahead_s``: first set it that far past the database's now."""
    from sqlalchemy import text

    with runtime.sessions.begin() as session:
        where = {"service": service, "class": klass}
        if set_ahead_s is not None:
            session.execute(
                text(
                    "UPDATE rate_bucket SET tat = UNIX_TIMESTAMP(SYSDATE(6)) + :s"
                    " WHERE service = :service AND class = :class"
                ),
                where | {"s": set_ahead_s},
            )
        row = session.execute(
            text("SELECT tat FROM rate_bucket WHERE service = :service AND class = :class"), where
        ).one()
        return float(row.tat)


def test_a_refill_charges_the_bucket_for_every_token_it_holds_and_refuses_nobody(runtime, settings, make_tenant):
    """A refill (notee.api.take_ahead, before the process runs out) is one take-ahead UPDATE for no
    request: the process holds exactly what the bucket was charged; near the limit it takes nothing,
    raises no 429, and the process goes back to one token per request."""
    from notee.api.auth import authenticate_service, refill_allowance

    service, _ = make_tenant()
    rate, burst = 400.0, 8_000  # a take: at most min(400 x HOLD_S, 8,000 / 8) = 20
    with runtime.sessions.begin() as session:
        ratelimit.set_limit(session, settings, service, "read", rate=rate, burst=burst)
    clock = _Clock()
    allowance = ratelimit.Allowance(clock)
    authenticate_service(runtime, settings, None, "read", known=service)  # the bucket exists
    _busy(allowance, clock, service, "read")
    # 10 s of the bucket used: its time is past now, so a take moves it by exactly n / rate
    before = _tat(runtime, service, "read", set_ahead_s=10.0)
    updates, listener = _bucket_updates(runtime)
    try:
        refill_allowance(runtime, settings, service, "read", allowance)  # reads the limit, then one UPDATE
    finally:
        event.remove(runtime.engine, "before_cursor_execute", listener)
    assert len(updates) == 1 and "LEAST(" in updates[0]
    held = 0
    while allowance.take(service, "read"):
        held += 1
    assert held == 20
    assert abs(_tat(runtime, service, "read") - before - held / rate) < 1e-6  # charged for each, no more
    # The bucket used up: a refill takes nothing, refuses nobody, and the process goes tight.
    _tat(runtime, service, "read", set_ahead_s=burst / rate)
    refill_allowance(runtime, settings, service, "read", allowance)
    assert not allowance.take(service, "read")
    assert allowance.refill_size(service, "read") == 0 and not allowance.refill_due(service, "read")
