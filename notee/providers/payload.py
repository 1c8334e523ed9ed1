"""The rich part of a push (docs/PAYLOADS.md): everything beyond title, body, data, TTL and priority,
mapped once to each provider's own fields. ``Rich.from_spec`` takes the canonical, validated
``payload`` object (``notee.domain.payloads`` checks it) and builds the pieces of the FCM HTTP v1
message and of the APNs ``aps`` dictionary and headers once: a worker builds one ``Rich`` per page
and every ``Message`` of the page shares it, so nothing here runs per device.

Field mapping (the table of docs/PAYLOADS.md):
- ``image``: FCM ``message.notification.image`` and ``apns.fcm_options.image`` (iOS shows it through
  a Notification Service Extension, so ``mutable-content`` is set); APNs: the ``image`` custom key and
  ``mutable-content: 1`` (APNs has no image field: the app's extension downloads it).
- ``sound``: FCM ``android.notification.sound`` and ``apns.payload.aps.sound``; APNs ``aps.sound``.
  Absent: APNs plays ``default`` (as before), Android its channel's sound; ``null``: no sound key.
- ``badge``: APNs ``aps.badge`` (set; 0 clears) and FCM ``apns.payload.aps.badge``. Android has no
  absolute badge: ``android.notification_count`` is the count this notification adds.
- ``click_action``: FCM ``android.notification.click_action`` (an intent-filter action);
  ``category``: APNs ``aps.category`` and FCM ``apns.payload.aps.category`` (buttons of a category
  the app registered); ``link``: the deep link, a data key ``link`` on both (neither provider has a
  native field for an app's deep link).
- ``collapse_key``: FCM ``android.collapse_key``, APNs ``apns-collapse-id``; ``analytics_label``:
  FCM ``fcm_options.analytics_label`` (APNs has none).
- ``android``: ``message.android.notification`` fields (``channel_id``, ``icon``, ``color``, ``tag``,
  ``visibility``, ``notification_priority``, ``notification_count``).
- ``ios``: ``aps`` keys (``thread-id``, ``mutable-content``, ``content-available``,
  ``interruption-level``, ``relevance-score``, ``target-content-id``) and ``alert.subtitle``,
  ``alert.launch-image``.
- ``kind: background``: APNs ``apns-push-type: background``, ``apns-priority: 5`` and ``aps`` with
  ``content-available: 1`` only; FCM a data-only message (no ``notification``) whose ``apns`` block
  says the same.
- ``override``: ``android`` merged into FCM ``message.android`` (its ``notification`` one level
  deeper), ``apns`` merged into the ``aps`` dictionary (APNs and FCM's ``apns.payload.aps``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Notee's names under ``android`` -> AndroidNotification's fields (FCM HTTP v1).
ANDROID_FIELDS = {
    "channel_id": "channel_id",
    "icon": "icon",
    "color": "color",
    "tag": "tag",
    "visibility": "visibility",
    "notification_priority": "notification_priority",
    "notification_count": "notification_count",
}
# Notee's names under ``ios`` -> ``aps`` keys (``subtitle`` and ``launch_image`` go into ``aps.alert``).
IOS_APS_FIELDS = {
    "thread_id": "thread-id",
    "interruption_level": "interruption-level",
    "relevance_score": "relevance-score",
    "target_content_id": "target-content-id",
}
IOS_ALERT_FIELDS = {"subtitle": "subtitle", "launch_image": "launch-image"}
# What an override may not set: the fields Notee builds itself (routing, the modelled fields).
OWNED_ANDROID = frozenset({"priority", "ttl", "collapse_key", "data", "token", "topic", "condition"})
OWNED_ANDROID_NOTIFICATION = frozenset({"title", "body", "image", "sound", "click_action", *ANDROID_FIELDS.values()})
OWNED_APS = frozenset(
    {"alert", "badge", "sound", "category", "content-available", "mutable-content", *IOS_APS_FIELDS.values()}
)


@dataclass(frozen=True, slots=True, eq=False)
class Rich:
    """One push's rich fields, as each provider's pieces (built once per job page; ``eq=False``:
    compared by identity, which is what the per-page body caches need)."""

    kind: str = "alert"  # "alert" | "background"
    collapse_key: str | None = None
    data: dict[str, str] = field(default_factory=dict)  # added to the push's data (``link``)
    fcm_notification: dict[str, Any] = field(default_factory=dict)  # into message.notification
    fcm_android_notification: dict[str, Any] = field(default_factory=dict)
    fcm_android_extra: dict[str, Any] = field(default_factory=dict)  # override.android
    fcm_aps: dict[str, Any] = field(default_factory=dict)  # FCM apns.payload.aps
    fcm_apns_options: dict[str, Any] = field(default_factory=dict)  # FCM apns.fcm_options
    fcm_options: dict[str, Any] = field(default_factory=dict)  # FCM message.fcm_options
    aps: dict[str, Any] = field(default_factory=dict)  # APNs aps, but the alert's title and body
    alert: dict[str, Any] = field(default_factory=dict)  # APNs aps.alert's other keys
    custom: dict[str, Any] = field(default_factory=dict)  # APNs top-level custom keys
    spec: Mapping[str, Any] = field(default_factory=dict)  # what it was built from (dead letters keep it)

    @property
    def background(self) -> bool:
        return self.kind == "background"

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> Rich | None:
        """The pieces of a canonical ``payload`` object (None or {}: no rich fields)."""
        if not spec:
            return None
        rich = _background(spec) if spec.get("kind") == "background" else _alert(spec)
        object.__setattr__(rich, "spec", spec)
        return rich


def _background(spec: Mapping[str, Any]) -> Rich:
    override = spec.get("override") or {}
    aps = {"content-available": 1, **(override.get("apns") or {})}
    return Rich(
        kind="background",
        collapse_key=spec.get("collapse_key"),
        data={"link": spec["link"]} if spec.get("link") else {},
        fcm_android_extra=dict(override.get("android") or {}),
        fcm_aps=aps,
        fcm_options=_fcm_options(spec),
        aps=aps,
    )


def _fcm_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"analytics_label": spec["analytics_label"]} if spec.get("analytics_label") else {}


def _alert(spec: Mapping[str, Any]) -> Rich:
    android, ios = spec.get("android") or {}, spec.get("ios") or {}
    override = spec.get("override") or {}
    sound = spec.get("sound", "default")
    image = spec.get("image")
    notification = {ANDROID_FIELDS[k]: v for k, v in android.items() if k in ANDROID_FIELDS}
    if spec.get("sound"):
        notification["sound"] = spec["sound"]
    if spec.get("click_action"):
        notification["click_action"] = spec["click_action"]
    aps: dict[str, Any] = {}
    if sound is not None:
        aps["sound"] = sound
    if spec.get("badge") is not None:
        aps["badge"] = spec["badge"]
    if spec.get("category"):
        aps["category"] = spec["category"]
    aps.update({IOS_APS_FIELDS[k]: v for k, v in ios.items() if k in IOS_APS_FIELDS})
    if ios.get("content_available"):
        aps["content-available"] = 1
    if ios.get("mutable_content") or image:
        aps["mutable-content"] = 1
    aps.update(override.get("apns") or {})
    fcm_aps = {k: v for k, v in aps.items() if k != "sound" or spec.get("sound")}
    alert = {IOS_ALERT_FIELDS[k]: v for k, v in ios.items() if k in IOS_ALERT_FIELDS}
    if alert:
        fcm_aps["alert"] = dict(alert)
    return Rich(
        kind="alert",
        collapse_key=spec.get("collapse_key"),
        data={"link": spec["link"]} if spec.get("link") else {},
        fcm_notification={"image": image} if image else {},
        fcm_android_notification=notification,
        fcm_android_extra=dict(override.get("android") or {}),
        fcm_aps=fcm_aps,
        fcm_apns_options={"image": image} if image else {},
        fcm_options=_fcm_options(spec),
        aps=aps,
        alert=alert,
        custom={"image": image} if image else {},
    )


def rich_of(m: Any) -> dict[str, Any]:
    """``{"rich": spec}`` of a message with rich fields, else {} (what a dead letter keeps to replay it)."""
    return {"rich": dict(m.rich.spec)} if m.rich is not None else {}


def merge_android(android: dict[str, Any], rich: Rich) -> None:
    """Put the rich Android fields and the override into FCM's ``message.android`` block, in place."""
    if rich.fcm_android_notification:
        android["notification"] = dict(rich.fcm_android_notification)
    for key, value in rich.fcm_android_extra.items():
        if key == "notification" and isinstance(value, dict):
            android["notification"] = {**android.get("notification", {}), **value}
        else:
            android[key] = value
