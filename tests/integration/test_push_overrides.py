"""A publish's and a single send's own TTL and priority (docs/PAYLOADS.md "TTL and priority per
push"): validated like the template's (422 naming the field, nothing written), carried to the job
and to each provider's fields and headers, as the emulator records them; the template keeps its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from notee.store import jobs_sql
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import admin_headers, apns_credentials, new_user, random_token
from tests.support.stores import snapshot

pytestmark = pytest.mark.tenant(credentials=True)


def _with_apns(client, settings, service):
    r = client.put(
        f"/v1/admin/services/{service}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text


def _fcm(seen) -> tuple[str | None, str | None]:
    android = seen["body"]["android"]
    return android.get("ttl"), android.get("priority")


def test_single_send_ttl_and_priority_reach_fcm_and_apns_and_the_template_keeps_its_own(
    client, settings, tenant, emu_app
):
    service, headers = tenant
    _with_apns(client, settings, service)
    android, ios = random_token("oa"), random_token("oi")
    user = new_user(client, headers, devices=[(android, "AOS"), (ios, "IOS")])
    template = {"title": "Hi", "body": "There", "ttl_seconds": 86400, "priority": "high"}
    assert client.put("/v1/templates/SINGLE/o", json=template, headers=headers).status_code == 201
    r = client.post(
        f"/v1/users/{user}/send", json={"type": "o", "ttl_seconds": 0, "priority": "normal"}, headers=headers
    )
    assert r.status_code == 200 and r.json()["delivered"] == 2, r.text
    fcm_seen, apns_seen = emu_app.last_request(android), emu_app.last_request(ios)
    assert fcm_seen is not None and apns_seen is not None
    assert _fcm(fcm_seen) == ("0s", "normal")
    assert fcm_seen["device"]["android"]["ttl"] == "0s"
    # a TTL of 0 is APNs' "deliver once, do not store", not an instant that is already past
    assert (apns_seen["headers"]["apns-priority"], apns_seen["headers"]["apns-expiration"]) == ("5", "0")
    # without overrides the template's own values are sent again
    r = client.post(f"/v1/users/{user}/send", json={"type": "o"}, headers=headers)
    assert r.status_code == 200 and r.json()["delivered"] == 2, r.text
    fcm_seen, apns_seen = emu_app.last_request(android), emu_app.last_request(ios)
    assert _fcm(fcm_seen) == ("86400s", "high")
    assert apns_seen["headers"]["apns-priority"] == "10"
    assert int(apns_seen["headers"]["apns-expiration"]) > datetime.now(UTC).timestamp() + 86000


def test_topic_publish_ttl_and_priority_travel_with_the_job_to_both_platforms(
    client, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    _with_apns(client, settings, service)
    android, ios = random_token("pa"), random_token("pi")
    user = new_user(client, headers, devices=[(android, "AOS"), (ios, "IOS")])
    assert client.put("/v1/templates/TOPIC/o", json={"title": "Hi", "body": "B"}, headers=headers).status_code == 201
    assert client.put(f"/v1/users/{user}/subscriptions/topic/o/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/o/all/publish", json={"ttl_seconds": 3600, "priority": "normal"}, headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    status = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=headers).json()
    assert (status["state"], status["sent"]) == ("done", 2), status
    fcm_seen, apns_seen = emulator.last_request(android), emulator.last_request(ios)
    assert fcm_seen is not None and apns_seen is not None
    assert _fcm(fcm_seen) == ("3600s", "normal")
    fcm_apns = fcm_seen["body"]["apns"]["headers"]  # FCM's own APNs block says the same
    assert fcm_apns["apns-priority"] == "5"
    assert apns_seen["headers"]["apns-priority"] == "5"
    expires = int(apns_seen["headers"]["apns-expiration"])
    assert 3000 < expires - datetime.now(UTC).timestamp() <= 3600


def test_scheduled_send_keeps_its_ttl_and_priority_in_the_job(client, tenant, runtime):
    _, headers = tenant
    user = new_user(client, headers, devices=[(random_token("sa"), "AOS")])
    assert client.put("/v1/templates/SINGLE/o", json={"title": "Hi", "body": "B"}, headers=headers).status_code == 201
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    r = client.post(
        f"/v1/users/{user}/send",
        json={"type": "o", "send_at": at, "ttl_seconds": 120, "priority": "normal"},
        headers=headers,
    )
    assert r.status_code == 202, r.text
    with runtime.sessions() as session:
        job = jobs_sql.get_job(session, r.json()["job_id"])
    assert job is not None
    payload = json.loads(job.payload) if isinstance(job.payload, (str, bytes)) else job.payload
    assert (payload["ttl_seconds"], payload["priority"]) == (120, "normal")


@pytest.mark.parametrize(
    "extra,loc",
    [
        ({"ttl_seconds": -1}, ["body", "ttl_seconds"]),
        ({"ttl_seconds": 2_419_201}, ["body", "ttl_seconds"]),
        ({"ttl_seconds": "60"}, ["body", "ttl_seconds"]),
        ({"priority": "urgent"}, ["body", "priority"]),
        ({"priority": 10}, ["body", "priority"]),
    ],
)
def test_bad_ttl_or_priority_is_422_naming_it_and_nothing_is_queued_or_sent(
    client, runtime, tenant, emu_app, extra, loc
):
    service, headers = tenant
    token = random_token("bo")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/TOPIC/o", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    assert client.put("/v1/templates/SINGLE/o", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    assert client.put(f"/v1/users/{user}/subscriptions/topic/o/all", headers=headers).status_code in (200, 201)
    before = snapshot(runtime, service)
    for path, body in [
        ("/v1/topics/o/all/publish", extra),
        ("/v1/publish/o", {"topic": "all", **extra}),
        (f"/v1/users/{user}/send", {"type": "o", **extra}),
    ]:
        r = client.post(path, json=body, headers=headers)
        assert r.status_code == 422, (path, r.text)
        assert r.json()["error"]["details"][0]["loc"][:2] == loc, (path, r.text)
    assert snapshot(runtime, service) == before
    assert emu_app.last_request(token) is None
