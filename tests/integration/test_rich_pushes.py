"""Rich, silent and per-platform pushes end to end (docs/PAYLOADS.md): a template's payload, a
publish's and a single send's, rendered once and delivered; what each device got, read from the
emulator; bad values 422 naming the field with nothing written or queued; the size per platform
with the exact byte count; tenant isolation unchanged.

The rules that need no server: tests/unit/test_payloads.py; the emulator's own rules:
tests/integration/test_emulator_rich_rules.py."""

from __future__ import annotations

import pytest

from notee.core import notification_id
from notee.domain import payloads
from notee.providers import apns
from notee.providers.payload import Rich
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import admin_headers, apns_credentials, new_user, random_token
from tests.support.stores import snapshot

pytestmark = pytest.mark.tenant(credentials=True)

RICH = {
    "image": "https://cdn.example.com/{{sku}}.jpg",
    "badge": 4,
    "sound": "chime.caf",
    "click_action": "OPEN_ORDER",
    "link": "shop://orders/{{order}}",
    "category": "ORDER",
    "collapse_key": "orders",
    "analytics_label": "orders",
    "android": {"channel_id": "orders", "color": "#3366FF", "visibility": "PRIVATE"},
    "ios": {"thread_id": "orders", "interruption_level": "time-sensitive", "subtitle": "Order {{order}}"},
    "override": {"android": {"direct_boot_ok": True}, "apns": {"stale-date": 1900000000}},
}


