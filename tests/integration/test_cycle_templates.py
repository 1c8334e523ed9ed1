"""CYCLE templates with logic and rich fields, end to end through a cycle minute (issue 34;
docs/TEMPLATES.md, docs/PAYLOADS.md): subscriptions made through the API, the scheduler's minute
makes the job (rendered once, with the template's defaults: a cycle has no request), the worker
renders each recipient's text when the template reads the recipient (name, tags, locale), and the
emulator shows what each device got: Liquid logic, the payload, a variant's subtitle, a silent push."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, timezone

import pytest

from notee.core.notification_id import device_part
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import admin_headers, apns_credentials, random_token
from tests.support.scheduler import jobs_of, scheduler

pytestmark = pytest.mark.tenant(credentials=True)


def _subscriber(client, headers, profile: dict, device: dict, when: tuple[int, int]) -> str:
    """A user with one device subscribed to CYCLE ``remind`` on Mondays at ``when`` in Seoul."""
    r = client.put(f"/v1/users/cy-{secrets.token_hex(5)}", json=profile, headers=headers)
    assert r.status_code == 201, r.text
    user = r.json()["user_id"]
    assert client.post(f"/v1/users/{user}/devices", json=device, headers=headers).status_code == 201
    r = client.put(
        f"/v1/users/{user}/subscriptions/cycle/remind",
        json={"days": ["MON"], "hour": when[0], "minute": when[1], "timezone": "Asia/Seoul"},
        headers=headers,
    )
    assert r.status_code in (200, 201), r.text
    return str(user)


def _fire(runtime, emu_runtime, service: str, when: tuple[int, int]) -> None:
    """The scheduler's minute for Monday ``when`` in Seoul (a date no other test picks), then the
    workers until the tenant's queue is idle."""
    seoul = datetime(2032, 3, 1, *when, tzinfo=timezone(timedelta(hours=9)))  # a Monday
    minute = seoul.astimezone(UTC)
    result = scheduler(runtime).run_minute(minute, now=minute)
    assert result.jobs_created >= 1, result
    run_worker_until_idle(emu_runtime, [service])


def _when() -> tuple[int, int]:
    return secrets.randbelow(24), secrets.randbelow(60)


def test_a_cycle_template_with_logic_reads_each_recipient_through_a_cycle_minute(
    client, settings, runtime, tenant, emulator, emu_runtime
):
    service, headers = tenant
    r = client.put(
        f"/v1/admin/services/{service}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text
    template = {
        "title": "{% if recipient.tags.vip %}VIP: {% endif %}{{ n | plural: '# reminder', '# reminders' }}",
        "body": "Hi {{ recipient.name | default: 'there' }}, plan {{ recipient.tags.plan | default: 'free' }}",
        "defaults": {"n": "2"},
        "payload": {"badge": 2, "ios": {"subtitle": "{{ n }} due"}, "collapse_key": "remind"},
        "variants": {
            "de": {
                "title": "{{ n | plural: '# Erinnerung', '# Erinnerungen' }}",
                "body": "Hallo {{ recipient.name | default: 'du' }}",
                "subtitle": "{{ n }} fällig",
            }
        },
    }
    r = client.put("/v1/templates/CYCLE/remind", json=template, headers=headers)
    assert r.status_code == 201, r.text
    when = _when()
    ann, bob, ios = random_token("cya"), random_token("cyb"), random_token("cyi")
    ann_user = _subscriber(client, headers, {"name": "Ann"}, {"token": ann, "os": "AOS"}, when)
    r = client.patch(f"/v1/users/{ann_user}/tags", json={"vip": True, "plan": "pro"}, headers=headers)
    assert r.status_code == 200, r.text
    _subscriber(client, headers, {"name": ""}, {"token": bob, "os": "AOS", "locale": "en"}, when)
    _subscriber(client, headers, {"name": "Jörg"}, {"token": ios, "os": "IOS", "locale": "de-DE"}, when)
    _fire(runtime, emu_runtime, service, when)
    [(_, target, _)] = jobs_of(runtime, service)
    assert (target["day"], target["hour"], target["minute"]) == ("MON", *when)
    seen = {t: emulator.last_request(t) for t in (ann, bob, ios)}
    assert all(seen.values()), seen
    note = seen[ann]["body"]["notification"]
    assert (note["title"], note["body"]) == ("VIP: 2 reminders", "Hi Ann, plan pro")
    note = seen[bob]["body"]["notification"]
    assert (note["title"], note["body"]) == ("2 reminders", "Hi there, plan free")
    assert seen[bob]["body"]["android"]["collapse_key"] == "remind"
    aps = seen[ios]["body"]["aps"]
    assert aps["alert"] == {"title": "2 Erinnerungen", "body": "Hallo Jörg", "subtitle": "2 fällig"}
    assert aps["badge"] == 2


def test_a_silent_cycle_template_wakes_the_app_through_a_cycle_minute(
    client, settings, runtime, tenant, emulator, emu_runtime
):
    service, headers = tenant
    r = client.put(
        f"/v1/admin/services/{service}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text
    body = {
        "title": "",
        "body": "",
        "data": {"sync": "{{ what }}"},
        "defaults": {"what": "inbox"},
        "payload": {"kind": "background"},
    }
    assert client.put("/v1/templates/CYCLE/remind", json=body, headers=headers).status_code == 201
    when = _when()
    android, ios = random_token("cbg"), random_token("cbi")
    _subscriber(client, headers, {"name": "A"}, {"token": android, "os": "AOS"}, when)
    _subscriber(client, headers, {"name": "B"}, {"token": ios, "os": "IOS"}, when)
    _fire(runtime, emu_runtime, service, when)
    fcm_seen, apns_seen = emulator.last_request(android), emulator.last_request(ios)
    assert fcm_seen is not None and "notification" not in fcm_seen["body"]
    nid = fcm_seen["body"]["data"].pop("notee_id")  # every push carries its notification id
    assert fcm_seen["body"]["data"] == {"sync": "inbox"} and nid.endswith("." + device_part(android))
    assert apns_seen is not None and apns_seen["body"].pop("notee_id").endswith("." + device_part(ios))
    assert apns_seen["body"] == {"aps": {"content-available": 1}, "sync": "inbox"}
    assert (apns_seen["headers"]["apns-push-type"], apns_seen["headers"]["apns-priority"]) == ("background", "5")
