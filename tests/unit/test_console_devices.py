"""The console's device cards (notee/api/console/devices.py): what an Android, an iOS and a Web
device would show, read from the bodies the providers' own builders make for a push, rich, silent
or badge-only; iOS alike whether it goes to APNs directly or through FCM."""

from __future__ import annotations

from typing import Any

from notee.api.console.devices import card
from notee.core import notification_id
from notee.providers import apns, fcm, webpush
from notee.providers.base import Message
from notee.providers.payload import Rich

RICH = {
    "image": "https://e.com/i.png",
    "sound": "chime",
    "badge": 3,
    "link": "app://x",
    "category": "ORDER",
    "click_action": "OPEN",
    "collapse_key": "c",
    "android": {"channel_id": "news", "color": "#112233"},
    "ios": {"subtitle": "Sub", "thread_id": "th", "interruption_level": "time-sensitive"},
}


def _message(spec: dict[str, Any] | None, title: str = "Title", body: str = "Body") -> Message:
    rich = Rich.from_spec(spec)
    collapse = rich.collapse_key if rich else None
    return Message("tok", "AOS", title, body, {"k": "v"}, 60, "high", collapse, rich, notification_id.SAMPLE)


def _cards(spec: dict[str, Any] | None, **texts: str) -> dict[str, dict[str, Any]]:
    m = _message(spec, **texts)
    kind = (spec or {}).get("kind") or "alert"
    direct = apns.apns_payload(m.title, m.body, m.data, m.rich, m.notification_id or "")
    headers = {k.decode(): v.decode() for k, v in apns.apns_headers(m, "bundle", b"")}
    web = webpush.webpush_payload(m.title, m.body, m.data, m.rich, m.notification_id or "")
    return {
        "AOS": card("AOS", "fcm", {"message": fcm.fcm_message(m)}, None, kind),
        "IOS": card("IOS", "apns", direct, headers, kind),
        "IOS-fcm": card("IOS", "fcm", {"message": fcm.fcm_message(m)}, None, kind),
        "WEB": card("WEB", "webpush", web, None, kind),
    }


def _facts(c: dict[str, Any]) -> dict[str, str]:
    return {key: value for key, _, value in c["facts"]}


def test_a_rich_alert_on_each_device():
    cards = _cards(RICH)
    android = cards["AOS"]
    assert (android["label"], android["show"], android["title"], android["body"], android["subtitle"]) == (
        "Android",
        "alert",
        "Title",
        "Body",
        "",
    )
    assert android["image"] == "https://e.com/i.png"
    assert _facts(android) == {
        "channel": "news",
        "color": "#112233",
        "sound": "chime",
        "click_action": "OPEN",
        "link": "app://x",
        "data": "k=v",  # notee_id and link are not the app's data to show
        "collapse_key": "c",
        "priority": "high",
        "ttl": "60s",
    }
    for ios in (cards["IOS"], cards["IOS-fcm"]):  # the same device, whichever way it goes
        assert (ios["label"], ios["show"], ios["title"], ios["subtitle"], ios["body"]) == (
            "iOS",
            "alert",
            "Title",
            "Sub",
            "Body",
        )
        assert ios["image"] == "https://e.com/i.png"
        facts = _facts(ios)
        assert (facts["badge"], facts["sound"], facts["category"], facts["thread"]) == ("3", "chime", "ORDER", "th")
        assert (facts["interruption"], facts["push_type"], facts["priority"]) == ("time-sensitive", "alert", "10")
        assert facts["link"] == "app://x" and "image" not in facts
    web = cards["WEB"]
    assert (web["show"], web["title"], web["image"], _facts(web)["link"]) == (
        "alert",
        "Title",
        "https://e.com/i.png",
        "app://x",
    )


def test_a_background_push_shows_nothing_and_wakes_the_app():
    cards = _cards({"kind": "background", "collapse_key": "sync"}, title="", body="")
    assert {c["show"] for c in cards.values()} == {"background"}
    for ios in (cards["IOS"], cards["IOS-fcm"]):
        facts = _facts(ios)
        assert (facts["push_type"], facts["priority"], facts["wakes"]) == ("background", "5", "yes (content-available)")
        assert ios["title"] == ios["body"] == ""
    assert _facts(cards["AOS"])["data"] == "k=v" and "channel" not in _facts(cards["AOS"])


def test_a_badge_only_push_sets_the_badge_without_a_banner():
    cards = _cards({"badge": 0, "sound": None}, title="", body="")
    assert cards["IOS"]["show"] == cards["IOS-fcm"]["show"] == "badge"
    assert _facts(cards["IOS"])["badge"] == "0" and "sound" not in _facts(cards["IOS"])
    assert cards["AOS"]["show"] == "data"  # FCM gets a message without a notification: nothing shown


def test_a_plain_push_plays_the_default_sound_on_ios_and_the_channels_on_android():
    cards = _cards(None)
    assert _facts(cards["IOS"])["sound"] == "default" and _facts(cards["AOS"])["sound"] == "the channel's"
    assert cards["AOS"]["image"] == cards["IOS"]["image"] == "" and cards["IOS"]["subtitle"] == ""
