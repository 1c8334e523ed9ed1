"""Web Push end to end (docs/WEB-PUSH.md): VAPID keys through the admin API, WEB devices registering
a browser's subscription, sends and fan-outs reaching the emulator's push services (which verify the
VAPID JWT and decrypt what Notee encrypted), pruning, retries, size refusals and key rotation; a
second tenant sees none of it."""

from __future__ import annotations

import itertools
import logging
from urllib.parse import quote

import pytest

from notee.core import notification_id
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import admin_headers, new_template, new_user, random_token
from tests.support.webpush import browser as _browser
from tests.support.webpush import vapid as _vapid

pytestmark = pytest.mark.tenant(credentials=True, timezone="Asia/Seoul")


def _send(client, headers, user_id, **body):
    return client.post(f"/v1/users/{user_id}/send", json=body, headers=headers)


def test_a_vapid_key_is_generated_uploaded_read_and_never_returned(client, settings, tenant, make_tenant, caplog):
    service, headers = tenant
    other, other_headers = make_tenant()
    admin = admin_headers(settings)
    caplog.set_level(logging.DEBUG)
    assert client.get("/v1/service/webpush", headers=headers).status_code == 404
    public = _vapid(client, settings, service)
    r = client.get("/v1/service/webpush", headers=headers)
    assert r.status_code == 200 and r.json() == {"public_key": public, "subject": "mailto:ops@example.com"}
    assert client.get(f"/v1/admin/services/{service}/credentials", headers=admin).json()["webpush"] is True
    # the other tenant has no key, and cannot read this one
    assert client.get("/v1/service/webpush", headers=other_headers).status_code == 404
    assert client.get(f"/v1/admin/services/{other}/credentials", headers=admin).json()["webpush"] is False

    # an upload in the web-push tools' format: 32 raw bytes, base64url
    raw = "Z3J1ZmZhbG9fc2F5c19oZWxsb193b3JsZF8xMjM0NTY"
    r = client.put(
        f"/v1/admin/services/{service}/credentials/webpush",
        json={"subject": "https://example.com/contact", "private_key": raw},
        headers=admin,
    )
    assert r.status_code == 200, r.text
    uploaded = r.json()["public_key"]
    assert uploaded != public and r.json()["generated"] is False
    for bad in ({"subject": "ops@example.com", "private_key": raw}, {"subject": "mailto:a@b.c", "private_key": "nope"}):
        r = client.put(f"/v1/admin/services/{service}/credentials/webpush", json=bad, headers=admin)
        assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"][-1] in ("subject", "private_key"), r.text
    assert client.get("/v1/service/webpush", headers=headers).json()["public_key"] == uploaded  # nothing written
    assert raw not in caplog.text and "PRIVATE KEY" not in caplog.text

    assert client.delete(f"/v1/admin/services/{service}/credentials/webpush", headers=admin).status_code == 204
    assert client.get("/v1/service/webpush", headers=headers).status_code == 404


def test_a_browser_registers_its_subscription_and_bad_ones_are_422(client, settings, tenant, make_tenant, emulator):
    _, headers = tenant
    _, other_headers = make_tenant()
    user = new_user(client, headers)
    sub, token = _browser(client, headers, emulator, user)
    assert token.endswith("." + sub["endpoint"])
    body = {"os": "WEB", "subscription": {"endpoint": sub["endpoint"], "keys": sub["keys"]}}
    assert client.post(f"/v1/users/{user}/devices", json=body, headers=headers).status_code == 200  # idempotent
    for change, loc in (
        ({"endpoint": sub["endpoint"].replace("https:", "http:")}, "endpoint"),
        ({"keys": {"p256dh": sub["keys"]["auth"], "auth": sub["keys"]["auth"]}}, "p256dh"),
        ({"keys": {"p256dh": sub["keys"]["p256dh"], "auth": "AAAA"}}, "auth"),
    ):
        bad = {"os": "WEB", "subscription": {**body["subscription"], **change}}
        r = client.post(f"/v1/users/{user}/devices", json=bad, headers=headers)
        assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"][-1] == loc, r.text
    r = client.post(
        f"/v1/users/{user}/devices", json={"os": "AOS", **{"subscription": body["subscription"]}}, headers=headers
    )
    assert r.status_code == 422
    assert [d["token"] for d in client.get(f"/v1/users/{user}/devices", headers=headers).json()["items"]] == [token]
    # another tenant sees neither the user nor the device
    assert client.get(f"/v1/users/{user}/devices", headers=other_headers).status_code == 404
    path = f"/v1/users/{user}/devices/{quote(token, safe='')}"
    assert client.delete(path, headers=other_headers).status_code == 404
    assert client.delete(path, headers=headers).status_code == 204
    assert client.get(f"/v1/users/{user}/devices", headers=headers).json()["items"] == []


