"""What a device would show for one previewed push: the composer's and the confirmation page's
Android, iOS and Web cards, read from the very bodies the preview built for each provider
(``notee.usecases.preview.PlatformPreview``: FCM's ``{"message": ...}``, the APNs payload and
headers, the Web Push payload), so the card shows what the provider would get, not a second
rendering of the form.

A card is a plain dict (it travels as JSON to ``static/compose.js`` and into the Jinja macro of
``publish_confirm.html``): the platform, whether anything is shown (a background push and a
data-only message show nothing and wake the app), the visible texts, the image's URL (named, never
loaded: the console's CSP fetches nothing from elsewhere) and the other fields as ordered
``facts`` ``[key, label, value]``."""

from __future__ import annotations

from typing import Any

LABELS = {"AOS": "Android", "IOS": "iOS", "WEB": "Web"}
# Keys of the data every push carries that the app never shows (docs/PAYLOADS.md "Notification id").
HIDDEN_DATA = ("notee_id", "link")


def card(os: str, provider: str, body: dict[str, Any], headers: dict[str, str] | None, kind: str) -> dict[str, Any]:
    """The card of one platform (``os``: AOS, IOS, WEB) for the body its ``provider`` would get;
    ``kind`` is the payload's (alert or background). Its ``show`` says what the device does:
    ``alert`` (a notification), ``background`` (nothing shown, the app woken), ``badge`` (no banner,
    the badge set: an iOS badge-only push) or ``data`` (nothing shown, a data message for the app)."""
    if provider == "webpush":
        view = _web(body)
    elif os == "IOS":
        view = _ios_direct(body, headers or {}) if provider == "apns" else _ios_via_fcm(body.get("message") or {})
    else:
        view = _android(body.get("message") or {})
    show = view.pop("show")
    if kind == "background":
        show = "background"
    return {"platform": os, "label": LABELS.get(os, os), "provider": provider, "show": show, **view}


def _fact(facts: list[list[str]], key: str, label: str, value: Any) -> None:
    if value is not None and value != "":
        facts.append([key, label, str(value)])


def _data_facts(facts: list[list[str]], data: dict[str, Any]) -> None:
    _fact(facts, "link", "Tap opens", data.get("link"))
    shown = {k: v for k, v in data.items() if k not in HIDDEN_DATA}
    _fact(facts, "data", "Data for the app", ", ".join(f"{k}={v}" for k, v in shown.items()))


def _android(message: dict[str, Any]) -> dict[str, Any]:
    note = message.get("notification") or {}
    android = message.get("android") or {}
    an = android.get("notification") or {}
    facts: list[list[str]] = []
    _fact(facts, "channel", "Channel", an.get("channel_id"))
    _fact(facts, "icon", "Icon", an.get("icon"))
    _fact(facts, "color", "Colour", an.get("color"))
    _fact(facts, "sound", "Sound", an.get("sound") or ("the channel's" if note else None))
    _fact(facts, "count", "Badge count (adds)", an.get("notification_count"))
    _fact(facts, "click_action", "Click action", an.get("click_action"))
    _fact(facts, "tag", "Tag (replaces)", an.get("tag"))
    _fact(facts, "visibility", "Lock screen", an.get("visibility"))
    _data_facts(facts, message.get("data") or {})
    _fact(facts, "collapse_key", "Collapse key", android.get("collapse_key"))
    _fact(facts, "priority", "Priority", android.get("priority"))
    _fact(facts, "ttl", "TTL", android.get("ttl"))
    return {
        "show": "alert" if note else "data",
        "title": note.get("title") or "",
        "subtitle": "",
        "body": note.get("body") or "",
        "image": note.get("image") or "",
        "facts": facts,
    }


def _ios(aps: dict[str, Any], push_type: str, priority: str, extra: dict[str, Any]) -> dict[str, Any]:
    alert = aps.get("alert") or {}
    alert = {"body": alert} if isinstance(alert, str) else alert
    facts: list[list[str]] = []
    _fact(facts, "sound", "Sound", aps.get("sound"))
    _fact(facts, "badge", "Badge", aps.get("badge"))
    _fact(facts, "category", "Buttons (category)", aps.get("category"))
    _fact(facts, "thread", "Thread", aps.get("thread-id"))
    _fact(facts, "interruption", "Interruption level", aps.get("interruption-level"))
    _fact(facts, "relevance", "Relevance", aps.get("relevance-score"))
    _fact(facts, "wakes", "Wakes the app", "yes (content-available)" if aps.get("content-available") else None)
    _data_facts(facts, extra)
    _fact(facts, "push_type", "apns-push-type", push_type)
    _fact(facts, "priority", "apns-priority", priority)
    banner = bool(alert.get("title") or alert.get("body") or alert.get("subtitle"))
    return {
        "show": "alert" if banner else "badge" if "badge" in aps else "data",
        "title": alert.get("title") or "",
        "subtitle": alert.get("subtitle") or "",
        "body": alert.get("body") or "",
        "image": extra.get("image") or "",
        "facts": facts,
    }


def _ios_direct(payload: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    extra = {k: v for k, v in payload.items() if k != "aps"}
    image = extra.pop("image", None)
    view = _ios(payload.get("aps") or {}, headers.get("apns-push-type", ""), headers.get("apns-priority", ""), extra)
    return view | {"image": image or ""}


def _ios_via_fcm(message: dict[str, Any]) -> dict[str, Any]:
    """iOS through FCM: FCM builds ``aps.alert`` from ``notification`` and ``apns.payload.aps``."""
    block = message.get("apns") or {}
    aps = dict((block.get("payload") or {}).get("aps") or {})
    note = message.get("notification") or {}
    alert = aps.get("alert") if isinstance(aps.get("alert"), dict) else {}
    aps["alert"] = {k: v for k, v in (("title", note.get("title")), ("body", note.get("body"))) if v} | (alert or {})
    head = block.get("headers") or {}
    view = _ios(aps, head.get("apns-push-type", ""), head.get("apns-priority", ""), dict(message.get("data") or {}))
    return view | {"image": (block.get("fcm_options") or {}).get("image") or ""}


def _web(payload: dict[str, Any]) -> dict[str, Any]:
    facts: list[list[str]] = []
    _data_facts(facts, payload.get("data") or {})
    return {
        "show": "alert" if payload.get("title") or payload.get("body") else "data",
        "title": payload.get("title") or "",
        "subtitle": "",
        "body": payload.get("body") or "",
        "image": payload.get("image") or "",
        "facts": facts,
    }
