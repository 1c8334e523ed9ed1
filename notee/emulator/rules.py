"""The rules FCM and APNs apply to a push's fields, as the emulator applies them (docs/PAYLOADS.md,
"The emulator"), and what a device would get of an accepted one.

FCM (HTTP v1): a field it does not know is ``Invalid JSON payload received. Unknown name "x" at
'message.android.notification': Cannot find field.``; a bad value (a colour that is not ``#rrggbb``,
an unknown visibility or notification priority, a negative count, a TTL that is not a duration or is
over 4 weeks, an
analytics label outside ``[a-zA-Z0-9-_.~%]{1,50}``, a non-string data value) is ``Invalid value at
'message.<path>'``; both are 400 INVALID_ARGUMENT with a ``google.rpc.BadRequest`` naming the field.

APNs: reasons from Apple's table (``InvalidPushType``, ``BadPriority``, ``BadCollapseId``,
``BadExpirationDate``). A background push (``apns-push-type: background``) must have priority 5
(``BadPriority`` otherwise, as Apple documents); one whose ``aps`` has an alert, a sound or a badge is
refused with ``InvalidPushType`` (Apple says such a push is not delivered as background; the
emulator answers the closest reason of its table instead of dropping it silently).

The values a raw per-platform override reaches (FCM ``android`` and ``android.notification`` fields,
``aps`` keys) are checked by type as the providers document them: ``value_rules.py``.
"""

from __future__ import annotations

import re
from typing import Any

from notee.emulator.value_rules import (
    FCM_ANDROID,
    FCM_ANDROID_NOTIFICATION,
    aps_value_problem,
    fcm_value_problem,
    light_settings_problem,
)

_FCM_MESSAGE = {
    "token",
    "topic",
    "condition",
    "fid",
    "name",
    "notification",
    "data",
    "android",
    "apns",
    "webpush",
    "fcm_options",
}
_FCM_NOTIFICATION = {"title", "body", "image"}
_FCM_ANDROID = {
    "collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification", "fcm_options",
    "direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok",
}  # fmt: skip
_FCM_ANDROID_NOTIFICATION = {
    "title", "body", "icon", "color", "sound", "tag", "click_action", "body_loc_key", "body_loc_args",
    "title_loc_key", "title_loc_args", "channel_id", "ticker", "sticky", "event_time", "local_only",
    "notification_priority", "default_sound", "default_vibrate_timings", "default_light_settings",
    "vibrate_timings", "visibility", "notification_count", "light_settings", "image", "bypass_proxy_notification",
    "proxy",
}  # fmt: skip
_FCM_APNS = {"headers", "payload", "fcm_options", "live_activity_token"}
_COLOR = re.compile(r"^#[0-9a-fA-F]{6}$")
_DURATION = re.compile(r"^\d+(\.\d{1,9})?s$")
_LABEL = re.compile(r"^[a-zA-Z0-9\-_.~%]{1,50}$")
_VISIBILITY = {"VISIBILITY_UNSPECIFIED", "PRIVATE", "PUBLIC", "SECRET"}
_NOTIFICATION_PRIORITY = {
    "PRIORITY_UNSPECIFIED", "PRIORITY_MIN", "PRIORITY_LOW", "PRIORITY_DEFAULT", "PRIORITY_HIGH", "PRIORITY_MAX",
}  # fmt: skip
_ANDROID_PRIORITY = {"NORMAL", "HIGH", "normal", "high"}
MAX_TTL_S = 2_419_200  # FCM keeps a message at most 4 weeks; a longer android.ttl is INVALID_ARGUMENT
APNS_PUSH_TYPES = {
    "alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity",
    "pushtotalk", "controls", "widgets",
}  # fmt: skip


class FcmProblem(Exception):
    """A message FCM would refuse: ``field`` (``message.android.notification.color``) and FCM's text."""

    def __init__(self, field: str, text: str) -> None:
        super().__init__(text)
        self.field, self.text = field, text


def _unknown(where: str, block: Any, known: set[str]) -> None:
    if not isinstance(block, dict):
        raise FcmProblem(where, f"Invalid value at '{where}': a message field must be an object.")
    for key in block:
        if key not in known:
            raise FcmProblem(
                where, f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field."
            )


def _invalid(where: str, value: Any) -> FcmProblem:
    return FcmProblem(where, f"Invalid value at '{where}' ({type(value).__name__}), {value!r}")


def check_fcm(message: dict[str, Any]) -> None:
    """Raise FcmProblem for what FCM refuses in ``message`` (the fields Notee sends and their kin)."""
    _unknown("message", message, _FCM_MESSAGE)
    if "notification" in message:
        _unknown("message.notification", message["notification"], _FCM_NOTIFICATION)
        for key, value in message["notification"].items():
            if not isinstance(value, str):
                raise _invalid(f"message.notification.{key}", value)
    for i, (key, value) in enumerate((message.get("data") or {}).items()):
        if not isinstance(value, str) or not isinstance(key, str):
            raise _invalid(f"message.data[{i}].value", value)
        if key in ("from", "message_type") or key.startswith(("google.", "gcm.notification.")):
            # Message.data: "The key should not be a reserved word" (FCM v1 reference)
            raise FcmProblem(f"message.data[{i}].key", f"Invalid data payload key: {key}")
    label = (message.get("fcm_options") or {}).get("analytics_label")
    if label is not None and (not isinstance(label, str) or not _LABEL.match(label)):
        raise _invalid("message.fcm_options.analytics_label", label)
    android = message.get("android")
    if android is not None:
        _check_android(android)
    apns = message.get("apns")
    if apns is not None:
        _unknown("message.apns", apns, _FCM_APNS)
        headers = apns.get("headers") or {}
        if any(not isinstance(v, str) for v in headers.values()):
            raise _invalid("message.apns.headers", headers)
        payload = apns.get("payload")
        key = aps_value_problem(payload.get("aps") if isinstance(payload, dict) else None)
        if key is not None:
            field = f"message.apns.payload.aps.{key}"
            raise FcmProblem(field, f"Request contains an invalid argument. (APNs: InvalidPushType at '{field}')")
        if headers.get("apns-push-type") == "background" and "notification" in message:
            raise FcmProblem("message.apns", "Request contains an invalid argument. (APNs: InvalidPushType)")
        reason = apns_reason({k.encode(): v.encode() for k, v in headers.items()}, (apns.get("payload") or {}))
        if reason is not None:  # FCM passes APNs' refusal on as an invalid argument
            raise FcmProblem("message.apns", f"Request contains an invalid argument. (APNs: {reason})")


