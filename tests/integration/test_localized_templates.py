"""Localized templates (issue 18 item 5): a template holds variants per locale (BCP 47), users and
devices carry a locale (a device's wins), each recipient gets the best match (language-Script-REGION,
then shorter, then the template's own text), and rendering happens once per job and variant (topic,
cycle) or once per variant used (single send), never per device -- counted, and checked as the
emulator received each push.

The rules of this topic that need no server are in tests/unit/test_localized_templates.py."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, timezone

import pytest

from notee.domain import render
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import new_user, random_token
from tests.support.stores import snapshot

VARIANTS = {
    "de": {"title": "Hallo {{name}}", "body": "Neu"},
    "pt-BR": {"title": "Olá {{name}}", "body": "Novo", "data": {"lang": "pt-BR"}},
    "zh-Hant": {"title": "你好 {{name}}", "body": "新"},
}

TEMPLATE = {"title": "Hello {{name}}", "body": "New", "data": {"lang": "en", "k": "v"}, "variants": VARIANTS}


pytestmark = pytest.mark.tenant(credentials=True)


def test_template_variants_round_trip_with_canonical_tags(client, tenant):
    _, headers = tenant
    body = TEMPLATE | {"variants": VARIANTS | {"fr-ca": {"title": "Salut", "body": "Nouveau"}}}
    r = client.put("/v1/templates/TOPIC/news", json=body, headers=headers)
    assert r.status_code == 201, r.text
    got = client.get("/v1/templates/TOPIC/news", headers=headers).json()["variants"]
    assert set(got) == {"de", "pt-BR", "zh-Hant", "fr-CA"}
    assert got["pt-BR"] == {"title": "Olá {{name}}", "body": "Novo", "data": {"lang": "pt-BR"}, "subtitle": None}


@pytest.mark.parametrize(
    "variants, where",
    [
        ({"de_DE": {"title": "t", "body": "b"}}, "de_DE"),  # not BCP 47
        ({"english": {"title": "t", "body": "b"}}, "english"),
        ({"de": {"title": "t"}}, "body"),  # body missing
        ({"de": {"title": "{{ a b }}", "body": "b"}}, "title"),  # not a placeholder
        ({"de": {"title": "t", "body": "b", "ttl_seconds": 3}}, "ttl_seconds"),  # unknown field
        ({"de": {"title": "t", "body": "b"}, "DE": {"title": "t", "body": "b"}}, "DE"),  # the same locale twice
    ],
)
def test_bad_variants_are_422_and_nothing_is_written(client, runtime, tenant, variants, where):
    service, headers = tenant
    before = snapshot(runtime, service)
    r = client.put("/v1/templates/TOPIC/news", json={"title": "t", "body": "b", "variants": variants}, headers=headers)
    assert r.status_code == 422, r.text
    assert where in r.text
    assert set(r.json()["error"]) >= {"code", "message", "details"}
    assert snapshot(runtime, service) == before


def test_user_and_device_locales_set_kept_and_cleared(client, runtime, tenant):
    service, headers = tenant
    r = client.put("/v1/users/loc-1", json={"name": "a", "locale": "pt-br"}, headers=headers)
    assert r.status_code == 201 and r.json()["locale"] == "pt-BR", r.text
    user = r.json()["user_id"]
    assert client.put("/v1/users/loc-1", json={"name": "b"}, headers=headers).json()["locale"] == "pt-BR"  # kept
    assert client.put("/v1/users/loc-1", json={"locale": None}, headers=headers).json()["locale"] is None
    d = client.post(
        f"/v1/users/{user}/devices", json={"token": random_token(), "os": "AOS", "locale": "DE"}, headers=headers
    )
    assert d.status_code == 201 and d.json()["locale"] == "de", d.text
    before = snapshot(runtime, service)
    for bad in (
        client.put("/v1/users/loc-1", json={"locale": "deutsch"}, headers=headers),
        client.post(
            f"/v1/users/{user}/devices", json={"token": random_token(), "os": "AOS", "locale": "x"}, headers=headers
        ),
        client.put("/v1/users/loc-2", json={"locale": 5}, headers=headers),
    ):
        assert bad.status_code == 422, bad.text
        assert bad.json()["error"]["details"][0]["loc"][-1] == "locale"
    assert snapshot(runtime, service) == before


def _titles(emu, tokens):
    out = {}
    for t in tokens:
        last = emu.last_request(t)
        assert last is not None, t
        out[t] = (last["body"]["notification"]["title"], (last["body"].get("data") or {}).get("lang"))
    return out


def _users(client, headers):
    """Five recipients: (user locale, device locale) -> the variant each must get."""
    cases = [
        ("de-AT", None, ("Hallo Kim", "en")),  # user locale, language match
        (None, "pt-BR", ("Olá Kim", "pt-BR")),  # device locale, exact match
        ("pt-BR", "fr", ("Hello Kim", "en")),  # the device's locale wins over the user's: default
        ("zh-Hant-TW", None, ("你好 Kim", "en")),
        (None, None, ("Hello Kim", "en")),  # no locale: the template's own text
    ]
    expected = {}
    for user_locale, device_locale, want in cases:
        token = random_token("l")
        body = {"name": "x"} | ({"locale": user_locale} if user_locale else {})
        user = client.put(f"/v1/users/u-{secrets.token_hex(5)}", json=body, headers=headers).json()["user_id"]
        device = {"token": token, "os": "AOS"} | ({"locale": device_locale} if device_locale else {})
        assert client.post(f"/v1/users/{user}/devices", json=device, headers=headers).status_code == 201
        expected[token] = (user, want)
    return expected


def test_a_topic_publish_renders_once_per_variant_and_each_device_gets_its_locale(
    client, tenant, emulator, emu_runtime, monkeypatch
):
    service, headers = tenant
    assert client.put("/v1/templates/TOPIC/news", json=TEMPLATE, headers=headers).status_code == 201
    expected = _users(client, headers)
    for user, _ in expected.values():
        assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    calls = []
    real = render.render
    monkeypatch.setattr(render, "render", lambda *a, **k: calls.append(1) or real(*a, **k))
    r = client.post("/v1/topics/news/all/publish", json={"variables": {"name": "Kim"}}, headers=headers)
    assert r.status_code == 202, r.text
    assert len(calls) == 1 + len(VARIANTS)  # once per variant, when the job is made
    run_worker_until_idle(emu_runtime, [service])
    assert len(calls) == 1 + len(VARIANTS)  # the worker renders nothing
    status = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=headers).json()
    assert (status["state"], status["sent"]) == ("done", len(expected)), status
    assert _titles(emulator, expected) == {t: want for t, (_, want) in expected.items()}


def test_a_single_send_renders_once_per_variant_used(client, tenant, emu_app, monkeypatch):
    import notee.usecases.single_send as single_send

    _, headers = tenant
    assert client.put("/v1/templates/SINGLE/s", json=TEMPLATE, headers=headers).status_code == 201
    r = client.put("/v1/users/multi", json={"name": "m", "locale": "de"}, headers=headers)
    user = r.json()["user_id"]
    devices = {random_token("a"): None, random_token("b"): None, random_token("c"): "pt-BR", random_token("d"): "pt-BR"}
    for token, locale in devices.items():
        body = {"token": token, "os": "AOS"} | ({"locale": locale} if locale else {})
        assert client.post(f"/v1/users/{user}/devices", json=body, headers=headers).status_code == 201
    calls = []
    real = single_send.render
    monkeypatch.setattr(single_send, "render", lambda *a, **k: calls.append(1) or real(*a, **k))
    r = client.post(f"/v1/users/{user}/send", json={"type": "s", "variables": {"name": "Kim"}}, headers=headers)
    assert r.status_code == 200 and r.json()["delivered"] == 4, r.text
    assert len(calls) == 2  # de (the user's, two devices) and pt-BR (two devices): not 4, not 1 + 3
    titles = {t: v[0] for t, v in _titles(emu_app, devices).items()}
    assert sorted(titles.values()) == ["Hallo Kim", "Hallo Kim", "Olá Kim", "Olá Kim"]


def test_a_cycle_push_is_localized(client, runtime, tenant, emulator, emu_runtime):
    from tests.support.scheduler import scheduler

    service, headers = tenant
    body = {
        "title": "Hi {{name}}",
        "body": "b",
        "defaults": {"name": "there"},
        "variants": {"de": {"title": "Hallo {{name}}", "body": "b"}},
    }
    assert client.put("/v1/templates/CYCLE/remind", json=body, headers=headers).status_code == 201
    hour, minute_ = secrets.randbelow(24), secrets.randbelow(60)
    seoul = datetime(2031, 3, 3, hour, minute_, tzinfo=timezone(timedelta(hours=9)))  # a Monday in Seoul
    tokens = {}
    for locale in ("de-DE", "en"):
        token = random_token("c")
        user = new_user(client, headers, devices=[(token, "AOS")])
        r = client.post(
            f"/v1/users/{user}/devices", json={"token": token, "os": "AOS", "locale": locale}, headers=headers
        )
        assert r.status_code == 200, r.text
        r = client.put(
            f"/v1/users/{user}/subscriptions/cycle/remind",
            json={"days": ["MON"], "hour": hour, "minute": minute_, "timezone": "Asia/Seoul"},
            headers=headers,
        )
        assert r.status_code in (200, 201), r.text
        tokens[token] = locale
    minute = seoul.astimezone(UTC)
    scheduler(runtime).run_minute(minute, now=minute)
    run_worker_until_idle(emu_runtime, [service])
    got = {tokens[t]: v[0] for t, v in _titles(emulator, tokens).items()}
    assert got == {"de-DE": "Hallo there", "en": "Hi there"}
