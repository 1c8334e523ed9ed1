"""The emulator checks the values a raw per-platform override reaches as FCM and APNs do
(notee/emulator/value_rules.py, docs/PAYLOADS.md "The emulator"), pinned with the reference clients:
firebase-admin's message builder and aioapns sending every such field pass, and so does Notee's own
sender with the same override; a value of the wrong type is refused with the providers' answers (FCM
400 INVALID_ARGUMENT naming the field, APNs 400 with its reason) and nothing is delivered."""

from __future__ import annotations

import secrets
import warnings
from datetime import UTC, datetime
from typing import Any

import pytest

from notee.providers.base import Delivered
from tests.integration.test_emulator_rich_rules import _bearer, _rich_msg
from tests.integration.test_providers_apns import aioapns_send
from tests.integration.test_providers_apns import ours_send as apns_send
from tests.integration.test_providers_fcm import PROJECT, sdk  # noqa: F401  (the fixture)
from tests.integration.test_providers_fcm import ours_send as fcm_send
from tests.support.emulator import deliveries_per_token
from tests.unit.test_override_types import GOOD

LIVE_ACTIVITY = {"stale-date": 1900000000, "event": "update", "content-state": {"score": 3}, "timestamp": 1900000000}


def _token(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(8)}"


def _post(emulator, message: dict[str, Any]):
    return emulator.http.post(
        f"/v1/projects/{PROJECT}/messages:send", json={"message": message}, headers={"authorization": _bearer(emulator)}
    )


def _firebase_admin_message(token: str):
    """firebase-admin's Message with every AndroidConfig / AndroidNotification field an override may set,
    and Live Activity keys in its Aps."""
    from firebase_admin import messaging

    notification = messaging.AndroidNotification(
        title="Hi",
        body="Shipped",
        ticker="order",
        sticky=True,
        event_timestamp=datetime(2026, 12, 5, 9, 30, tzinfo=UTC),
        local_only=True,
        default_sound=False,
        default_vibrate_timings=False,
        default_light_settings=False,
        vibrate_timings_millis=[500, 1000],
        light_settings=messaging.LightSettings(
            color="#FF8000", light_on_duration_millis=1000, light_off_duration_millis=500
        ),
        title_loc_key="t_key",
        title_loc_args=["a"],
        body_loc_key="b_key",
        body_loc_args=["b", "c"],
        proxy="deny",
    )
    return messaging.Message(
        token=token,
        android=messaging.AndroidConfig(
            restricted_package_name="com.example.app",
            direct_boot_ok=True,
            bandwidth_constrained_ok=True,
            restricted_satellite_ok=False,
            fcm_options=messaging.AndroidFCMOptions(analytics_label="spring"),
            notification=notification,
        ),
        apns=messaging.APNSConfig(
            payload=messaging.APNSPayload(
                aps=messaging.Aps(alert=messaging.ApsAlert(title="Hi", body="Shipped"), custom_data=LIVE_ACTIVITY)
            )
        ),
    )