def test_a_single_send_reaches_each_push_service_encrypted_and_signed(client, settings, tenant, emu_app):
    service, headers = tenant
    public = _vapid(client, settings, service)
    aos = random_token("a")
    user = new_user(client, headers, devices=[(aos, "AOS")])
    subs = [_browser(client, headers, emu_app, user, flavor, public)[0] for flavor in ("fcm", "mozilla", "apple")]
    new_template(
        client, headers, "SINGLE", "hello", title="Hi {{name}}", body="Order {{order}}", data={"o": "{{order}}"}
    )

    r = _send(client, headers, user, type="hello", variables={"name": "Ann", "order": "42"})
    assert r.status_code == 200, r.text
    assert (r.json()["devices"], r.json()["delivered"], r.json()["failed"]) == (4, 4, 0), r.text
    assert emu_app.deliveries(aos)["fcm"] == 1  # the phone still goes through FCM
    for sub in subs:
        (push,) = emu_app.web_pushes(sub["id"])
        assert push["decrypt_error"] is None
        data = dict(push["payload"]["data"])
        nid = data.pop("notee_id")  # the notification id, as on FCM and APNs (docs/ENGAGEMENT.md)
        assert nid.startswith(r.json()["send_id"] + ".") and notification_id.parse(nid) is not None, nid
        assert {**push["payload"], "data": data} == {"title": "Hi Ann", "body": "Order 42", "data": {"o": "42"}}
        assert push["vapid"]["aud"] == emu_app.url.rstrip("/") and push["vapid"]["sub"] == "mailto:ops@example.com"
        assert push["urgency"] == "high" and push["ttl"] == 2419200 and push["bytes"] <= 4096


def test_a_gone_subscription_is_pruned_and_429_is_retried(client, settings, tenant, emu_app):
    service, headers = tenant
    public = _vapid(client, settings, service)
    user = new_user(client, headers)
    gone, gone_token = _browser(client, headers, emu_app, user, "mozilla", public)
    busy, busy_token = _browser(client, headers, emu_app, user, "fcm", public)
    emu_app.web_gone(gone["id"], status=410)
    emu_app.fault("webpush", 429, match=busy["id"], times=1, retry_after=1)
    new_template(client, headers, "SINGLE", "ping", title="Ping", body="Pong")
    r = _send(client, headers, user, type="ping")
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in ("delivered", "pruned", "retried", "failed")} == {
        "delivered": 1,
        "pruned": 1,
        "retried": 1,
        "failed": 0,
    }
    assert len(emu_app.web_pushes(busy["id"])) == 1
    tokens = [d["token"] for d in client.get(f"/v1/users/{user}/devices", headers=headers).json()["items"]]
    assert tokens == [busy_token] and gone_token not in tokens


