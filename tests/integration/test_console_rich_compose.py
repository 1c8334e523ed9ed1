"""The composer's rich fields and its device cards (issues 33 and 34; docs/CONSOLE.md "Compose and
follow", docs/PAYLOADS.md), over HTTP: the form sets a publish's ``payload`` (kind, image, sound,
badge, category, channel, subtitle, ... and more as JSON), merged by the API over the template's; the
live preview and the confirmation draw, per locale, an Android and an iOS card read from the bodies
FCM and APNs would get (the rich fields, or "silent: nothing shown" for a background push); the job
carries the payload; a bad value is the API's 422 in the form, the field marked, nothing written."""

from __future__ import annotations

import re
import secrets

import pytest

from notee.store import jobs_sql
from tests.integration.test_console_compose import form_fields, sign_in

pytestmark = pytest.mark.tenant(credentials=True)

TEMPLATE = {
    "title": "Hi {{ name }}",
    "body": "Your order {{ order }}",
    "variants": {"fr": {"title": "Salut {{ name }}", "body": "Commande {{ order }}"}},
    "payload": {"image": "https://example.com/p.png", "android": {"channel_id": "orders"}, "sound": "chime"},
}


def _subscribers(client, tenant, type_: str = "shop") -> None:
    for os_ in ("AOS", "IOS"):
        user = tenant.user(devices=[(f"tok-{secrets.token_hex(8)}", os_)])
        r = client.put(f"/v1/users/{user}/subscriptions/topic/{type_}/all", headers=tenant.headers)
        assert r.status_code in (200, 201), r.text


def _cards(answer: dict) -> dict[tuple[str, str], dict]:
    return {(v["locale"], d["platform"]): d for v in answer["variants"] for d in v["devices"]}


def _facts(card: dict) -> dict[str, str]:
    return {key: value for key, _, value in card["facts"]}


def _jobs(client, tenant) -> list[dict]:
    return client.get("/v1/jobs", headers=tenant.headers).json()["items"]


def test_the_composer_sets_a_publishs_rich_fields_and_draws_each_device(app, client, runtime, tenant):
    service = tenant.service
    assert client.put("/v1/templates/TOPIC/shop", json=TEMPLATE, headers=tenant.headers).status_code == 201
    _subscribers(client, tenant)
    c = sign_in(app, tenant.api_key)
    page = c.get(f"/console/s/{service}/publish?template=TOPIC/shop")
    assert page.status_code == 200 and 'name="payload.badge"' in page.text and 'name="payload.kind"' in page.text
    form = form_fields(page.text, "publish") | {"topic": "all", "var.name": "Ann", "var.order": "42"}
    rich = {
        "payload.badge": "5",
        "payload.category": "ORDER",
        "payload.link": "shop://orders/42",
        "payload.ios.subtitle": "Shipped {{ order }}",
        "payload.android.channel_id": "promo",  # over the template's "orders"
        "payload.sound_mode": "none",  # over the template's "chime": no sound key at all
        "payload.ios.interruption_level": "time-sensitive",
        "payload_json": '{"android": {"color": "#3366FF"}, "collapse_key": "order-42"}',
    }
    r = c.post(f"/console/s/{service}/publish/preview.json", data=form | rich)
    assert r.status_code == 200, r.text
    cards = _cards(r.json())
    assert set(cards) == {(loc, os_) for loc in ("default", "fr") for os_ in ("AOS", "IOS")}
    android, ios = cards[("default", "AOS")], cards[("default", "IOS")]
    assert (android["label"], android["show"], android["title"], android["body"]) == (
        "Android",
        "alert",
        "Hi Ann",
        "Your order 42",
    )
    assert android["image"] == "https://example.com/p.png" and android["subtitle"] == ""  # Android has none
    shown = _facts(android)
    assert {k: shown.get(k) for k in ("channel", "color", "link", "collapse_key")} == {
        "channel": "promo",
        "color": "#3366FF",
        "link": "shop://orders/42",
        "collapse_key": "order-42",
    }
    assert "sound" not in _facts(android) or _facts(android)["sound"] == "the channel's"
    assert (ios["label"], ios["show"], ios["title"], ios["subtitle"]) == ("iOS", "alert", "Hi Ann", "Shipped 42")
    assert ios["image"] == "https://example.com/p.png"
    facts = _facts(ios)
    assert (facts["badge"], facts["category"], facts["interruption"], facts["push_type"]) == (
        "5",
        "ORDER",
        "time-sensitive",
        "alert",
    )
    assert "sound" not in facts  # sound "none": no sound key
    assert cards[("fr", "IOS")]["title"] == "Salut Ann" and cards[("fr", "IOS")]["subtitle"] == "Shipped 42"
    assert all(0 < d["bytes"] <= d["limit"] == 4096 for d in cards.values())

    # The confirmation page draws the same cards; its Send publishes with the payload.
    review = c.post(f"/console/s/{service}/publish", data=form | rich)
    assert review.status_code == 200 and 'id="confirm"' in review.text
    ios_card = review.text.split('data-platform="IOS" data-locale="default"', 1)[1].split("</section>", 1)[0]
    assert 'data-subtitle="Shipped 42"' in ios_card and 'data-fact="category">ORDER<' in ios_card
    assert 'data-fact="badge">5<' in ios_card and "Image: https://example.com/p.png" in ios_card
    assert _jobs(client, tenant) == []  # nothing sent before Send
    sent = c.post(f"/console/s/{service}/publish", data=form_fields(review.text, "confirm"))
    assert sent.status_code == 303, sent.text
    [job] = _jobs(client, tenant)
    with runtime.sessions() as s:
        stored = jobs_sql.get_job(s, job["job_id"], service)
    assert stored is not None
    spec = stored.payload["rich"]
    assert (spec["badge"], spec["category"], spec["sound"], spec["collapse_key"]) == (5, "ORDER", None, "order-42")
    assert spec["android"] == {"channel_id": "promo", "color": "#3366FF"}
    assert spec["ios"]["subtitle"] == "Shipped 42" and spec["image"] == "https://example.com/p.png"


