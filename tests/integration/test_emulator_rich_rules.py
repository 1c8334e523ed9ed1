"""The emulator knows the rich fields' rules (notee/emulator/rules.py, docs/PAYLOADS.md): pinned with
the reference clients (firebase-admin's message builder, aioapns) sending the same fields, and with
Notee's own senders; bad values get the providers' answers (FCM INVALID_ARGUMENT naming the field,
APNs 400 BadPriority / InvalidPushType) and what a device would get is recorded."""

from __future__ import annotations

import secrets
import warnings

import pytest

from notee.domain import payloads
from notee.providers.base import Delivered, Message
from notee.providers.payload import Rich
from tests.integration.test_providers_apns import aioapns_send
from tests.integration.test_providers_apns import ours_send as apns_send
from tests.integration.test_providers_fcm import PROJECT, sa_tokens, sdk  # noqa: F401  (the fixture)
from tests.integration.test_providers_fcm import ours_send as fcm_send
from tests.support.emulator import deliveries_per_token
from tests.unit.test_payloads import ALERT, _sdk_alert


def _token(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(8)}"


def _bearer(emulator) -> str:
    """An access token of the emulator's OAuth endpoint (a realistic emulator accepts no other)."""
    import asyncio

    return "Bearer " + asyncio.run(sa_tokens(emulator).token())


def _rich_msg(token: str, os_: str, spec: dict, title: str = "Hi", body: str = "Shipped") -> Message:
    rich = Rich.from_spec(payloads.check_payload(spec))
    assert rich is not None
    return Message(token, os_, title, body, {"a": "1"}, 60, "high", rich.collapse_key, rich)


def test_firebase_admins_message_with_every_field_is_accepted_and_recorded_like_ours(emulator, sdk):
    from firebase_admin import messaging

    theirs = _token("fa")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        message = _sdk_alert(1000)
        message.token = theirs
        messaging.send(message, app=sdk)
    ours = _token("ours")
    assert isinstance(fcm_send(emulator, [_rich_msg(ours, "AOS", ALERT)])[0], Delivered)
    seen_theirs, seen_ours = emulator.last_request(theirs), emulator.last_request(ours)
    assert seen_theirs is not None and seen_ours is not None
    device = seen_ours["device"]
    assert device["android"]["notification"]["channel_id"] == "orders"
    assert device["android"]["notification"]["color"] == "#3366FF"
    assert device["android"]["notification"]["image"] == ALERT["image"]
    assert device["ios"]["aps"]["alert"] == {
        "title": "Hi",
        "body": "Shipped",
        "subtitle": "Order 42",
        "launch-image": "Launch.png",
    }
    assert device["ios"]["aps"]["badge"] == 3 and device["ios"]["push_type"] == "alert"
    assert seen_theirs["device"]["android"]["notification"] == device["android"]["notification"]
    assert seen_theirs["device"]["ios"]["aps"] == device["ios"]["aps"]