def test_an_oversized_push_is_refused_at_publish_time(client, settings, tenant, make_tenant, emu_app):
    service, headers = tenant
    _vapid(client, settings, service)
    user = new_user(client, headers)
    sub, _ = _browser(client, headers, emu_app, user)
    # fits FCM's and APNs' 4,096 bytes, but not once encrypted for a browser
    new_template(client, headers, "SINGLE", "big", title="t", body="{{a}}{{b}}")
    new_template(client, headers, "TOPIC", "big", title="t", body="{{a}}{{b}}")
    big = {"a": "x" * 1985, "b": "y" * 1990}  # APNs 4,092 bytes with the notification id; a browser 4,111
    r = _send(client, headers, user, type="big", variables=big)
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["payload", "web"], r.text
    r = client.post("/v1/topics/big/all/publish", json={"variables": big}, headers=headers)
    assert r.status_code == 422 and r.json()["error"]["code"] == "payload_too_large", r.text
    # a template that reads the recipient: its fallback (the job's own text, an empty recipient) is
    # what a recipient whose render fails receives; over the limit, it is refused at publish time too
    new_template(client, headers, "TOPIC", "bigfor", title="t", body="{{ recipient.name }}{{a}}{{b}}")
    r = client.post("/v1/topics/bigfor/all/publish", json={"variables": big}, headers=headers)
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["payload", "web"], r.text
    assert emu_app.web_pushes(sub["id"]) == []
    # a service without a VAPID key keeps FCM's and APNs' limits only
    _, fcm_only = make_tenant()
    new_template(client, fcm_only, "TOPIC", "big", title="t", body="{{a}}{{b}}")
    assert client.post("/v1/topics/big/all/publish", json={"variables": big}, headers=fcm_only).status_code == 202


def test_after_a_vapid_rotation_old_subscriptions_fail_with_a_reason(client, settings, tenant, emu_app):
    service, headers = tenant
    old = _vapid(client, settings, service)
    user = new_user(client, headers)
    _browser(client, headers, emu_app, user, "apple", old)
    new_template(client, headers, "SINGLE", "ping", title="Ping", body="Pong")
    assert _send(client, headers, user, type="ping").json()["delivered"] == 1
    _vapid(client, settings, service)  # rotated: the browser subscribed with the old public key
    r = _send(client, headers, user, type="ping")
    assert (r.json()["delivered"], r.json()["failed"], r.json()["pruned"]) == (0, 1, 0), r.text
    letters = client.get("/v1/dead-letters", headers=headers).json()["items"]
    assert any("vapid_rejected: 403" in letter["reason"] for letter in letters), letters


def test_a_topic_publish_fans_out_to_browsers_with_ttl_topic_and_platforms(
    client, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = _vapid(client, settings, service)
    new_template(client, headers, "TOPIC", "news", title="News", body="Today", ttl_seconds=600)
    aos = random_token("a")
    user = new_user(client, headers, devices=[(aos, "AOS")])
    sub, _ = _browser(client, headers, emulator, user, "mozilla", public)
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/daily", headers=headers).status_code in (200, 201)

    r = client.post(
        "/v1/topics/news/daily/publish",
        json={"platforms": ["WEB"], "payload": {"collapse_key": "daily"}},
        headers=headers,
    )
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    (push,) = emulator.web_pushes(sub["id"])
    assert push["payload"]["title"] == "News" and push["ttl"] == 600 and push["topic"] == "daily"
    assert push["payload"]["data"]["notee_id"].startswith(r.json()["job_id"].replace("-", "") + ".")
    assert emulator.deliveries(aos)["fcm"] == 0  # the platform filter kept the phone out
    status = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=headers).json()
    assert (status["state"], status["sent"]) == ("done", 1), status


def test_a_browsers_new_subscription_replaces_the_old_one_by_rotation(client, settings, tenant, emu_app):
    service, headers = tenant
    public = _vapid(client, settings, service)
    user = new_user(client, headers)
    old_sub, old_token = _browser(client, headers, emu_app, user, "fcm", public)
    new_template(client, headers, "TOPIC", "news")
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    new_sub = emu_app.web_subscribe("mozilla", public)  # pushsubscriptionchange: a new endpoint and keys
    new_token = f"{new_sub['keys']['p256dh']}.{new_sub['keys']['auth']}.{new_sub['endpoint']}"
    r = client.post(
        "/v1/devices/rotate", json={"old_token": old_token, "new_token": "plain-token-123"}, headers=headers
    )
    assert r.status_code == 422, r.text  # a browser's token must stay a subscription
    r = client.post("/v1/devices/rotate", json={"old_token": old_token, "new_token": new_token}, headers=headers)
    assert r.status_code == 200 and r.json()["rotated"] == 1, r.text
    subs = client.get(f"/v1/users/{user}/subscriptions", headers=headers).json()
    assert subs["items"], subs  # the topic subscription moved with the device
    new_template(client, headers, "SINGLE", "ping", title="Ping", body="Pong")
    assert _send(client, headers, user, type="ping").json()["delivered"] == 1
    assert len(emu_app.web_pushes(new_sub["id"])) == 1 and emu_app.web_pushes(old_sub["id"]) == []