def test_a_background_publish_shows_nothing_and_wakes_the_app(app, client, tenant):
    service = tenant.service
    silent = {"title": "", "body": "", "data": {"sync": "inbox"}, "payload": {"kind": "background"}}
    assert client.put("/v1/templates/TOPIC/sync", json=silent, headers=tenant.headers).status_code == 201
    _subscribers(client, tenant, "sync")
    c = sign_in(app, tenant.api_key)
    form = form_fields(c.get(f"/console/s/{service}/publish?template=TOPIC/sync").text, "publish")
    form |= {"target": "topic", "topic": "all", "payload.collapse_key": "inbox"}
    r = c.post(f"/console/s/{service}/publish/preview.json", data=form)
    assert r.status_code == 200, r.text
    cards = _cards(r.json())
    android, ios = cards[("default", "AOS")], cards[("default", "IOS")]
    assert android["show"] == ios["show"] == "background" and ios["title"] == ios["body"] == ""
    assert _facts(ios)["push_type"] == "background" and _facts(ios)["priority"] == "5"
    assert _facts(ios)["wakes"].startswith("yes") and _facts(android)["data"] == "sync=inbox"
    review = c.post(f"/console/s/{service}/publish", data=form)
    assert review.status_code == 200
    assert review.text.count('data-silent="background">Silent: nothing shown, wakes the app<') == 2

    # The form's kind turns it into an alert for this publish (with a title of its own).
    alert = form | {"payload.kind": "alert", "title": "Inbox updated"}
    r = c.post(f"/console/s/{service}/publish/preview.json", data=alert)
    assert r.status_code == 200, r.text
    ios = _cards(r.json())[("default", "IOS")]
    assert (ios["show"], ios["title"], _facts(ios)["push_type"]) == ("alert", "Inbox updated", "alert")


def test_a_bad_rich_field_is_the_apis_422_in_the_form_and_nothing_is_written(app, client, tenant):
    service = tenant.service
    assert client.put("/v1/templates/TOPIC/shop", json=TEMPLATE, headers=tenant.headers).status_code == 201
    _subscribers(client, tenant)
    c = sign_in(app, tenant.api_key)
    form = form_fields(c.get(f"/console/s/{service}/publish?template=TOPIC/shop").text, "publish")
    form |= {"topic": "all", "var.name": "Ann", "var.order": "1"}
    cases = [
        ({"payload.badge": "-1"}, "payload.badge"),
        ({"payload.image": "http://example.com/p.png"}, "payload.image"),
        ({"payload.kind": "background"}, None),  # a background push with the template's image and title
        ({"payload_json": '{"android": {"color": "red"}}'}, "payload_json"),
        ({"payload_json": "{not json"}, "payload_json"),
        ({"payload.ios.subtitle": "{{ missing }}"}, None),  # every missing variable: the API's message
    ]
    for fields, marked in cases:
        r = c.post(f"/console/s/{service}/publish/preview.json", data=form | fields)
        assert r.status_code == 422, (fields, r.text)
        assert r.json()["error"]["code"] in ("invalid_input", "missing_variables"), r.text
        if marked:
            assert marked in r.json()["invalid"], (fields, r.json())
        for confirmed in ({}, {"confirmed": "1"}):
            page = c.post(f"/console/s/{service}/publish", data=form | fields | confirmed)
            assert page.status_code == 422 and 'id="form-error"' in page.text, fields
            if marked:
                control = re.search(rf'name="{re.escape(marked)}"[^>]*>', page.text)
                assert control and 'aria-invalid="true"' in control.group(0), (marked, control)
    assert _jobs(client, tenant) == []