def test_firebase_admin_and_notee_send_every_override_field_and_the_emulator_takes_them(emulator, sdk):
    from firebase_admin import messaging

    theirs, ours = _token("fa-ovr"), _token("ours-ovr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        messaging.send(_firebase_admin_message(theirs), app=sdk)  # raises on a refusal
    assert isinstance(fcm_send(emulator, [_rich_msg(ours, "AOS", {"override": GOOD})])[0], Delivered)
    seen_theirs, seen_ours = emulator.last_request(theirs), emulator.last_request(ours)
    assert seen_theirs is not None and seen_ours is not None
    android = seen_theirs["device"]["android"]["notification"]
    assert android["sticky"] is True and [float(t[:-1]) for t in android["vibrate_timings"]] == [0.5, 1.0]
    assert set(android["light_settings"]) == {"color", "light_on_duration", "light_off_duration"}
    assert android["event_time"].startswith("2026-12-05T09:30:00")
    assert seen_theirs["body"]["android"]["direct_boot_ok"] is True
    assert {k: seen_theirs["device"]["ios"]["aps"][k] for k in LIVE_ACTIVITY} == LIVE_ACTIVITY
    # Notee's own override reached the device as sent
    ours_android = seen_ours["device"]["android"]["notification"]
    assert ours_android["light_settings"] == GOOD["android"]["notification"]["light_settings"]
    assert ours_android["proxy"] == "DENY" and seen_ours["body"]["android"]["direct_boot_ok"] is True
    assert seen_ours["device"]["ios"]["aps"]["stale-date"] == 1900000000


@pytest.mark.parametrize(
    "android,apns_aps,field",
    [
        ({"direct_boot_ok": "true"}, None, "message.android.direct_boot_ok"),
        ({"restricted_package_name": 7}, None, "message.android.restricted_package_name"),
        ({"fcm_options": {"analytics_label": "a b"}}, None, "message.android.fcm_options.analytics_label"),
        ({"notification": {"sticky": "yes"}}, None, "message.android.notification.sticky"),
        ({"notification": {"event_time": "yesterday"}}, None, "message.android.notification.event_time"),
        ({"notification": {"vibrate_timings": ["0.5s", 1]}}, None, "message.android.notification.vibrate_timings[1]"),
        ({"notification": {"title_loc_args": "a"}}, None, "message.android.notification.title_loc_args"),
        ({"notification": {"proxy": "MAYBE"}}, None, "message.android.notification.proxy"),
        (
            {"notification": {"light_settings": {"color": {"red": 1}, "light_on_duration": "1s"}}},
            None,
            "message.android.notification.light_settings.light_off_duration",
        ),
        (None, {"badge": "3"}, "message.apns.payload.aps.badge"),
        (None, {"stale-date": "soon"}, "message.apns.payload.aps.stale-date"),
        (None, {"interruption-level": "urgent"}, "message.apns.payload.aps.interruption-level"),
    ],
)
def test_fcm_refuses_a_wrongly_typed_value_with_invalid_argument_naming_the_field(emulator, android, apns_aps, field):
    token = _token("bad-val")
    message: dict[str, Any] = {"token": token, "notification": {"title": "t", "body": "b"}}
    if android is not None:
        message["android"] = android
    if apns_aps is not None:
        message["apns"] = {"payload": {"aps": apns_aps}}
    r = _post(emulator, message)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["details"][1]["fieldViolations"][0]["field"] == field
    assert deliveries_per_token(emulator, [token]) == {token: 0}


def test_aioapns_and_notee_send_live_activity_keys_and_apns_refuses_wrong_types(emulator, p8):
    good = _token("ap-ok")
    payload = {
        "aps": {
            "alert": {"title": "Hi", "body": "Shipped", "title-loc-args": ["a"]},
            "sound": {"critical": 1, "name": "alarm.caf", "volume": 0.5},
            "relevance-score": 0.5,
            **LIVE_ACTIVITY,
        }
    }
    r = aioapns_send(emulator, p8, good, payload)
    assert r.is_successful, r.description
    ours = _token("ap-ours")
    out = apns_send(emulator, p8, [_rich_msg(ours, "IOS", {"override": GOOD})])
    assert isinstance(out[0], Delivered), out
    seen = emulator.last_request(ours)
    assert seen is not None and seen["body"]["aps"]["content-state"] == {"score": 3}
    for key, wrong in [
        ("badge", "3"),
        ("stale-date", "soon"),
        ("event", "begin"),
        ("content-state", [1]),
        ("sound", {"critical": 2}),
        ("relevance-score", 2),
        ("url-args", "a"),
    ]:
        token = _token("ap-bad")
        r = aioapns_send(emulator, p8, token, {"aps": {"alert": "hi", key: wrong}})
        assert (r.is_successful, r.status, r.description) == (False, "400", "InvalidPushType"), key
        assert emulator.last_request(token)["refused"] == {"reason": "InvalidPushType", "field": f"aps.{key}"}
        assert deliveries_per_token(emulator, [token]) == {token: 0}
