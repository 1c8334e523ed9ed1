"""Notee's checks of the raw override's values (notee/domain/override_types.py) against the emulator's
own, written from the providers' documentation (notee/emulator/value_rules.py): what Notee lets through
the emulator takes, as FCM and APNs would; what Notee refuses with a 422 the emulator refuses too, so
neither can drift into sending what a provider refuses per device."""

from __future__ import annotations

from typing import Any

import pytest

from notee.core.errors import InvalidInput
from notee.domain import override_types, payloads
from notee.emulator.rules import FcmProblem, apns_reason, check_fcm
from notee.providers.apns import apns_payload
from notee.providers.base import Message
from notee.providers.fcm import fcm_message
from notee.providers.payload import Rich
from tests.unit.test_override_types import GOOD


def _message(override: dict[str, Any]) -> Message:
    rich = Rich.from_spec(payloads.check_payload({"override": override}))
    return Message("tok", "AOS", "Hi", "Shipped", {"a": "1"}, 60, "high", None, rich)


def _emulator_refuses(override: dict[str, Any]) -> tuple[str | None, str | None]:
    """(FCM's refused field, APNs' reason) for a message whose override bypassed Notee's checks."""
    m = Message("tok", "AOS", "Hi", "Shipped", {"a": "1"}, 60, "high", None, None)
    message = fcm_message(m)
    android = override.get("android") or {}
    message.setdefault("android", {}).update({k: v for k, v in android.items() if k != "notification"})
    if "notification" in android:
        message["android"].setdefault("notification", {}).update(android["notification"])
    aps = override.get("apns") or {}
    message.setdefault("apns", {}).setdefault("payload", {}).setdefault("aps", {}).update(aps)
    try:
        check_fcm(message)
        field = None
    except FcmProblem as problem:
        field = problem.field
    body = apns_payload("Hi", "Shipped", {"a": "1"})
    body["aps"].update(aps)
    return field, apns_reason({b"apns-push-type": b"alert", b"apns-priority": b"10"}, body)


def test_an_override_notee_takes_passes_the_emulators_fcm_and_apns_rules():
    m = _message(GOOD)
    check_fcm(fcm_message(m))  # no FcmProblem
    assert apns_reason({b"apns-push-type": b"alert"}, apns_payload(m.title, m.body, m.data, m.rich)) is None


def test_every_key_notee_checks_is_a_field_the_emulator_knows():
    from notee.emulator import value_rules

    assert set(override_types.ANDROID) - {"fcm_options"} <= set(value_rules.FCM_ANDROID)
    assert set(override_types.ANDROID_NOTIFICATION) - {"light_settings"} <= set(value_rules.FCM_ANDROID_NOTIFICATION)
    assert set(override_types.APS) <= set(value_rules.APS)


@pytest.mark.parametrize(
    "override,fcm_field,apns",
    [
        ({"android": {"direct_boot_ok": "true"}}, "message.android.direct_boot_ok", None),
        ({"android": {"restricted_package_name": 3}}, "message.android.restricted_package_name", None),
        ({"android": {"fcm_options": {"analytics_label": "a b"}}}, "message.android.fcm_options.analytics_label", None),
        ({"android": {"notification": {"sticky": 1}}}, "message.android.notification.sticky", None),
        ({"android": {"notification": {"event_time": "yesterday"}}}, "message.android.notification.event_time", None),
        (
            {"android": {"notification": {"vibrate_timings": ["0.5"]}}},
            "message.android.notification.vibrate_timings[0]",
            None,
        ),
        ({"android": {"notification": {"title_loc_args": "a"}}}, "message.android.notification.title_loc_args", None),
        ({"android": {"notification": {"proxy": "MAYBE"}}}, "message.android.notification.proxy", None),
        (
            {"android": {"notification": {"light_settings": {"color": {"red": 1}, "light_on_duration": "1s"}}}},
            "message.android.notification.light_settings.light_off_duration",
            None,
        ),
        (
            {
                "android": {
                    "notification": {
                        "light_settings": {"color": {"red": 2}, "light_on_duration": "1s", "light_off_duration": "1s"}
                    }
                }
            },
            "message.android.notification.light_settings.color.red",
            None,
        ),
        ({"apns": {"stale-date": "tomorrow"}}, "message.apns.payload.aps.stale-date", "InvalidPushType"),
        ({"apns": {"timestamp": True}}, "message.apns.payload.aps.timestamp", "InvalidPushType"),
        ({"apns": {"event": "begin"}}, "message.apns.payload.aps.event", "InvalidPushType"),
        ({"apns": {"content-state": [1]}}, "message.apns.payload.aps.content-state", "InvalidPushType"),
        ({"apns": {"url-args": "a"}}, "message.apns.payload.aps.url-args", "InvalidPushType"),
    ],
)
def test_a_value_notee_refuses_the_emulator_refuses_as_the_provider_would(override, fcm_field, apns):
    with pytest.raises(InvalidInput):
        payloads.check_payload({"override": override})
    assert _emulator_refuses(override) == (fcm_field, apns)
