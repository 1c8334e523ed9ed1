"""Rich pushes (docs/PAYLOADS.md): the payload rules (every bad value a 422 naming the field), the
mapping to FCM's message (equal to firebase-admin's encoding of the same fields) and to APNs'
``aps`` and headers, the background rules, the override's owned keys and the size per platform.
The emulator's side and delivery end to end: tests/integration/test_rich_pushes.py."""

from __future__ import annotations

import json
import warnings

import pytest

from notee.core import notification_id
from notee.core.errors import InvalidInput, PayloadTooLarge
from notee.core.vocabulary import Recipient
from notee.domain import payloads, render
from notee.providers import apns, fcm
from notee.providers.apns import apns_headers, apns_payload
from notee.providers.base import Message
from notee.providers.fcm import fcm_message
from notee.providers.payload import Rich
from notee.worker.messages import messages_for

ALERT = {
    "image": "https://cdn.example.com/p/42.jpg",
    "sound": "chime.caf",
    "badge": 3,
    "click_action": "OPEN_ORDER",
    "link": "shop://orders/42",
    "category": "ORDER",
    "collapse_key": "orders",
    "analytics_label": "spring_sale",
    "android": {
        "channel_id": "orders",
        "icon": "ic_cart",
        "color": "#3366FF",
        "tag": "o42",
        "visibility": "PRIVATE",
        "notification_priority": "PRIORITY_HIGH",
        "notification_count": 2,
    },
    "ios": {
        "thread_id": "orders",
        "interruption_level": "time-sensitive",
        "relevance_score": 0.5,
        "target_content_id": "order-42",
        "subtitle": "Order 42",
        "launch_image": "Launch.png",
    },
}


def _msg(spec, **kw) -> Message:
    rich = Rich.from_spec(payloads.check_payload(spec))
    collapse = rich.collapse_key if rich is not None else None
    return Message(
        "tok", "AOS", kw.pop("title", "Hi"), kw.pop("body", "Shipped"), {"a": "1"}, 60, "high", collapse, rich
    )


def _sdk_alert(now: int):
    """firebase-admin's Message for ALERT sent as ``_msg(ALERT)``: its builder names the same fields."""
    from firebase_admin import messaging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return messaging.Message(
            token="tok",
            notification=messaging.Notification(title="Hi", body="Shipped", image=ALERT["image"]),
            data={"a": "1", "link": "shop://orders/42"},
            android=messaging.AndroidConfig(
                priority="high",
                ttl=60,
                collapse_key="orders",
                notification=messaging.AndroidNotification(
                    channel_id="orders",
                    icon="ic_cart",
                    color="#3366FF",
                    tag="o42",
                    visibility="private",
                    priority="high",
                    notification_count=2,
                    sound="chime.caf",
                    click_action="OPEN_ORDER",
                ),
            ),
            apns=messaging.APNSConfig(
                headers={
                    "apns-priority": "10",
                    "apns-expiration": str(now + 60),
                    "apns-collapse-id": "orders",
                    "apns-push-type": "alert",
                },
                payload=messaging.APNSPayload(
                    aps=messaging.Aps(
                        alert=messaging.ApsAlert(subtitle="Order 42", launch_image="Launch.png"),
                        badge=3,
                        sound="chime.caf",
                        category="ORDER",
                        thread_id="orders",
                        mutable_content=True,
                        custom_data={
                            "interruption-level": "time-sensitive",
                            "relevance-score": 0.5,
                            "target-content-id": "order-42",
                        },
                    )
                ),
                fcm_options=messaging.APNSFCMOptions(image=ALERT["image"]),
            ),
            fcm_options=messaging.FCMOptions(analytics_label="spring_sale"),
        )


def test_fcm_alert_equals_firebase_admins_encoding_of_the_same_fields():
    from firebase_admin import messaging

    assert fcm_message(_msg(ALERT), now=1000) == messaging._MessagingService.encode_message(_sdk_alert(1000))


def test_fcm_background_is_data_only_and_says_background_to_apns():
    from firebase_admin import messaging

    m = _msg({"kind": "background", "collapse_key": "sync"}, title="", body="")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        sdk = messaging.Message(
            token="tok",
            data={"a": "1"},
            android=messaging.AndroidConfig(priority="high", ttl=60, collapse_key="sync"),
            apns=messaging.APNSConfig(
                headers={
                    "apns-priority": "5",
                    "apns-expiration": "1060",
                    "apns-collapse-id": "sync",
                    "apns-push-type": "background",
                },
                payload=messaging.APNSPayload(aps=messaging.Aps(content_available=True)),
            ),
        )
    assert fcm_message(m, now=1000) == messaging._MessagingService.encode_message(sdk)
    assert "notification" not in fcm_message(m, now=1000)


