"""Engagement end to end (docs/ENGAGEMENT.md): the notification id every push carries (read from
what the emulator received), client keys (what they may and may not do), ``POST /v1/receipts``
(idempotent, per-item rejections, limits) and the figures per job, type, topic and day; a second
tenant sees none of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from notee.core import notification_id
from notee.store.cql.engagement import ScopeKeys
from notee.usecases import engagement_stats
from notee.usecases.retention import prune_jobs
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import admin_headers, apns_credentials, bearer, new_user, random_token

pytestmark = pytest.mark.tenant(credentials=True)


def _now(delta_s: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_s)).isoformat()


def _client_key(client, settings, service: str) -> str:
    r = client.post(
        f"/v1/admin/services/{service}/api-keys",
        json={"label": "app", "kind": "client"},
        headers=admin_headers(settings),
    )
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "client" and r.json()["api_key"].startswith("nck_")
    return str(r.json()["api_key"])


def _with_apns(client, settings, service: str) -> None:
    r = client.put(
        f"/v1/admin/services/{service}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text


def _nid_fcm(emu, token: str) -> str:
    seen = emu.last_request(token)
    assert seen is not None
    return str(seen["body"]["data"][notification_id.KEY])


def _nid_apns(emu, token: str) -> str:
    seen = emu.last_request(token)
    assert seen is not None
    return str(seen["body"][notification_id.KEY])


def _receipts(client, key: str, events: list[dict]) -> dict:
    r = client.post("/v1/receipts", json={"events": events}, headers=bearer(key))
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_single_send_carries_the_id_and_a_retried_batch_counts_once(client, settings, tenant, emu_app):
    service, headers = tenant
    _with_apns(client, settings, service)
    android, ios = random_token("ea"), random_token("ei")
    user = new_user(client, headers, devices=[(android, "AOS"), (ios, "IOS")])
    assert client.put("/v1/templates/SINGLE/otp", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    r = client.post(f"/v1/users/{user}/send", json={"type": "otp"}, headers=headers)
    assert r.status_code == 200 and r.json()["delivered"] == 2, r.text
    send_id = r.json()["send_id"]
    a, i = _nid_fcm(emu_app, android), _nid_apns(emu_app, ios)
    assert notification_id.parse(a) == (send_id, notification_id.device_part(android))
    assert notification_id.parse(i) == (send_id, notification_id.device_part(ios))
    key = _client_key(client, settings, service)
    batch = [
        {"notification_id": a, "event": "delivered", "at": _now(-5)},
        {"notification_id": a, "event": "opened", "at": _now(-2)},
        {"notification_id": a, "event": "clicked", "at": _now(-1), "action": "track"},
        {"notification_id": i, "event": "delivered", "at": _now(-3)},
    ]
    assert _receipts(client, key, batch) == {"accepted": 4, "duplicates": 0, "rejected": []}
    assert _receipts(client, key, batch) == {"accepted": 0, "duplicates": 4, "rejected": []}
    stats = client.get(f"/v1/stats/jobs/{send_id}", headers=headers).json()
    assert stats["type"] == "otp"
    c = stats["counts"]
    assert (c["targeted"], c["sent"], c["delivered"], c["opened"], c["clicked"]) == (2, 2, 2, 1, 1)
    assert (c["delivery_rate"], c["open_rate"], c["click_rate"]) == (1.0, 0.5, 0.5)
    by_type = client.get("/v1/stats", params={"by": "type"}, headers=headers).json()
    [row] = [x for x in by_type["items"] if x["key"] == "otp"]
    assert (row["counts"]["sent"], row["counts"]["delivered"], row["counts"]["opened"]) == (2, 2, 1)
    export = client.get(f"/v1/stats/jobs/{send_id}/receipts", params={"limit": 3}, headers=headers).json()
    assert len(export["items"]) == 3 and export["next_cursor"]
    rest = client.get(
        f"/v1/stats/jobs/{send_id}/receipts", params={"cursor": export["next_cursor"]}, headers=headers
    ).json()
    got = {(x["notification_id"], x["event"], x["action"]) for x in export["items"] + rest["items"]}
    assert got == {(a, "delivered", None), (a, "opened", None), (a, "clicked", "track"), (i, "delivered", None)}
    assert rest["next_cursor"] is None


def test_a_topic_job_is_counted_per_job_topic_and_day(client, settings, tenant, emulator, emu_runtime):
    service, headers = tenant
    tokens = [random_token(f"et{n}") for n in range(3)]
    users = [new_user(client, headers, devices=[(t, "AOS")]) for t in tokens]
    assert client.put("/v1/templates/TOPIC/news", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    for u in users:
        assert client.put(f"/v1/users/{u}/subscriptions/topic/news/sports", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/news/sports/publish", json={}, headers=headers)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    nids = [_nid_fcm(emulator, t) for t in tokens]
    assert {notification_id.parse(n)[0] for n in nids} == {job_id.replace("-", "")}  # type: ignore[index]
    key = _client_key(client, settings, service)
    events = [{"notification_id": n, "event": "delivered", "at": _now()} for n in nids]
    events.append({"notification_id": nids[0], "event": "opened", "at": _now()})
    assert _receipts(client, key, events)["accepted"] == 4
    c = client.get(f"/v1/stats/jobs/{job_id}", headers=headers).json()["counts"]
    assert (c["targeted"], c["sent"], c["delivered"], c["opened"], c["open_rate"]) == (3, 3, 3, 1, 0.3333)
    topic = client.get("/v1/stats", params={"by": "topic"}, headers=headers).json()
    assert [(x["key"], x["counts"]["sent"], x["counts"]["opened"]) for x in topic["items"]] == [("news sports", 3, 1)]
    day = client.get("/v1/stats", params={"by": "day"}, headers=headers).json()
    assert sum(x["counts"]["delivered"] for x in day["items"]) == 3
    assert sum(x["counts"]["sent"] for x in day["items"]) == 3


def test_each_bad_event_is_refused_with_its_reason_and_the_rest_kept(client, settings, make_tenant, emu_app):
    mine, other = make_tenant(), make_tenant()
    tokens = []
    for t in (mine, other):
        token = random_token("er")
        user = new_user(client, t.headers, devices=[(token, "AOS")])
        assert (
            client.put("/v1/templates/SINGLE/s", json={"title": "t", "body": "b"}, headers=t.headers).status_code == 201
        )
        assert client.post(f"/v1/users/{user}/send", json={"type": "s"}, headers=t.headers).json()["delivered"] == 1
        tokens.append(token)
    good, theirs = _nid_fcm(emu_app, tokens[0]), _nid_fcm(emu_app, tokens[1])
    key = _client_key(client, settings, mine.service)
    unknown = "0" * 32 + "." + notification_id.device_part("x")
    result = _receipts(
        client,
        key,
        [
            {"notification_id": theirs, "event": "opened", "at": _now()},
            {"notification_id": unknown, "event": "opened", "at": _now()},
            {"notification_id": "not-an-id", "event": "opened", "at": _now()},
            {"notification_id": good, "event": "opened", "at": _now(-40 * 86_400)},
            {"notification_id": good, "event": "opened", "at": _now(3_600)},
            {"notification_id": good, "event": "delivered", "at": _now()},
        ],
    )
    assert result["accepted"] == 1 and result["duplicates"] == 0
    assert [(x["index"], x["reason"]) for x in result["rejected"]] == [
        (0, "not_found"),
        (1, "not_found"),
        (2, "not_found"),
        (3, "too_old"),
        (4, "in_future"),
    ]
    # nothing of the other tenant's notification was counted, for either tenant
    other_send = theirs.split(".")[0]
    c = client.get(f"/v1/stats/jobs/{other_send}", headers=other.headers).json()["counts"]
    assert c["opened"] == 0
    assert client.get(f"/v1/stats/jobs/{other_send}", headers=mine.headers).status_code == 404
    assert client.get(f"/v1/stats/jobs/{other_send}/receipts", headers=mine.headers).status_code == 404


def test_a_client_key_behind_the_server_prefix_is_no_key(client, settings, tenant):
    """Every route's refusal of a client key: tests/integration/test_security_isolation.py."""
    key = _client_key(client, settings, tenant.service)
    assert client.get("/v1/templates", headers=bearer(key)).status_code == 403
    assert client.get("/v1/templates", headers=bearer("nk_" + key.removeprefix("nck_"))).status_code == 401


