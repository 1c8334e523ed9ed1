"""The raw override's value types (notee/domain/override_types.py via payloads.check_payload): what
FCM and APNs would refuse is a 422 naming the key; what they take passes unchanged."""

from __future__ import annotations

import pytest

from notee.core.errors import InvalidInput
from notee.domain import payloads

GOOD = {
    "android": {
        "direct_boot_ok": True,
        "restricted_package_name": "com.example.app",
        "fcm_options": {"analytics_label": "x"},
        "notification": {
            "sticky": True,
            "event_time": "2026-12-05T09:30:00.5Z",
            "vibrate_timings": ["0.5s", "1s"],
            "light_settings": {
                "color": {"red": 1, "green": 0.5, "blue": 0},
                "light_on_duration": "1s",
                "light_off_duration": "0.5s",
            },
            "title_loc_args": ["a"],
            "proxy": "DENY",
        },
    },
    "apns": {"stale-date": 1900000000, "event": "update", "content-state": {"score": 3}, "my-own": [1]},
}


def test_values_the_providers_take_pass_unchanged():
    assert payloads.check_payload({"override": GOOD}) == {"override": GOOD}


@pytest.mark.parametrize(
    "override,loc",
    [
        ({"android": {"direct_boot_ok": "yes"}}, ["android", "direct_boot_ok"]),
        ({"android": {"restricted_package_name": 3}}, ["android", "restricted_package_name"]),
        ({"android": {"fcm_option": {}}}, ["android", "fcm_option"]),  # FCM refuses an unknown name
        ({"android": {"notification": {"sticky": 1}}}, ["android", "notification", "sticky"]),
        ({"android": {"notification": {"event_time": "yesterday"}}}, ["android", "notification", "event_time"]),
        ({"android": {"notification": {"vibrate_timings": [1]}}}, ["android", "notification", "vibrate_timings"]),
        ({"android": {"notification": {"title_loc_args": "a"}}}, ["android", "notification", "title_loc_args"]),
        ({"android": {"notification": {"proxy": "MAYBE"}}}, ["android", "notification", "proxy"]),
        ({"android": {"notification": {"stiky": True}}}, ["android", "notification", "stiky"]),
        (
            {"android": {"notification": {"light_settings": {"color": {"red": 2}}}}},
            ["android", "notification", "light_settings"],
        ),
        (  # FCM requires all three of LightSettings' fields
            {"android": {"notification": {"light_settings": {"color": {"red": 1}, "light_on_duration": "1s"}}}},
            ["android", "notification", "light_settings"],
        ),
        ({"android": {"fcm_options": {"analytics_label": "a b"}}}, ["android", "fcm_options"]),
        ({"apns": {"stale-date": "tomorrow"}}, ["apns", "stale-date"]),
        ({"apns": {"timestamp": True}}, ["apns", "timestamp"]),
        ({"apns": {"event": "begin"}}, ["apns", "event"]),
        ({"apns": {"content-state": [1]}}, ["apns", "content-state"]),
    ],
)
def test_a_value_the_provider_would_refuse_is_422_naming_the_key(override, loc):
    with pytest.raises(InvalidInput) as caught:
        payloads.check_payload({"override": override})
    assert caught.value.details[0]["loc"] == ["body", "payload", "override", *loc]