def test_apns_alert_payload_and_headers():
    m = _msg(ALERT)
    assert apns_payload(m.title, m.body, m.data, m.rich) == {
        "aps": {
            "alert": {"title": "Hi", "body": "Shipped", "subtitle": "Order 42", "launch-image": "Launch.png"},
            "sound": "chime.caf",
            "badge": 3,
            "category": "ORDER",
            "thread-id": "orders",
            "interruption-level": "time-sensitive",
            "relevance-score": 0.5,
            "target-content-id": "order-42",
            "mutable-content": 1,
        },
        "a": "1",
        "link": "shop://orders/42",
        "image": ALERT["image"],
    }
    headers = dict(apns_headers(m, "com.example", b"bearer x", now=1000, apns_id=b"id"))
    assert headers[b"apns-push-type"] == b"alert" and headers[b"apns-priority"] == b"10"
    assert headers[b"apns-collapse-id"] == b"orders"


def test_apns_background_is_content_available_only_priority_5():
    m = _msg({"kind": "background"}, title="", body="")
    assert apns_payload(m.title, m.body, m.data, m.rich) == {"aps": {"content-available": 1}, "a": "1"}
    headers = dict(apns_headers(m, "com.example", b"bearer x", now=1000, apns_id=b"id"))
    assert headers[b"apns-push-type"] == b"background" and headers[b"apns-priority"] == b"5"


def test_sound_absent_is_default_on_apns_null_is_none_and_badge_only_has_no_alert():
    plain = _msg({"badge": 1})
    assert apns_payload(plain.title, plain.body, {}, plain.rich)["aps"]["sound"] == "default"
    silent = _msg({"sound": None, "badge": 0}, title="", body="")  # badge-only: clears the badge
    assert apns_payload("", "", {}, silent.rich) == {"aps": {"badge": 0}}
    assert "notification" not in fcm_message(silent) and "sound" not in fcm_message(silent)["apns"]["payload"]["aps"]
    assert apns_payload("T", "B", {}, None) == {"aps": {"alert": {"title": "T", "body": "B"}, "sound": "default"}}


def test_override_merges_and_may_not_set_owned_keys():
    spec = {
        "override": {
            "android": {"direct_boot_ok": True, "notification": {"sticky": True}},
            "apns": {"stale-date": 1900000000},
        },
        "android": {"channel_id": "c"},
    }
    m = _msg(spec)
    android = fcm_message(m)["android"]
    assert android["direct_boot_ok"] is True and android["notification"] == {"channel_id": "c", "sticky": True}
    assert apns_payload("T", "B", {}, m.rich)["aps"]["stale-date"] == 1900000000
    for bad, loc in [
        ({"override": {"android": {"priority": "normal"}}}, ["body", "payload", "override", "android", "priority"]),
        (
            {"override": {"android": {"notification": {"title": "x"}}}},
            ["body", "payload", "override", "android", "notification", "title"],
        ),
        ({"override": {"apns": {"alert": "x"}}}, ["body", "payload", "override", "apns", "alert"]),
        ({"override": {"apns": {"badge": 1}}}, ["body", "payload", "override", "apns", "badge"]),
        ({"override": {"web": {}}}, ["body", "payload", "override", "web"]),
        ({"override": {"apns": {"x": "y" * 3000}}}, ["body", "payload", "override"]),
    ]:
        with pytest.raises(InvalidInput) as exc:
            payloads.check_payload(bad)
        assert exc.value.details[0]["loc"] == loc, bad


@pytest.mark.parametrize(
    "spec,loc",
    [
        ({"kind": "silent"}, ["kind"]),
        ({"image": "http://x/a.png"}, ["image"]),
        ({"badge": -1}, ["badge"]),
        ({"badge": True}, ["badge"]),
        ({"sound": "a/b"}, ["sound"]),
        ({"analytics_label": "has space"}, ["analytics_label"]),
        ({"collapse_key": "k" * 65}, ["collapse_key"]),
        ({"android": {"color": "red"}}, ["android", "color"]),
        ({"android": {"visibility": "HIDDEN"}}, ["android", "visibility"]),
        ({"android": {"notification_priority": "HIGH"}}, ["android", "notification_priority"]),
        ({"android": {"sticky": True}}, ["android", "sticky"]),
        ({"ios": {"interruption_level": "urgent"}}, ["ios", "interruption_level"]),
        ({"ios": {"relevance_score": 2}}, ["ios", "relevance_score"]),
        ({"ios": {"mutable_content": 1}}, ["ios", "mutable_content"]),
        ({"nope": 1}, ["nope"]),
        ({"collapse_key": "o-{{id}}"}, ["collapse_key"]),
        ({"override": {"apns": {"x": "{{id}}"}}}, ["override"]),
        ({"kind": "background", "badge": 1}, ["badge"]),
        ({"kind": "background", "sound": "x"}, ["sound"]),
        ({"kind": "background", "ios": {"subtitle": "x"}}, ["ios", "subtitle"]),
        ({"kind": "background", "image": "https://x/a.png"}, ["image"]),
    ],
)
def test_bad_values_are_422_naming_the_field(spec, loc):
    with pytest.raises(InvalidInput) as exc:
        payloads.check_payload(spec)
    assert exc.value.details[0]["loc"] == ["body", "payload", *loc]