def test_client_keys_are_listed_and_revoked_like_the_others(client, settings, tenant):
    service, _ = tenant
    key = _client_key(client, settings, service)
    listed = client.get(f"/v1/admin/services/{service}/api-keys", headers=admin_headers(settings)).json()["items"]
    [mine] = [k for k in listed if k["kind"] == "client"]
    assert "api_key" not in mine and key not in str(listed)
    body = {"events": [{"notification_id": "x", "event": "opened", "at": _now()}]}
    assert client.post("/v1/receipts", json=body, headers=bearer(key)).status_code == 200
    r = client.delete(f"/v1/admin/services/{service}/api-keys/{mine['key_id']}", headers=admin_headers(settings))
    assert r.status_code == 204
    assert client.post("/v1/receipts", json=body, headers=bearer(key)).status_code == 401


def test_limits_refuse_the_whole_batch_before_anything_is_written(client, settings, tenant, emu_app):
    service, headers = tenant
    token = random_token("el")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/SINGLE/s", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    send_id = client.post(f"/v1/users/{user}/send", json={"type": "s"}, headers=headers).json()["send_id"]
    nid = _nid_fcm(emu_app, token)
    key = _client_key(client, settings, service)
    one = {"notification_id": nid, "event": "delivered", "at": _now()}
    r = client.post(
        "/v1/receipts",
        content=b"x",
        headers=bearer(key)
        | {"Content-Type": "application/json", "Content-Length": str(settings.api_max_body_bytes + 1)},
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    too_many = {"events": [one] * (settings.receipts_max_events + 1)}
    r = client.post("/v1/receipts", json=too_many, headers=bearer(key))
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["body", "events"]
    r = client.post("/v1/receipts", json={"events": [one | {"action": "a"}]}, headers=bearer(key))
    assert r.status_code == 422, r.text
    r = client.post("/v1/receipts", json={"events": [one | {"event": "read"}]}, headers=bearer(key))
    assert r.status_code == 422, r.text
    assert client.get(f"/v1/stats/jobs/{send_id}", headers=headers).json()["counts"]["delivered"] == 0


def test_a_drifted_count_is_repaired_and_a_pruned_job_takes_its_counters_with_it(
    client, settings, runtime, tenant, emulator, emu_runtime
):
    """Counters take no TTL: the job's go when its row is pruned (docs/ENGAGEMENT.md "Retention"),
    which is never before its receipts' retention: a job finished 20 days ago (past NOTEE_RETENTION_DAYS,
    14) still takes receipts and shows its figures; one finished and made 31 days ago is gone."""
    service, headers = tenant
    token = random_token("ep")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/TOPIC/news", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/x", headers=headers).status_code in (200, 201)
    job_id = client.post("/v1/topics/news/x/publish", json={}, headers=headers).json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    key = _client_key(client, settings, service)
    nid = _nid_fcm(emulator, token)
    assert _receipts(client, key, [{"notification_id": nid, "event": "opened", "at": _now()}])["accepted"] == 1
    source = notification_id.source_of_job(job_id)
    assert runtime.statements.job_counts(service, source) == {"opened": 1}
    # a drifted count (two copies of a batch raced) is set back to the stored receipts
    drift = ScopeKeys("news", None, "2000-01-01")
    runtime.statements.count(service, {(source, drift, "opened"): 2, (source, drift, "clicked"): 1})
    assert runtime.statements.job_counts(service, source) == {"opened": 3, "clicked": 1}
    assert engagement_stats.recount_job(runtime, service, job_id) == {"opened": 1}
    assert runtime.statements.job_counts(service, source) == {"opened": 1, "clicked": 0}
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE fanout_job SET finished_at = UTC_TIMESTAMP(6) - INTERVAL 20 DAY WHERE job_id = :j"),
            {"j": job_id},
        )
    assert settings.retention_days < 20 < settings.receipts_retention_days < 31
    prune_jobs(runtime)  # the default window: the job stays as long as its receipts
    assert client.get(f"/v1/stats/jobs/{job_id}", headers=headers).json()["counts"]["opened"] == 1
    late = {"notification_id": nid, "event": "dismissed", "at": _now()}
    assert _receipts(client, key, [late])["accepted"] == 1
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "UPDATE fanout_job SET finished_at = UTC_TIMESTAMP(6) - INTERVAL 31 DAY,"
                " created_at = UTC_TIMESTAMP(6) - INTERVAL 31 DAY WHERE job_id = :j"
            ),
            {"j": job_id},
        )
    assert prune_jobs(runtime) >= 1
    assert runtime.statements.job_counts(service, source) == {}
    assert client.get(f"/v1/stats/jobs/{job_id}", headers=headers).status_code == 404


def test_a_web_app_may_post_receipts_from_its_own_origin_and_nothing_else(client, settings, tenant):
    """The web snippet (docs/ENGAGEMENT.md) runs in a service worker on the site's origin: the
    browser's preflight is answered and the receipts' answers, refusals too, are readable there. No
    other route answers a cross-origin browser."""
    service, headers = tenant
    origin = {"Origin": "https://shop.example"}
    pre = client.options(
        "/v1/receipts",
        headers=origin | {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"},
    )
    assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == "*", pre.headers
    assert "authorization" in pre.headers["access-control-allow-headers"]
    assert pre.headers["access-control-allow-methods"] == "POST"
    key = _client_key(client, settings, service)
    body = {"events": [{"notification_id": "x", "event": "opened", "at": _now()}]}
    r = client.post("/v1/receipts", json=body, headers=bearer(key) | origin)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*", r.text
    assert r.json()["rejected"][0]["reason"] == "not_found"
    refused = client.post("/v1/receipts", json=body, headers=origin)
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "*"
    other = client.get("/v1/templates", headers=headers | origin)
    assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
    assert client.options("/v1/templates", headers=origin).status_code in (401, 405)