def test_a_preview_shows_what_a_browser_would_receive(client, settings, tenant):
    service, headers = tenant
    new_template(client, headers, "TOPIC", "news", title="News", body="Today", ttl_seconds=600)
    before = client.post("/v1/topics/news/all/publish/preview", json={}, headers=headers).json()
    assert set(before["variants"][0]["platforms"]) == {"AOS", "IOS"}  # no VAPID key: no WEB
    _vapid(client, settings, service)
    r = client.post("/v1/topics/news/all/publish/preview", json={}, headers=headers)
    assert r.status_code == 200, r.text
    web = r.json()["variants"][0]["platforms"]["WEB"]
    sample = {"notee_id": notification_id.SAMPLE}  # each device's own id, shown as a sample of its length
    assert web["provider"] == "webpush" and web["body"] == {"title": "News", "body": "Today", "data": sample}
    assert web["headers"] == {"ttl": "600", "urgency": "high"} and web["limit"] == 4096
    shown = b'{"title":"News","body":"Today","data":{"notee_id":"' + notification_id.SAMPLE.encode() + b'"}}'
    assert web["bytes"] == len(shown) + 103 and not web["over_limit"]
    only = client.post("/v1/topics/news/all/publish/preview", json={"platforms": ["WEB"]}, headers=headers).json()
    assert set(only["variants"][0]["platforms"]) == {"WEB"}


def test_a_push_services_5xx_is_retried_after_its_retry_after_within_the_phones_budget(
    client, settings, tenant, emu_app
):
    service, headers = tenant
    public = _vapid(client, settings, service)
    phone = random_token("a")
    user = new_user(client, headers, devices=[(phone, "AOS")])
    sub, token = _browser(client, headers, emu_app, user, "fcm", public)
    budget = settings.fanout_max_attempts
    # the push service is down for longer than the budget and says when to come back; FCM is down too,
    # without a Retry-After, so the waits between attempts are the browser's Retry-After (the longest)
    emu_app.fault("webpush", 503, match=sub["id"], times=budget + 5, retry_after=2)
    emu_app.fault("fcm", 503, match=phone, times=budget + 5)
    new_template(client, headers, "SINGLE", "down", title="Down", body="Still down")
    r = _send(client, headers, user, type="down")
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in ("delivered", "pruned", "failed")} == {"delivered": 0, "pruned": 0, "failed": 2}
    answers = emu_app.web_answers(sub["id"])
    # the same attempts budget as the phone's FCM: each asked `budget` times, then given up
    assert [a["status"] for a in answers] == [503] * budget, answers
    assert emu_app.deliveries(phone)["attempts"] == budget
    # each retry waited at least the Retry-After the push service gave (without it: 0.5 s, 1 s, ... of jitter)
    gaps = [later["at"] - earlier["at"] for earlier, later in itertools.pairwise(answers)]
    assert min(gaps) >= 2.0, gaps
    letters = client.get("/v1/dead-letters", headers=headers).json()["items"]
    reasons = {d["device_token"]: d["reason"] for d in letters if d["device_token"] in (token, phone)}
    assert reasons[token].startswith(f"gave up after {budget} attempts") and "503" in reasons[token], reasons
    assert reasons[phone].startswith(f"gave up after {budget} attempts"), reasons
    assert emu_app.web_pushes(sub["id"]) == []