@pytest.mark.parametrize(
    "android_notification,field",
    [
        ({"color": "red"}, "message.android.notification.color"),
        ({"visibility": "HIDDEN"}, "message.android.notification.visibility"),
        ({"notification_priority": "URGENT"}, "message.android.notification.notification_priority"),
        ({"notification_count": -1}, "message.android.notification.notification_count"),
        ({"colour": "#ffffff"}, "message.android.notification"),
    ],
)
def test_fcm_refuses_bad_android_fields_with_invalid_argument(emulator, android_notification, field):
    token = _token("bad")
    message = {
        "token": token,
        "notification": {"title": "t", "body": "b"},
        "android": {"notification": android_notification},
    }
    r = emulator.http.post(
        f"/v1/projects/{PROJECT}/messages:send", json={"message": message}, headers={"authorization": _bearer(emulator)}
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["details"][1]["fieldViolations"][0]["field"] == field
    assert deliveries_per_token(emulator, [token]) == {token: 0}  # stats() has only totals per API


def test_fcm_refuses_a_background_apns_block_with_priority_10_and_notee_classifies_it_failed(emulator):
    token = _token("bg")
    message = {
        "token": token,
        "data": {"k": "v"},
        "apns": {
            "headers": {"apns-push-type": "background", "apns-priority": "10"},
            "payload": {"aps": {"content-available": 1}},
        },
    }
    r = emulator.http.post(
        f"/v1/projects/{PROJECT}/messages:send", json={"message": message}, headers={"authorization": _bearer(emulator)}
    )
    assert r.status_code == 400 and "BadPriority" in r.json()["error"]["message"]
    # Notee's own background message is data-only with priority 5 for APNs: accepted
    ok = _token("bg-ok")
    assert isinstance(fcm_send(emulator, [_rich_msg(ok, "IOS", {"kind": "background"}, "", "")])[0], Delivered)
    seen = emulator.last_request(ok)
    assert seen is not None and "notification" not in seen["body"]
    ios = seen["device"]["ios"]
    assert {k: ios[k] for k in ("aps", "data", "push_type", "priority")} == {
        "aps": {"content-available": 1},
        "data": {"a": "1"},
        "push_type": "background",
        "priority": "5",
    }


def test_aioapns_background_push_with_priority_10_or_an_alert_is_refused(emulator, p8):
    from aioapns.common import PushType

    token = _token("ab")
    r = aioapns_send_typed(emulator, p8, token, {"aps": {"content-available": 1}}, PushType.BACKGROUND, 10)
    assert (r.is_successful, r.status, r.description) == (False, "400", "BadPriority")
    r = aioapns_send_typed(
        emulator, p8, token, {"aps": {"content-available": 1, "alert": "hi"}}, PushType.BACKGROUND, 5
    )
    assert (r.is_successful, r.description) == (False, "InvalidPushType")
    r = aioapns_send_typed(emulator, p8, token, {"aps": {"content-available": 1}, "k": "v"}, PushType.BACKGROUND, 5)
    assert r.is_successful, r.description
    r = aioapns_send(emulator, p8, token, {"aps": {"alert": {"title": "t", "body": "b"}, "badge": 2, "thread-id": "x"}})
    assert r.is_successful, r.description


def test_notee_apns_sender_sends_background_and_rich_alert_that_apns_accepts(emulator, p8):
    bg, alert = _token("nbg"), _token("nal")
    out = apns_send(
        emulator, p8, [_rich_msg(bg, "IOS", {"kind": "background"}, "", ""), _rich_msg(alert, "IOS", ALERT)]
    )
    assert all(isinstance(o, Delivered) for o in out), out
    seen = emulator.last_request(bg)
    assert seen is not None
    assert seen["body"] == {"aps": {"content-available": 1}, "a": "1"}
    assert (seen["headers"]["apns-push-type"], seen["headers"]["apns-priority"]) == ("background", "5")
    seen = emulator.last_request(alert)
    assert seen is not None and seen["body"]["aps"]["interruption-level"] == "time-sensitive"
    assert seen["headers"]["apns-collapse-id"] == "orders"
    # what APNs refuses, Notee's sender reports as failed (never retried, never pruned)
    refused = aioapns_send_typed(emulator, p8, _token("nbad"), {"aps": {"badge": 1}}, None, 7)
    assert (refused.status, refused.description) == ("400", "BadPriority")


def aioapns_send_typed(emulator, p8, token: str, payload: dict, push_type, priority: int):
    """aioapns_send with a push type and a priority (the reference client's own headers)."""
    import asyncio
    import ssl
    from urllib.parse import urlsplit

    from aioapns import APNs, NotificationRequest
    from aioapns.connection import APNsProductionClientProtocol

    from tests.integration.test_providers_apns import KEY_ID, TEAM_ID, TOPIC, _quiet, apns_url

    port = urlsplit(apns_url(emulator)).port

    class EmulatorProtocol(APNsProductionClientProtocol):
        APNS_SERVER, APNS_PORT = "localhost", port

    async def run():
        apns = APNs(
            key=p8,
            key_id=KEY_ID,
            team_id=TEAM_ID,
            topic=TOPIC,
            max_connection_attempts=1,
            ssl_context=ssl.create_default_context(cafile=emulator.ca_file),
            err_func=_quiet,
        )
        apns.pool.protocol_class = EmulatorProtocol
        try:
            request = NotificationRequest(token, payload, priority=priority, push_type=push_type)
            return await asyncio.wait_for(apns.send_notification(request), 10)
        finally:
            apns.pool.close()

    return asyncio.run(run())
