"""The value checks FCM and APNs apply to the fields a raw per-platform override reaches (the FCM
``android`` block and its ``notification``, the ``aps`` dictionary of APNs and of FCM's ``apns``
block), written from the providers' documentation, not from Notee's own checks
(``notee/domain/override_types.py``), so the two can disagree and a test can see it.

FCM (HTTP v1, https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages): a message
is a protobuf read from JSON (https://protobuf.dev/programming-guides/proto3/#json): a ``bool`` is
``true``/``false`` only, an ``int32`` a number or a decimal string, a ``Duration`` ``"3.5s"``, a
``Timestamp`` RFC 3339, an enum one of its names; a value of another type is 400 INVALID_ARGUMENT
``Invalid value at 'message.android.notification.sticky' (TYPE_BOOL), "yes"`` naming the field.
``LightSettings`` needs all of ``color``, ``light_on_duration`` and ``light_off_duration``
("Required" in the reference); ``google.type.Color`` channels are numbers in [0, 1].

APNs (https://developer.apple.com/documentation/usernotifications/generating-a-remote-notification,
the ``aps`` keys and their types, Live Activity keys included): Apple's table of 400 reasons has no
entry for a wrongly typed ``aps`` value, so the emulator answers the nearest one (``InvalidPushType``,
as for a background push with an alert) and records which key it refused. A key Apple does not
document passes (APNs ignores it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# A check answers None when the value is right, else the type FCM names in its message.
Check = Callable[[Any], str | None]

_DURATION = re.compile(r"^-?\d{1,12}(\.\d{1,9})?s$")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")
_PROTO = "type.googleapis.com/google.protobuf."
_FCM = "type.googleapis.com/google.firebase.fcm.v1."


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "TYPE_BOOL"


def _string(v: Any) -> str | None:
    return None if isinstance(v, str) else "TYPE_STRING"


def _duration(v: Any) -> str | None:
    return None if isinstance(v, str) and _DURATION.match(v) else _PROTO + "Duration"


def _timestamp(v: Any) -> str | None:
    return None if isinstance(v, str) and _TIMESTAMP.match(v) else _PROTO + "Timestamp"


def _float_0_1(v: Any) -> str | None:
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return "TYPE_FLOAT"
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1
    return None if ok else "TYPE_FLOAT"


def _enum(name: str, *values: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in values else _FCM + name

    return check


# (check of one value, repeated?) per field. AndroidConfig: the fields a value can be wrong in.
FCM_ANDROID: dict[str, tuple[Check, bool]] = {
    "collapse_key": (_string, False),
    "restricted_package_name": (_string, False),
    "direct_boot_ok": (_bool, False),
    "bandwidth_constrained_ok": (_bool, False),
    "restricted_satellite_ok": (_bool, False),
}
FCM_ANDROID_NOTIFICATION: dict[str, tuple[Check, bool]] = {
    **{
        k: (_string, False)
        for k in (
            "title",
            "body",
            "icon",
            "sound",
            "tag",
            "click_action",
            "body_loc_key",
            "title_loc_key",
            "channel_id",
            "ticker",
            "image",
        )
    },
    **{
        k: (_bool, False)
        for k in (
            "sticky",
            "local_only",
            "default_sound",
            "default_vibrate_timings",
            "default_light_settings",
            "bypass_proxy_notification",
        )
    },
    "body_loc_args": (_string, True),
    "title_loc_args": (_string, True),
    "event_time": (_timestamp, False),
    "vibrate_timings": (_duration, True),
    "proxy": (_enum("AndroidNotification.Proxy", "PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED"), False),
}


def fcm_value_problem(
    where: str, block: dict[str, Any], table: dict[str, tuple[Check, bool]]
) -> tuple[str, str] | None:
    """(field path, FCM's message) for the first value of ``block`` FCM would refuse, or None."""
    for key, value in block.items():
        rule = table.get(key)
        if rule is None:
            continue
        check, repeated = rule
        field = f"{where}.{key}"
        if repeated:
            if not isinstance(value, list):
                return field, f"Invalid value at '{field}' (list), {_show(value)}"
            for i, item in enumerate(value):
                wanted = check(item)
                if wanted:
                    return f"{field}[{i}]", f"Invalid value at '{field}[{i}]' ({wanted}), {_show(item)}"
            continue
        wanted = check(value)
        if wanted:
            return field, f"Invalid value at '{field}' ({wanted}), {_show(value)}"
    return None


def light_settings_problem(where: str, light: Any) -> tuple[str, str] | None:
    """FCM's LightSettings: an object of all three required fields, the colour's channels in [0, 1]."""
    if not isinstance(light, dict):
        return where, f"Invalid value at '{where}' ({_FCM}LightSettings), {_show(light)}"
    for key in ("color", "light_on_duration", "light_off_duration"):
        if key not in light:
            return f"{where}.{key}", f"Invalid value at '{where}': {key} is required."
    for key in ("light_on_duration", "light_off_duration"):
        if _duration(light[key]):
            return f"{where}.{key}", f"Invalid value at '{where}.{key}' ({_PROTO}Duration), {_show(light[key])}"
    color = light["color"]
    if not isinstance(color, dict):
        return (
            f"{where}.color",
            f"Invalid value at '{where}.color' (type.googleapis.com/google.type.Color), {_show(color)}",
        )
    for channel, value in color.items():
        if channel not in ("red", "green", "blue", "alpha") or _float_0_1(value):
            return (
                f"{where}.color.{channel}",
                f"Invalid value at '{where}.color.{channel}' (TYPE_FLOAT), {_show(value)}",
            )
    return None


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return f'"{text[:60]}"' if isinstance(value, str) else text[:60]


def _aps_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _aps_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _aps_strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _aps_alert(v: Any) -> bool:
    if isinstance(v, str):
        return True
    if not isinstance(v, dict):
        return False
    return all(_aps_strings(x) if k.endswith("-args") else isinstance(x, str) for k, x in v.items())


def _aps_sound(v: Any) -> bool:
    """A sound name, or a critical alert's ``{"critical": 1, "name": ..., "volume": 0..1}``."""
    if isinstance(v, str):
        return True
    if not isinstance(v, dict):
        return False
    critical, name, volume = v.get("critical", 0), v.get("name", ""), v.get("volume", 0)
    return critical in (0, 1) and isinstance(name, str) and _aps_number(volume) and 0 <= volume <= 1


# The aps keys Apple documents, and whether a value is of the type it gives.
APS: dict[str, Callable[[Any], bool]] = {
    "alert": _aps_alert,
    "badge": lambda v: _aps_int(v) and v >= 0,
    "sound": _aps_sound,
    **{
        k: (lambda v: isinstance(v, str))
        for k in (
            "thread-id",
            "category",
            "target-content-id",
            "filter-criteria",
            "attributes-type",
            "input-push-channel",
        )
    },
    "content-available": lambda v: v in (0, 1) and _aps_int(v),
    "mutable-content": lambda v: v in (0, 1) and _aps_int(v),
    "interruption-level": lambda v: v in ("passive", "active", "time-sensitive", "critical"),
    "relevance-score": lambda v: _aps_number(v) and 0 <= v <= 1,
    "timestamp": _aps_int,
    "stale-date": _aps_int,
    "dismissal-date": _aps_int,
    "event": lambda v: v in ("start", "update", "end"),
    "content-state": lambda v: isinstance(v, dict),
    "attributes": lambda v: isinstance(v, dict),
    "input-push-token": lambda v: v in (0, 1) and _aps_int(v),
    "url-args": _aps_strings,
}


def aps_value_problem(aps: Any) -> str | None:
    """The first documented ``aps`` key whose value is not of Apple's type, or None."""
    if not isinstance(aps, dict):
        return None
    return next((key for key, value in aps.items() if key in APS and not APS[key](value)), None)