def test_background_with_a_title_is_refused():
    with pytest.raises(InvalidInput) as exc:
        payloads.check_text_for_kind({"kind": "background"}, "Hi", "")
    assert exc.value.details[0]["loc"] == ["body", "title"]


def test_merge_replaces_fields_and_merges_sections():
    base = {"badge": 1, "android": {"channel_id": "a", "tag": "t"}}
    assert payloads.merge(base, {"badge": 2, "android": {"channel_id": "b"}}) == {
        "badge": 2,
        "android": {"channel_id": "b", "tag": "t"},
    }
    with pytest.raises(InvalidInput):  # the whole is checked: a background request over a badge
        payloads.merge(base, {"kind": "background"})


def test_text_fields_render_with_the_pushs_variables_and_missing_ones_are_reported_together():
    spec = payloads.check_payload({"link": "shop://o/{{id}}", "ios": {"subtitle": "For {{name}}"}})
    content = render.TemplateContent("Hi {{name}}", "B", None, None, None, "high")
    push, rich = payloads.render_with(
        spec, None, {"name": "Ann", "id": "7"}, lambda: render.render(content, {"name": "Ann", "id": "7"})
    )
    assert push.title == "Hi Ann" and rich == {"link": "shop://o/7", "ios": {"subtitle": "For Ann"}}
    with pytest.raises(InvalidInput) as exc:
        payloads.render_with(spec, None, {}, lambda: render.render(content, {}))
    assert {d["loc"][-1] for d in exc.value.details} == {"name", "id"}
    with pytest.raises(InvalidInput) as exc:  # a variable may not turn the image into a non-https URL
        image = payloads.check_payload({"image": "https://{{host}}/a.png"})
        payloads.render_with(image, None, {"host": "x y"}, lambda: render.render(content, {"name": "A"}))
    assert exc.value.details[0]["loc"] == ["body", "payload", "image"]


def test_size_is_checked_per_platform_with_the_exact_byte_count():
    spec = payloads.check_payload({"override": {"apns": {"filler": "x" * 1900}}, "ios": {"subtitle": "s" * 200}})
    rich = Rich.from_spec(spec)
    body = "b" * (apns.PAYLOAD_LIMIT - apns.payload_bytes("", "", {}, rich) + 1)
    with pytest.raises(PayloadTooLarge) as exc:
        payloads.check_size("", body, {}, spec)
    size = apns.payload_bytes("", body, {}, rich)
    assert [d["loc"] for d in exc.value.details] == [["payload", "fcm"], ["payload", "apns"]]
    assert f"APNS payload would be {size} bytes; at most 4096" in exc.value.message
    nid = notification_id.SAMPLE  # every push carries one: it counts in the size
    encoded = json.dumps(apns_payload("", body, {}, rich, nid), separators=(",", ":"), ensure_ascii=False).encode()
    assert size == len(encoded)
    assert fcm.payload_bytes("T", "B", {"k": "v"}) == fcm.payload_bytes("T", "B", {"k": "v"}, None)


def test_a_page_shares_one_rich_object():
    payload = {"title": "T", "body": "B", "data": {}, "rich": {"badge": 2, "collapse_key": "c"}}
    msgs = messages_for([Recipient("t1", "AOS", "u1"), Recipient("t2", "IOS", "u2")], payload)
    assert msgs[0].rich is msgs[1].rich and msgs[0].collapse_key == "c"


def test_a_dead_letter_keeps_the_payload_and_its_replay_maps_it_again():
    from notee.providers.payload import rich_of

    m = _msg({"kind": "background", "collapse_key": "sync"}, title="", body="")
    kept = rich_of(m)
    assert kept == {"rich": {"kind": "background", "collapse_key": "sync"}}
    again = Rich.from_spec(kept["rich"])
    assert again is not None and again.background and again.collapse_key == "sync"
    assert rich_of(Message("t", "AOS", "T", "B")) == {}
