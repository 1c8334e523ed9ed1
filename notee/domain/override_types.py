"""The value types of the raw per-platform override (docs/PAYLOADS.md "The raw override"), checked as
the providers check them, so a wrong type is a 422 naming the key before anything is queued instead
of a dead letter per device later. Pure, no I/O.

FCM (``override.android``, ``override.android.notification``): the fields of the HTTP v1
``AndroidConfig`` and ``AndroidNotification`` messages
(https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages#androidconfig); FCM
refuses an unknown name (``Invalid JSON payload received. Unknown name``), and so does Notee.

APNs (``override.apns``, merged into ``aps``): the keys Apple documents for the ``aps`` dictionary
beyond the ones Notee models (Live Activities, Safari, push-to-talk:
https://developer.apple.com/documentation/usernotifications/generating-a-remote-notification).
APNs ignores a key it does not know, so an unknown key passes (a newer key Apple adds stays usable);
a known key with the wrong type is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# A check answers None when the value is right, else what it must be.
Check = Callable[[Any], str | None]

_DURATION = re.compile(r"^\d{1,12}(\.\d{1,9})?s$")  # protobuf Duration in JSON: "3.5s"
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")  # RFC 3339


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) else "a string"


def _int(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) else "an integer"


def _obj(v: Any) -> str | None:
    return None if isinstance(v, dict) else "an object"


def _strings(v: Any) -> str | None:
    return None if isinstance(v, list) and all(isinstance(x, str) for x in v) else "a list of strings"


def _duration(v: Any) -> str | None:
    return None if isinstance(v, str) and _DURATION.match(v) else 'a duration such as "3.5s"'


def _durations(v: Any) -> str | None:
    ok = isinstance(v, list) and all(_duration(x) is None for x in v)
    return None if ok else 'a list of durations such as "0.5s"'


def _timestamp(v: Any) -> str | None:
    return None if isinstance(v, str) and _TIMESTAMP.match(v) else 'an RFC 3339 time such as "2026-12-05T09:30:00Z"'


def _one_of(*choices: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in choices else f"one of {', '.join(choices)}"

    return check


def _color(v: Any) -> str | None:
    """FCM's ``google.type.Color``: red, green, blue (and alpha) numbers 0..1."""
    if not isinstance(v, dict) or set(v) - {"red", "green", "blue", "alpha"}:
        return "an object of red, green, blue, alpha"
    bad = [k for k, x in v.items() if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1]
    return "numbers 0..1 for red, green, blue, alpha" if bad else None


_LIGHT = ("color", "light_on_duration", "light_off_duration")


def _light_settings(v: Any) -> str | None:
    """FCM's ``LightSettings``: its three fields are all required (FCM refuses one without them)."""
    if not isinstance(v, dict) or set(v) != set(_LIGHT):
        return "an object of color, light_on_duration and light_off_duration (all three)"
    problems = [_color(v["color"]), _duration(v["light_on_duration"]), _duration(v["light_off_duration"])]
    return next((p for p in problems if p), None)


_LABEL = re.compile(r"^[a-zA-Z0-9\-_.~%]{1,50}$")  # FCM's rule for an analytics label


def _fcm_options(v: Any) -> str | None:
    ok = isinstance(v, dict) and set(v) <= {"analytics_label"}
    label = v.get("analytics_label") if ok else None
    ok = ok and (label is None or (isinstance(label, str) and bool(_LABEL.match(label))))
    return None if ok else "an object of analytics_label ([a-zA-Z0-9-_.~%]{1,50})"


# AndroidConfig fields an override may set (the rest are Notee's: OWNED_ANDROID).
ANDROID: dict[str, Check] = {
    "restricted_package_name": _str,
    "fcm_options": _fcm_options,
    "direct_boot_ok": _bool,
    "bandwidth_constrained_ok": _bool,
    "restricted_satellite_ok": _bool,
}
# AndroidNotification fields an override may set (the rest are Notee's: OWNED_ANDROID_NOTIFICATION).
ANDROID_NOTIFICATION: dict[str, Check] = {
    "ticker": _str,
    "sticky": _bool,
    "event_time": _timestamp,
    "local_only": _bool,
    "default_sound": _bool,
    "default_vibrate_timings": _bool,
    "default_light_settings": _bool,
    "vibrate_timings": _durations,
    "light_settings": _light_settings,
    "body_loc_key": _str,
    "body_loc_args": _strings,
    "title_loc_key": _str,
    "title_loc_args": _strings,
    "bypass_proxy_notification": _bool,
    "proxy": _one_of("PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED"),
}
# aps keys Apple documents that an override may set (unknown ones pass: APNs ignores them).
APS: dict[str, Check] = {
    "timestamp": _int,
    "event": _one_of("start", "update", "end"),
    "content-state": _obj,
    "stale-date": _int,
    "dismissal-date": _int,
    "attributes-type": _str,
    "attributes": _obj,
    "input-push-channel": _str,
    "input-push-token": _int,
    "filter-criteria": _str,
    "url-args": _strings,
}


def problem(side: str, key: str, value: Any, notification: bool = False) -> tuple[str, str] | None:
    """(type, message) of what is wrong with ``override.<side>[.notification].<key>`` = ``value``, or
    None. ``side``: android or apns."""
    if side == "apns":
        check = APS.get(key)
        if check is None:
            return None
    else:
        table = ANDROID_NOTIFICATION if notification else ANDROID
        check = table.get(key)
        if check is None:
            where = "AndroidNotification" if notification else "AndroidConfig"
            return "extra_forbidden", f"FCM has no such field in {where}; one of {', '.join(table)}"
    wanted = check(value)
    return None if wanted is None else ("type_error", f"must be {wanted}")
