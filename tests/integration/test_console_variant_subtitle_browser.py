"""A locale variant's own iOS subtitle in the console (docs/PAYLOADS.md "Per locale"), in a real
browser: headless Chromium against a real `notee api`. The template form saves it (in the variants'
JSON), shows it again on the edit page and keeps it when another field is edited; a bad one is the
API's refusal on the page and nothing is written; the composer's live preview shows each locale's
iOS subtitle (the variant's own, else the payload's) rendered with the form's variables."""

from __future__ import annotations

import json
import secrets

import httpx
from selenium.webdriver.common.by import By

from tests.support import browser
from tests.support.logscan import log_dir, remember_secret
from tests.support.registry import admin_headers, bearer

VARIANTS = {
    "de": {"title": "Bestellung {{ order }}", "body": "Versandt", "subtitle": "Bestellung {{ order }} ist unterwegs"},
    "fr": {"title": "Commande {{ order }}", "body": "Partie"},
}


def _tenant(api: httpx.Client, settings) -> tuple[str, str]:
    service = "V" + secrets.token_hex(5).upper()
    r = api.post(
        "/v1/admin/services",
        json={"service": service, "display_name": "Subtitles", "timezone": "Europe/Berlin"},
        headers=admin_headers(settings),
    )
    assert r.status_code == 201, r.text
    key = api.post(f"/v1/admin/services/{service}/api-keys", json={}, headers=admin_headers(settings)).json()["api_key"]
    remember_secret(key)
    return service, key


def _previewed(b: browser.Browser, before: str | None) -> None:
    b.wait(lambda: b.find("#publish").get_attribute("data-previewed") not in (None, before), 30, "a live preview")


def test_a_variants_own_subtitle_in_the_console_form_and_preview(processes, settings):
    api_proc = processes.api()
    api = httpx.Client(base_url=api_proc.url, timeout=30)
    service, key = _tenant(api, settings)
    with browser.Browser(api_proc.url, log_dir() / "console-variant-subtitle") as b:
        b.visit(f"/console/s/{service}/templates", "sign-in")
        b.submit("sign-in", {"secret": key})
        assert "subtitle" in b.text("#variants-rule")

        # --- saved from the form, as the API stores it -------------------------------------------
        b.submit(
            "new-template",
            {
                "method": "TOPIC",
                "type": "ship",
                "title": "Order {{ order }}",
                "body": "Shipped",
                "variants": json.dumps(VARIANTS),
                "payload": json.dumps({"ios": {"subtitle": "Your order"}}),
            },
        )
        assert "Saved TOPIC ship" in b.text("#saved")
        stored = api.get("/v1/templates/TOPIC/ship", headers=bearer(key)).json()
        assert stored["variants"]["de"]["subtitle"] == "Bestellung {{ order }} ist unterwegs"
        assert stored["variants"]["fr"].get("subtitle") is None

        # --- the edit page shows it, and an edit of the title keeps it ----------------------------
        b.click(b.find('a[data-edit="TOPIC/ship"]'))
        shown = json.loads(b.find('textarea[name="variants"]').get_attribute("value"))
        assert shown["de"]["subtitle"] == "Bestellung {{ order }} ist unterwegs"
        b.submit("new-template", {"title": "Your order {{ order }}"})
        assert "Saved TOPIC ship" in b.text("#saved")
        after = api.get("/v1/templates/TOPIC/ship", headers=bearer(key)).json()
        assert after["title"] == "Your order {{ order }}" and after["variants"] == stored["variants"]

        # --- a bad subtitle (two lines): the API's refusal on the page, nothing written ----------
        b.click(b.find('a[data-edit="TOPIC/ship"]'))
        bad = {**VARIANTS, "de": {**VARIANTS["de"], "subtitle": "two\nlines"}}
        b.submit("new-template", {"variants": json.dumps(bad)})
        assert "subtitle" in b.text("#form-error"), b.text("#form-error")
        assert api.get("/v1/templates/TOPIC/ship", headers=bearer(key)).json()["variants"] == stored["variants"]

        # --- the composer's preview: each locale's iOS subtitle, rendered -------------------------
        b.visit(f"/console/s/{service}/publish?template=TOPIC/ship", "publish")
        b.find('input[name="topic"]').send_keys("all")
        before = b.find("#publish").get_attribute("data-previewed")
        b.find('input[name="var.order"]').send_keys("42")
        _previewed(b, before)
        b.wait(
            lambda: any("Bestellung 42" in c.text for c in b.d.find_elements(By.CSS_SELECTOR, "#preview .device")),
            30,
            "the preview with the order number",
        )
        b.record("compose-subtitle")
        ios = '#preview .device[data-platform="IOS"]'  # the iOS card of each locale (Android has no subtitle)
        cards = {c.get_attribute("data-locale"): c for c in b.d.find_elements(By.CSS_SELECTOR, ios)}
        assert set(cards) == {"default", "de", "fr"}
        subtitle = {
            loc: card.find_element(By.CSS_SELECTOR, ".subtitle").get_attribute("data-subtitle")
            for loc, card in cards.items()
        }
        assert subtitle == {"de": "Bestellung 42 ist unterwegs", "fr": "Your order", "default": "Your order"}
