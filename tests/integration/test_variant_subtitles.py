"""A locale variant's own iOS subtitle (docs/PAYLOADS.md "Per locale"): saved and answered with the
template, checked like the payload's text fields (422 naming ``variants.<tag>.subtitle``), rendered
with the request's variables and delivered to that variant's recipients only, through a topic job
(workers), a single send and a template that reads the recipient; the other locales keep the
payload's subtitle."""

from __future__ import annotations

import pytest

from tests.support.fanout import run_worker_until_idle
from tests.support.registry import admin_headers, apns_credentials, random_token
from tests.support.stores import snapshot

pytestmark = pytest.mark.tenant(credentials=True)

TEMPLATE = {
    "title": "Order {{order}}",
    "body": "Shipped",
    "payload": {"ios": {"subtitle": "Order {{order}} is on its way"}},
    "variants": {
        "de": {"title": "Bestellung {{order}}", "body": "Versandt", "subtitle": "Bestellung {{order}} ist unterwegs"},
        "fr": {"title": "Commande {{order}}", "body": "Expédiée"},
    },
}


def _setup(client, settings, tenant) -> tuple[str, dict[str, str], dict[str, str]]:
    """A user with an iOS device per locale (en, de, fr) and APNs credentials: (user, headers, tokens)."""
    service, headers = tenant
    r = client.put(
        f"/v1/admin/services/{service}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text
    r = client.put("/v1/users/vs-1", json={"name": "Ann"}, headers=headers)
    assert r.status_code in (200, 201), r.text
    user = r.json()["user_id"]
    tokens = {}
    for locale in ("en", "de", "fr"):
        tokens[locale] = random_token(f"vs{locale}")
        d = client.post(
            f"/v1/users/{user}/devices", json={"token": tokens[locale], "os": "IOS", "locale": locale}, headers=headers
        )
        assert d.status_code == 201, d.text
    return user, headers, tokens


def _service(tenant) -> str:
    service, _ = tenant
    return str(service)


def _alerts(emu, tokens) -> dict[str, dict]:
    out = {}
    for locale, token in tokens.items():
        seen = emu.last_request(token)
        assert seen is not None, locale
        out[locale] = seen["body"]["aps"]["alert"]
    return out


def test_topic_job_gives_each_locale_its_subtitle(client, settings, tenant, emulator, emu_runtime):
    user, headers, tokens = _setup(client, settings, tenant)
    r = client.put("/v1/templates/TOPIC/ship", json=TEMPLATE, headers=headers)
    assert r.status_code == 201, r.text
    assert r.json()["variants"]["de"]["subtitle"] == "Bestellung {{order}} ist unterwegs"
    assert client.put(f"/v1/users/{user}/subscriptions/topic/ship/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/ship/all/publish", json={"variables": {"order": "42"}}, headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [_service(tenant)])
    status = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=headers).json()
    assert (status["state"], status["sent"]) == ("done", 3), status
    alerts = _alerts(emulator, tokens)
    assert alerts["de"] == {"title": "Bestellung 42", "body": "Versandt", "subtitle": "Bestellung 42 ist unterwegs"}
    assert alerts["en"]["subtitle"] == "Order 42 is on its way"
    assert alerts["fr"] == {"title": "Commande 42", "body": "Expédiée", "subtitle": "Order 42 is on its way"}


def test_single_send_and_a_recipient_template_give_each_locale_its_subtitle(
    client, settings, tenant, emu_app, emu_runtime
):
    user, headers, tokens = _setup(client, settings, tenant)
    assert client.put("/v1/templates/SINGLE/ship", json=TEMPLATE, headers=headers).status_code == 201
    r = client.post(f"/v1/users/{user}/send", json={"type": "ship", "variables": {"order": "7"}}, headers=headers)
    assert r.status_code == 200 and r.json()["delivered"] == 3, r.text
    alerts = _alerts(emu_app, tokens)
    assert (alerts["de"]["subtitle"], alerts["en"]["subtitle"]) == (
        "Bestellung 7 ist unterwegs",
        "Order 7 is on its way",
    )
    # a template that reads the recipient: rendered per recipient by the workers, subtitle per variant
    personal = TEMPLATE | {"body": "Hi {{ recipient.name }}"}
    personal["variants"] = {
        **TEMPLATE["variants"],
        "de": TEMPLATE["variants"]["de"] | {"body": "Hallo {{ recipient.name }}"},
    }
    assert client.put("/v1/templates/TOPIC/pship", json=personal, headers=headers).status_code == 201
    assert client.put(f"/v1/users/{user}/subscriptions/topic/pship/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/pship/all/publish", json={"variables": {"order": "8"}}, headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [_service(tenant)])
    alerts = _alerts(emu_app, tokens)
    assert alerts["de"] == {"title": "Bestellung 8", "body": "Hallo Ann", "subtitle": "Bestellung 8 ist unterwegs"}
    assert alerts["en"] == {"title": "Order 8", "body": "Hi Ann", "subtitle": "Order 8 is on its way"}


def test_a_variant_subtitle_needs_no_template_payload_and_a_missing_variable_is_listed_once(
    client, settings, tenant, emu_app
):
    user, headers, tokens = _setup(client, settings, tenant)
    body = {"title": "Hi", "body": "B", "variants": {"de": {"title": "Hallo", "body": "B", "subtitle": "Nur {{x}}"}}}
    assert client.put("/v1/templates/SINGLE/only", json=body, headers=headers).status_code == 201
    r = client.post(f"/v1/users/{user}/send", json={"type": "only"}, headers=headers)
    assert r.status_code == 422, r.text
    assert [d["loc"] for d in r.json()["error"]["details"]] == [["body", "variables", "x"]]
    r = client.post(f"/v1/users/{user}/send", json={"type": "only", "variables": {"x": "de"}}, headers=headers)
    assert r.status_code == 200 and r.json()["delivered"] == 3, r.text
    alerts = _alerts(emu_app, tokens)
    assert alerts["de"]["subtitle"] == "Nur de"
    assert "subtitle" not in alerts["en"] and "subtitle" not in alerts["fr"]


@pytest.mark.parametrize(
    "variant,loc",
    [
        ({"subtitle": "{{ a b }}"}, ["body", "variants", "de", "subtitle"]),
        ({"subtitle": "x" * 201}, ["body", "variants", "de", "subtitle"]),
        ({"subtitle": ""}, ["body", "variants", "de", "subtitle"]),
        ({"subtitle": 3}, ["body", "variants", "de", "subtitle"]),
    ],
)
def test_a_bad_variant_subtitle_is_422_naming_it_and_nothing_written(client, runtime, tenant, variant, loc):
    service, headers = tenant
    before = snapshot(runtime, service)
    body = {"title": "t", "body": "b", "variants": {"de": {"title": "t", "body": "b", **variant}}}
    r = client.put("/v1/templates/TOPIC/bad", json=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"][0]["loc"][: len(loc)] == loc, r.text
    assert snapshot(runtime, service) == before


def test_a_cycle_template_variant_subtitle_needs_a_default(client, tenant):
    _, headers = tenant
    body = {"title": "t", "body": "b", "variants": {"de": {"title": "t", "body": "b", "subtitle": "{{n}} neu"}}}
    r = client.put("/v1/templates/CYCLE/daily", json=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"][0]["loc"] == ["body", "variants", "de", "subtitle"], r.text
    r = client.put("/v1/templates/CYCLE/daily", json=body | {"defaults": {"n": "3"}}, headers=headers)
    assert r.status_code == 201, r.text
