"""Engagement webhooks (issue 36; docs/WEBHOOKS.md "Engagement events"): an endpoint that names
receipt.* kinds gets the apps' receipts of those kinds, signed like every event, in batches (one
delivery carries the events of many receipts requests, at most NOTEE_WEBHOOK_RECEIPT_BATCH_EVENTS),
through the same outbox, retries and listing; an endpoint that did not opt in, and another service's
endpoint, get nothing. The receiver is the real local HTTPS server of tests/support/webhook_receiver.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import bindparam, text

from notee.core import notification_id
from notee.core.settings import Settings
from notee.core.vocabulary import WEBHOOK_EVENTS
from notee.domain import webhooks
from notee.domain.credentials import credentials_box
from notee.store.runtime import Runtime
from tests.support.logscan import remember_secret
from tests.support.registry import bearer, new_api_key, new_user, random_token
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import Receiver, dispatch_until_idle, start_receiver

pytestmark = pytest.mark.tenant(credentials=True)


@pytest.fixture()
def receiver(tmp_path) -> Iterator[Receiver]:
    yield from start_receiver(tmp_path / "receiver-tls")


def _settings(receiver: Receiver) -> Settings:
    return Settings().model_copy(
        update={"webhook_ca_file": str(receiver.ca_file), "webhook_allow_private_addresses": True}
    )


def _register(runtime: Runtime, service: str, url: str, events: list[str] | None) -> webhooks.NewEndpoint:
    settings = runtime.settings.model_copy(update={"webhook_allow_private_addresses": True})
    with runtime.sessions.begin() as s:
        created = webhooks.create_endpoint(
            s, credentials_box(settings), settings, service, url=url, events=events, description=None
        )
    remember_secret(created.secret)
    return created


def _all_due(runtime: Runtime, endpoint_ids: list[str]) -> bool:
    """Every pending delivery of the endpoints is due (their batching window ended)."""
    with runtime.sessions() as s:
        waiting = s.execute(
            text(
                "SELECT COUNT(*) FROM webhook_delivery WHERE endpoint_id IN :e AND state = 'pending'"
                " AND next_attempt_at > UTC_TIMESTAMP(6)"
            ).bindparams(bindparam("e", expanding=True)),
            {"e": endpoint_ids},
        ).scalar_one()
    return int(waiting) == 0


def _rows(runtime: Runtime, endpoint_id: str) -> list[tuple[str, str]]:
    with runtime.sessions() as s:
        return [
            (r.event_type, r.state)
            for r in s.execute(
                text("SELECT event_type, state FROM webhook_delivery WHERE endpoint_id = :e ORDER BY delivery_id"),
                {"e": endpoint_id},
            )
        ]


def _client_key(client, settings, service: str) -> str:
    return str(new_api_key(client, settings, service, "app", kind="client")["api_key"])


def _single_send(client, headers) -> str:
    """A single send to a user with one Android device: its send_id (a notification source)."""
    user = new_user(client, headers, devices=[(random_token("ew"), "AOS")])
    assert client.put("/v1/templates/SINGLE/hook", json={"title": "t", "body": "b"}, headers=headers).status_code in (
        200,
        201,
    )
    r = client.post(f"/v1/users/{user}/send", json={"type": "hook"}, headers=headers)
    assert r.status_code == 200 and r.json()["delivered"] == 1, r.text
    return str(r.json()["send_id"])


def _post(client, key: str, events: list[dict]) -> dict:
    r = client.post("/v1/receipts", json={"events": events}, headers=bearer(key))
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_opted_in_kinds_arrive_signed_and_batched_and_nobody_else_gets_them(
    client, settings, make_tenant, emu_app, emu_runtime, receiver
):
    mine, other = make_tenant(), make_tenant()
    wanted = _register(emu_runtime, mine.service, receiver.url, ["receipt.opened", "receipt.clicked"])
    default = _register(emu_runtime, mine.service, receiver.url + "/default", None)
    theirs = _register(emu_runtime, other.service, receiver.url + "/other", list(WEBHOOK_EVENTS))
    assert "receipt.opened" not in default.endpoint.events  # opt-in: the default is the four others
    receiver.secret = wanted.secret
    source = _single_send(client, mine.headers)
    a, b = (f"{source}.{notification_id.device_part(t)}" for t in ("device-a", "device-b"))
    now = datetime.now(UTC).isoformat()
    key = _client_key(client, settings, mine.service)
    first = [
        {"notification_id": a, "event": "delivered", "at": now},
        {"notification_id": a, "event": "opened", "at": now},
    ]
    assert _post(client, key, first)["accepted"] == 2
    assert _post(client, key, [{"notification_id": b, "event": "opened", "at": now}])["accepted"] == 1
    assert _post(client, key, [{"notification_id": a, "event": "clicked", "at": now, "action": "buy"}])["accepted"] == 1
    assert _post(client, key, first)["duplicates"] == 2  # a retried batch: queued again (at least once)
    ids = [wanted.endpoint.endpoint_id, default.endpoint.endpoint_id, theirs.endpoint.endpoint_id]
    assert [t for t, _ in _rows(emu_runtime, wanted.endpoint.endpoint_id)] == [
        "receipt.opened",
        "receipt.opened",
        "receipt.clicked",
        "receipt.opened",
    ]
    wait_for(lambda: _all_due(emu_runtime, ids), timeout=30, what="the batching window to end")
    dispatch_until_idle(_settings(receiver))

    [opened] = receiver.events("receipt.opened")  # three requests' opened events, one delivery
    [clicked] = receiver.events("receipt.clicked")
    assert receiver.events("receipt.delivered") == [] and len(receiver.received) == 2
    assert all(r.signature_ok for r in receiver.received)
    assert opened["service"] == mine.service
    assert sorted((e["notification_id"], e["event"]) for e in opened["data"]["events"]) == sorted(
        [(a, "opened"), (b, "opened"), (a, "opened")]
    )
    [click] = clicked["data"]["events"]
    assert (click["notification_id"], click["action"], click["job_id"]) == (a, "buy", source)
    assert _rows(emu_runtime, wanted.endpoint.endpoint_id) == [
        ("receipt.opened", "delivered"),
        ("receipt.clicked", "delivered"),
    ]
    assert (
        _rows(emu_runtime, default.endpoint.endpoint_id) == [] and _rows(emu_runtime, theirs.endpoint.endpoint_id) == []
    )
    listing = client.get(f"/v1/webhooks/{wanted.endpoint.endpoint_id}/deliveries", headers=mine.headers)
    assert listing.status_code == 200, listing.text
    assert {d["event_type"] for d in listing.json()["items"]} == {"receipt.opened", "receipt.clicked"}
    assert (
        len(next(d for d in listing.json()["items"] if d["event_type"] == "receipt.opened")["event"]["data"]["events"])
        == 3
    )
    assert (
        client.get(f"/v1/webhooks/{wanted.endpoint.endpoint_id}/deliveries", headers=other.headers).status_code == 404
    )


def test_a_delivery_carries_at_most_the_batch_bound(client, settings, tenant, emu_app, emu_runtime, receiver):
    service, headers = tenant
    hook = _register(emu_runtime, service, receiver.url, ["receipt.delivered"])
    receiver.secret = hook.secret
    source = _single_send(client, headers)
    now = datetime.now(UTC).isoformat()
    key = _client_key(client, settings, service)
    for part in range(3):  # 330 events in three requests: 100 + 10 of them merge, never past 100
        events = [
            {
                "notification_id": f"{source}.{notification_id.device_part(f'd{part}-{i}')}",
                "event": "delivered",
                "at": now,
            }
            for i in range(110)
        ]
        assert _post(client, key, events)["accepted"] == 110
    wait_for(lambda: _all_due(emu_runtime, [hook.endpoint.endpoint_id]), timeout=30, what="the batching window")
    dispatch_until_idle(_settings(receiver))
    sizes = sorted(len(e["data"]["events"]) for e in receiver.events("receipt.delivered"))
    assert sum(sizes) == 330 and max(sizes) == settings.webhook_receipt_batch_events == 100, sizes
    assert len(sizes) == 4  # 330 events need 4 deliveries of at most 100: the small rows were merged
    got = [e["notification_id"] for d in receiver.events("receipt.delivered") for e in d["data"]["events"]]
    assert len(set(got)) == 330  # each event in exactly one delivery
    assert all(r.signature_ok for r in receiver.received)