def _refuse(problem: tuple[str, str] | None) -> None:
    if problem is not None:
        raise FcmProblem(*problem)


def _check_android(android: Any) -> None:
    _unknown("message.android", android, _FCM_ANDROID)
    _refuse(fcm_value_problem("message.android", android, FCM_ANDROID))
    options = android.get("fcm_options")
    if options is not None:
        _unknown("message.android.fcm_options", options, {"analytics_label"})
        label = options.get("analytics_label")
        if label is not None and not (isinstance(label, str) and _LABEL.match(label)):
            raise _invalid("message.android.fcm_options.analytics_label", label)
    for i, value in enumerate((android.get("data") or {}).values()):
        if not isinstance(value, str):
            raise _invalid(f"message.android.data[{i}].value", value)
    if "priority" in android and android["priority"] not in _ANDROID_PRIORITY:
        raise _invalid("message.android.priority", android["priority"])
    ttl = android.get("ttl")
    if ttl is not None and not (isinstance(ttl, str) and _DURATION.match(ttl) and float(ttl[:-1]) <= MAX_TTL_S):
        raise _invalid("message.android.ttl", ttl)
    notification = android.get("notification")
    if notification is None:
        return
    where = "message.android.notification"
    _unknown(where, notification, _FCM_ANDROID_NOTIFICATION)
    color = notification.get("color")
    if color is not None and not (isinstance(color, str) and _COLOR.match(color)):
        raise FcmProblem(f"{where}.color", f"Invalid value at '{where}.color': color must be in the form #RRGGBB")
    if "visibility" in notification and notification["visibility"] not in _VISIBILITY:
        raise _invalid(f"{where}.visibility", notification["visibility"])
    if "notification_priority" in notification and notification["notification_priority"] not in _NOTIFICATION_PRIORITY:
        raise _invalid(f"{where}.notification_priority", notification["notification_priority"])
    count = notification.get("notification_count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise _invalid(f"{where}.notification_count", count)
    _refuse(fcm_value_problem(where, notification, FCM_ANDROID_NOTIFICATION))
    if "light_settings" in notification:
        _refuse(light_settings_problem(f"{where}.light_settings", notification["light_settings"]))


def apns_reason(headers: dict[bytes, bytes], payload: Any) -> str | None:
    """APNs' reason for refusing a push with these headers and this (parsed) payload, or None."""
    push_type = headers.get(b"apns-push-type")
    if push_type is not None and push_type.decode(errors="replace") not in APNS_PUSH_TYPES:
        return "InvalidPushType"
    priority = headers.get(b"apns-priority")
    if priority is not None and priority not in (b"1", b"5", b"10"):
        return "BadPriority"
    collapse = headers.get(b"apns-collapse-id")
    if collapse is not None and len(collapse) > 64:
        return "BadCollapseId"
    expiration = headers.get(b"apns-expiration")
    if expiration is not None and not expiration.isdigit():
        return "BadExpirationDate"
    aps = payload.get("aps") if isinstance(payload, dict) else None
    if aps_value_problem(aps) is not None:  # Apple's table has no reason of its own for it (value_rules)
        return "InvalidPushType"
    if push_type == b"background":
        if priority == b"10":
            return "BadPriority"
        if isinstance(aps, dict) and ({"alert", "sound", "badge"} & set(aps) or aps.get("content-available") != 1):
            return "InvalidPushType"
    return None


def fcm_device_view(message: dict[str, Any]) -> dict[str, Any]:
    """What the devices would get of an accepted FCM message: the Android notification (the common
    notification under its Android fields) and data; the iOS ``aps`` (the alert built from the
    notification under ``apns.payload.aps``) and the push type."""
    notification = dict(message.get("notification") or {})
    android = message.get("android") or {}
    data = message.get("data") or {}
    aps = dict((message.get("apns") or {}).get("payload", {}).get("aps") or {})
    if notification:
        alert = {k: notification[k] for k in ("title", "body") if k in notification}
        aps["alert"] = {**alert, **(aps.get("alert") or {})}
    headers = (message.get("apns") or {}).get("headers") or {}
    return {
        "android": {
            "notification": {**notification, **(android.get("notification") or {})} or None,
            "data": data,
            "priority": android.get("priority"),
            "ttl": android.get("ttl"),
        },
        "ios": {
            "aps": aps,
            "data": data,
            "push_type": headers.get("apns-push-type", "alert"),
            "priority": headers.get("apns-priority"),
            "expiration": headers.get("apns-expiration"),
        },
    }