def _with_apns(client, settings, service):
    r = client.put(
        f"/v1/admin/services/{service}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text


def test_template_keeps_its_payload_and_a_single_send_delivers_every_field(client, settings, tenant, emu_app):
    service, headers = tenant
    _with_apns(client, settings, service)
    android, ios = random_token("ra"), random_token("ri")
    user = new_user(client, headers, devices=[(android, "AOS"), (ios, "IOS")])
    r = client.put(
        "/v1/templates/SINGLE/order", json={"title": "Hi", "body": "Shipped", "payload": RICH}, headers=headers
    )
    assert r.status_code == 201, r.text
    assert r.json()["payload"] == RICH
    assert client.get("/v1/templates/SINGLE/order", headers=headers).json()["payload"] == RICH
    r = client.post(
        f"/v1/users/{user}/send",
        json={"type": "order", "variables": {"sku": "p42", "order": "42"}, "payload": {"badge": 5}},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["delivered"] == 2
    fcm_seen = emu_app.last_request(android)
    assert fcm_seen is not None
    note = fcm_seen["device"]["android"]["notification"]
    assert note["image"] == "https://cdn.example.com/p42.jpg"
    assert (note["channel_id"], note["color"], note["visibility"]) == ("orders", "#3366FF", "PRIVATE")
    assert (note["sound"], note["click_action"]) == ("chime.caf", "OPEN_ORDER")
    assert fcm_seen["body"]["data"]["link"] == "shop://orders/42"
    assert fcm_seen["body"]["android"]["collapse_key"] == "orders"
    assert fcm_seen["body"]["android"]["direct_boot_ok"] is True
    assert fcm_seen["body"]["fcm_options"] == {"analytics_label": "orders"}
    apns_seen = emu_app.last_request(ios)
    assert apns_seen is not None and apns_seen["api"] == "apns"
    aps = apns_seen["body"]["aps"]
    assert aps["alert"] == {"title": "Hi", "body": "Shipped", "subtitle": "Order 42"}
    assert (aps["badge"], aps["sound"], aps["category"], aps["thread-id"]) == (5, "chime.caf", "ORDER", "orders")
    assert (aps["interruption-level"], aps["mutable-content"], aps["stale-date"]) == ("time-sensitive", 1, 1900000000)
    assert apns_seen["body"]["link"] == "shop://orders/42"
    assert apns_seen["body"]["image"] == "https://cdn.example.com/p42.jpg"
    assert apns_seen["headers"]["apns-push-type"] == "alert"
    assert apns_seen["headers"]["apns-collapse-id"] == "orders"


def test_background_topic_publish_is_silent_on_both_platforms(client, settings, tenant, emulator, emu_runtime):
    service, headers = tenant
    _with_apns(client, settings, service)
    android, ios = random_token("ba"), random_token("bi")
    user = new_user(client, headers, devices=[(android, "AOS"), (ios, "IOS")])
    r = client.put(
        "/v1/templates/TOPIC/sync",
        json={"title": "", "body": "", "data": {"sync": "inbox"}, "payload": {"kind": "background"}},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    assert client.put(f"/v1/users/{user}/subscriptions/topic/sync/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/sync/all/publish", json={"payload": {"collapse_key": "inbox"}}, headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    status = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=headers).json()
    assert (status["state"], status["sent"]) == ("done", 2), status
    fcm_seen = emulator.last_request(android)
    assert fcm_seen is not None and "notification" not in fcm_seen["body"]
    assert notification_id.parse(fcm_seen["body"]["data"].pop(notification_id.KEY)) is not None
    assert fcm_seen["body"]["data"] == {"sync": "inbox"}
    assert fcm_seen["body"]["android"]["collapse_key"] == "inbox"
    apns_seen = emulator.last_request(ios)
    assert apns_seen is not None
    assert notification_id.parse(apns_seen["body"].pop(notification_id.KEY)) is not None
    assert apns_seen["body"] == {"aps": {"content-available": 1}, "sync": "inbox"}
    assert (apns_seen["headers"]["apns-push-type"], apns_seen["headers"]["apns-priority"]) == ("background", "5")


def test_badge_only_push_clears_the_badge(client, settings, tenant, emu_app):
    service, headers = tenant
    _with_apns(client, settings, service)
    ios = random_token("bo")
    user = new_user(client, headers, devices=[(ios, "IOS")])
    r = client.put(
        "/v1/templates/SINGLE/badge",
        json={"title": "", "body": "", "payload": {"badge": 0, "sound": None}},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    assert client.post(f"/v1/users/{user}/send", json={"type": "badge"}, headers=headers).json()["delivered"] == 1
    seen = emu_app.last_request(ios)
    assert seen is not None and notification_id.parse(seen["body"].pop(notification_id.KEY)) is not None
    assert seen["body"] == {"aps": {"badge": 0}}
    assert seen["headers"]["apns-push-type"] == "alert"


@pytest.mark.parametrize(
    "body,loc",
    [
        (
            {"title": "t", "body": "b", "payload": {"android": {"color": "blue"}}},
            ["body", "payload", "android", "color"],
        ),
        ({"title": "t", "body": "b", "payload": {"image": "http://x/a.png"}}, ["body", "payload", "image"]),
        ({"title": "t", "body": "b", "payload": {"kind": "background"}}, ["body", "title"]),
        ({"title": "", "body": "", "payload": {"kind": "background", "badge": 1}}, ["body", "payload", "badge"]),
        ({"title": "", "body": "b"}, ["title"]),
        (
            {
                "title": "",
                "body": "",
                "payload": {"kind": "background"},
                "variants": {"de": {"title": "t", "body": "b"}},
            },
            ["variants"],
        ),
        (
            {"title": "t", "body": "b", "payload": {"override": {"apns": {"alert": "x"}}}},
            ["body", "payload", "override", "apns", "alert"],
        ),
        (
            {"title": "t", "body": "b", "payload": {"override": {"apns": {"stale-date": "soon"}}}},
            ["body", "payload", "override", "apns", "stale-date"],
        ),
        (
            {"title": "t", "body": "b", "payload": {"override": {"android": {"notification": {"sticky": "y"}}}}},
            ["body", "payload", "override", "android", "notification", "sticky"],
        ),
        (
            {"title": "t", "body": "b", "payload": {"ios": {"subtitle": "{{ bad name }}"}}},
            ["body", "payload", "ios", "subtitle"],
        ),
    ],
)
def test_bad_template_payload_is_422_naming_the_field_and_nothing_written(client, runtime, tenant, body, loc):
    service, headers = tenant
    before = snapshot(runtime, service)
    r = client.put("/v1/templates/TOPIC/bad", json=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"][0]["loc"] == loc
    assert snapshot(runtime, service) == before


def test_bad_publish_and_send_payloads_are_422_with_nothing_queued_or_sent(client, runtime, tenant, emu_app):
    service, headers = tenant
    token = random_token("bp")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/TOPIC/news", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    assert client.put("/v1/templates/SINGLE/news", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    before = snapshot(runtime, service)
    for payload, loc in [
        ({"android": {"visibility": "HIDDEN"}}, ["body", "payload", "android", "visibility"]),
        ({"kind": "background"}, ["body", "title"]),  # the template's title is an alert
        ({"badge": "3"}, ["body", "payload", "badge"]),
    ]:
        r = client.post("/v1/topics/news/all/publish", json={"payload": payload}, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"][0]["loc"] == loc
        r = client.post(f"/v1/users/{user}/send", json={"type": "news", "payload": payload}, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"][0]["loc"] == loc
    assert snapshot(runtime, service) == before
    assert emu_app.last_request(token) is None


def test_payload_too_large_names_the_platform_and_its_exact_byte_count(client, runtime, tenant):
    service, headers = tenant
    filler = {"apns": {"x": "y" * 2000}}
    spec = {"override": filler, "ios": {"subtitle": "s" * 200}}
    assert (
        client.put(
            "/v1/templates/TOPIC/big",
            json={"title": "t", "body": "{{b}}", "payload": spec},
            headers=headers,
        ).status_code
        == 201
    )
    rich = Rich.from_spec(payloads.check_payload(spec))
    body = "b" * 2000
    size = apns.payload_bytes("t", body, {}, rich)
    before = snapshot(runtime, service)
    r = client.post("/v1/topics/big/all/publish", json={"variables": {"b": body}}, headers=headers)
    assert r.status_code == 422, r.text
    assert f"APNS payload would be {size} bytes; at most 4096" in r.json()["error"]["message"]
    assert snapshot(runtime, service) == before


def test_another_tenants_template_and_its_payload_stay_invisible(client, tenant, make_tenant):
    _, headers = tenant
    _, other_headers = make_tenant()
    r = client.put(
        "/v1/templates/SINGLE/private", json={"title": "t", "body": "b", "payload": {"badge": 1}}, headers=headers
    )
    assert r.status_code == 201, r.text
    assert client.get("/v1/templates/SINGLE/private", headers=other_headers).status_code == 404
    assert all(
        t.get("payload") != {"badge": 1} for t in client.get("/v1/templates", headers=other_headers).json()["items"]
    )


def test_a_dead_lettered_rich_push_is_replayed_with_its_payload(client, tenant, emu_app):
    _, headers = tenant
    token = random_token("dl")
    user = new_user(client, headers, devices=[(token, "AOS")])
    body = {
        "title": "",
        "body": "",
        "data": {"sync": "1"},
        "payload": {"kind": "background", "link": "app://s", "collapse_key": "s"},
    }
    assert client.put("/v1/templates/SINGLE/sync", json=body, headers=headers).status_code == 201
    emu_app.fault("fcm", 429, match=token, times=100, retry_after=0)
    r = client.post(f"/v1/users/{user}/send", json={"type": "sync"}, headers=headers)
    assert r.status_code == 200 and r.json()["failed"] == 1, r.text
    [letter] = client.get("/v1/dead-letters", headers=headers).json()["items"]
    assert letter["payload"]["rich"] == body["payload"]
    emu_app.reset()
    r = client.post("/v1/dead-letters/replay", json={"ids": [letter["id"]]}, headers=headers)
    assert r.json()["delivered"] == 1, r.text
    seen = emu_app.last_request(token)
    assert seen is not None and "notification" not in seen["body"]
    assert seen["body"]["data"] == {"sync": "1", "link": "app://s"}
    assert seen["body"]["apns"]["headers"]["apns-push-type"] == "background"
    assert seen["body"]["android"]["collapse_key"] == "s"
