"""Issue 30: an immediate single send honours Idempotency-Key, against the emulator. The same key
within 24 hours answers the first answer and sends nothing; two concurrent requests with one key
send once; the same key with another request is 422 (nothing sent); an error answer gives the key
back; keys are the service's own; the retention run deletes keys older than 24 hours."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from notee.core.clock import stored_now
from notee.usecases import retention
from tests.support.emulator import deliveries_per_token
from tests.support.registry import new_template, new_user, random_token

pytestmark = pytest.mark.tenant(credentials=True)


@pytest.fixture()
def tenant(tenant):
    """The family's tenant with a SINGLE template ``otp``."""
    new_template(tenant.client, tenant.headers, "SINGLE", "otp", title="Code {{code}}", body="Your code")
    return tenant


def _send(client, headers, user: str, key: str | None, **body: Any):
    h = headers if key is None else headers | {"Idempotency-Key": key}
    return client.post(f"/v1/users/{user}/send", json={"type": "otp", "variables": {"code": "1"}} | body, headers=h)


def _keys(runtime, service: str) -> list[tuple[Any, ...]]:
    with runtime.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                text("SELECT idempotency_key, state, status_code FROM send_idempotency WHERE service = :s"),
                {"s": service},
            )
        ]


def test_the_same_key_answers_the_first_answer_and_sends_nothing(client, runtime, tenant, emu_app):
    service, h = tenant
    tokens = [random_token("a"), random_token("b")]
    user = new_user(client, h, devices=[(tokens[0], "AOS"), (tokens[1], "AOS")])
    first = _send(client, h, user, "otp-1")
    assert first.status_code == 200, first.text
    assert first.json()["delivered"] == 2 and "Idempotent-Replayed" not in first.headers
    again = _send(client, h, user, "otp-1")
    assert again.status_code == 200 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert deliveries_per_token(emu_app, tokens) == {t: 1 for t in tokens}
    assert _keys(runtime, service) == [("client:otp-1", "done", 200)]
    # another key, or none, sends again
    assert _send(client, h, user, "otp-2").json()["delivered"] == 2
    assert _send(client, h, user, None).json()["delivered"] == 2
    assert deliveries_per_token(emu_app, tokens) == {t: 3 for t in tokens}


def test_two_concurrent_requests_with_one_key_send_once(client, tenant, emu_app):
    _, h = tenant
    token = random_token("c")
    user = new_user(client, h, devices=[(token, "AOS")])
    emu_app.latency(300)  # the first is still sending when the second arrives
    answers = _race([lambda: _send(client, h, user, "race-1") for _ in range(2)])
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert answers[0].json() == answers[1].json() and answers[0].json()["delivered"] == 1
    assert sorted(a.headers.get("Idempotent-Replayed", "") for a in answers) == ["", "true"]
    assert deliveries_per_token(emu_app, [token]) == {token: 1}


def test_the_same_key_with_another_request_is_422_and_sends_nothing(client, tenant, emu_app):
    _, h = tenant
    token = random_token("d")
    user = new_user(client, h, devices=[(token, "AOS")])
    other = new_user(client, h, devices=[(random_token("e"), "AOS")])
    assert _send(client, h, user, "k").status_code == 200
    for r in (
        _send(client, h, user, "k", variables={"code": "2"}),
        _send(client, h, user, "k", data={"x": "y"}),
        _send(client, h, user, "k", quiet_hours=True),
        _send(client, h, other, "k"),
    ):
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"][0]["type"] == "idempotency_key_reused"
    assert deliveries_per_token(emu_app, [token]) == {token: 1}
    assert emu_app.stats()["counts"]["fcm.ok"] == 1


def test_an_error_answer_gives_the_key_back(client, runtime, tenant, emu_app):
    service, h = tenant
    token = random_token("f")
    user = new_user(client, h, devices=[(token, "AOS")])
    missing = _send(client, h, user, "retry-me", type="nope")  # no such template: 404, nothing kept
    assert missing.status_code == 404
    assert _keys(runtime, service) == []
    assert _send(client, h, user, "retry-me", type="nope").status_code == 404  # not a replay of the 404
    # and the key serves a corrected request afterwards (the hash of the failed one was not kept)
    new_template(client, h, "SINGLE", "nope", title="Now", body="there")
    assert _send(client, h, user, "retry-me", type="nope").json()["delivered"] == 1


def test_keys_are_the_services_own(client, make_tenant, emu_app):
    a, b = make_tenant(credentials=True), make_tenant(credentials=True)
    tokens = []
    for t in (a, b):
        new_template(client, t.headers, "SINGLE", "otp", title="Code", body="x")
        tokens.append(random_token("g"))
        user = new_user(client, t.headers, devices=[(tokens[-1], "AOS")])
        r = _send(client, t.headers, user, "shared-key")
        assert r.status_code == 200 and "Idempotent-Replayed" not in r.headers
    assert deliveries_per_token(emu_app, tokens) == {t: 1 for t in tokens}


def test_a_key_older_than_24_hours_is_pruned_and_new_again(client, runtime, tenant, emu_app):
    service, h = tenant
    token = random_token("h")
    user = new_user(client, h, devices=[(token, "AOS")])
    assert _send(client, h, user, "day-old").status_code == 200
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE send_idempotency SET created_at = :t WHERE service = :s"),
            {"t": stored_now() - timedelta(hours=24, minutes=1), "s": service},
        )
    # kept rows not yet pruned are already expired for a request...
    assert "Idempotent-Replayed" not in _send(client, h, user, "day-old").headers
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE send_idempotency SET created_at = :t WHERE service = :s"),
            {"t": stored_now() - timedelta(hours=24, minutes=1), "s": service},
        )
    # ...and the retention run deletes them
    assert retention.prune_send_keys(runtime) >= 1
    assert _keys(runtime, service) == []
    assert deliveries_per_token(emu_app, [token]) == {token: 2}


def _race(calls: list[Callable[[], Any]]) -> list[Any]:
    """Start every call at the same instant (a barrier); their responses, in order."""
    barrier = threading.Barrier(len(calls))

    def go(call: Callable[[], Any]) -> Any:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(go, calls))


def test_a_send_held_by_quiet_hours_keeps_its_202_for_the_key(client, runtime, tenant, emu_app):
    service, h = tenant
    token = random_token("q")
    user = new_user(client, h, "quiet-1", devices=[(token, "AOS")])
    now = stored_now()
    window = {"start": f"{(now - timedelta(hours=1)):%H:%M}", "end": f"{(now + timedelta(hours=1)):%H:%M}"}
    r = client.put("/v1/users/quiet-1", json={"timezone": "UTC", "quiet_hours": window}, headers=h)
    assert r.status_code == 200, r.text
    first = _send(client, h, user, "held-1", quiet_hours=True)
    assert first.status_code == 202, first.text
    again = _send(client, h, user, "held-1", quiet_hours=True)
    assert again.status_code == 202 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    with runtime.engine.connect() as conn:
        jobs = conn.execute(text("SELECT COUNT(*) FROM fanout_job WHERE service = :s"), {"s": service}).scalar_one()
    assert jobs == 1
    assert deliveries_per_token(emu_app, [token]) == {token: 0}
