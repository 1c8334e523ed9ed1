"""Templates with logic through the API, the worker and the emulator (docs/TEMPLATES.md): a 422
naming the field for a template the engine refuses (nothing written), loops over list variables,
every missing name in one 422 (nothing queued), and a template reading the recipient rendered per
recipient by the worker (its name, its time zone and locale) while a plain one is still rendered once
per job."""

from __future__ import annotations

import secrets
import time
from datetime import timedelta

import pytest
from sqlalchemy import text as sql_text

from notee.domain import liquid, render
from notee.store import mysql
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import new_user, random_token
from tests.support.stores import snapshot
from tests.support.waiting import wait_for

pytestmark = pytest.mark.tenant(credentials=True)


def _seen(emu, token: str) -> tuple[str, str]:
    last = emu.last_request(token)
    assert last is not None, "the emulator never received a push for this device"
    note = last["body"]["notification"]
    return note["title"], note["body"]


def _user(client, headers, profile: dict, token: str) -> str:
    r = client.put(f"/v1/users/u-{secrets.token_hex(6)}", json=profile, headers=headers)
    assert r.status_code == 201, r.text
    user = str(r.json()["user_id"])
    d = client.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS", "region": "KR"}, headers=headers)
    assert d.status_code == 201, d.text
    return user


def test_a_template_the_engine_refuses_is_422_naming_the_field_and_nothing_written(client, runtime, tenant):
    service, headers = tenant
    before = snapshot(runtime, service)
    r = client.put(
        "/v1/templates/TOPIC/logic",
        json={"title": "Hi", "body": "{% for i in items %}{{ i | upcaes }}{% endfor %}"},
        headers=headers,
    )
    assert r.status_code == 422, r.text
    detail = r.json()["error"]["details"][0]
    assert detail["loc"] == ["body", "body"] and "unknown filter upcaes" in detail["msg"]
    r = client.put(
        "/v1/templates/TOPIC/logic",
        json={"title": "Hi", "body": "b", "variants": {"de": {"title": "{% if x %}", "body": "b"}}},
        headers=headers,
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"][0]["loc"] == ["body", "variants", "de", "title"]
    assert snapshot(runtime, service) == before


def test_single_send_loops_over_a_list_and_reports_every_missing_name_at_once(client, tenant, emu_app):
    _, headers = tenant
    token = random_token("s")
    user = new_user(client, headers, name="Mina", devices=[(token, "AOS")])
    template = {
        "title": "{{ items.size | plural: 'One item', '# items' }}",
        "body": "{% for i in items %}{{ i.name | upcase }}{% unless forloop.last %}, {% endunless %}{% endfor %}"
        " for {{ recipient.name }}{% if promo %} ({{ promo }}){% endif %}{{ who }}{{ where }}",
    }
    assert client.put("/v1/templates/SINGLE/cart", json=template, headers=headers).status_code == 201
    r = client.post(f"/v1/users/{user}/send", json={"type": "cart", "variables": {"x": "1"}}, headers=headers)
    assert r.status_code == 422, r.text
    assert [d["loc"] for d in r.json()["error"]["details"]] == [
        ["body", "variables", n] for n in ("items", "who", "where")
    ]
    assert emu_app.last_request(token) is None  # nothing sent
    items = [{"name": "tea"}, {"name": "cake"}]
    r = client.post(
        f"/v1/users/{user}/send",
        json={"type": "cart", "variables": {"items": items, "who": "!", "where": ""}},
        headers=headers,
    )
    assert r.status_code == 200 and r.json()["delivered"] == 1, r.text
    assert _seen(emu_app, token) == ("2 items", "TEA, CAKE for Mina!")


def test_a_topic_template_reading_the_recipient_is_rendered_per_recipient_by_the_worker(
    client, tenant, emulator, emu_runtime
):
    service, headers = tenant
    seoul, berlin = random_token("k"), random_token("d")
    kim = _user(client, headers, {"name": "Kim", "timezone": "Asia/Seoul", "locale": "ko-KR"}, seoul)
    anna = _user(client, headers, {"name": "Anna", "timezone": "Europe/Berlin", "locale": "de-DE"}, berlin)
    template = {
        "title": "Sale {{ at | datetime: 'time:short' }}",
        "body": "Hi {{ recipient.name }}",
        "variants": {
            "de": {"title": "Angebot {{ at | datetime: 'time:short' }}", "body": "Hallo {{ recipient.name }}"}
        },
    }
    assert client.put("/v1/templates/TOPIC/sale", json=template, headers=headers).status_code == 201
    for user in (kim, anna):
        assert client.put(f"/v1/users/{user}/subscriptions/topic/sale/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/sale/all/publish", json={"variables": {"at": "2026-12-05T12:00:00Z"}}, headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    status = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=headers).json()
    assert (status["state"], status["sent"]) == ("done", 2), status
    assert _seen(emulator, seoul) == ("Sale 오후 9:00", "Hi Kim")
    assert _seen(emulator, berlin) == ("Angebot 13:00", "Hallo Anna")


def test_a_plain_template_is_still_rendered_once_per_job(client, tenant, emulator, emu_runtime, monkeypatch):
    service, headers = tenant
    calls: list[str] = []
    real = render.render

    def counting(*args, **kwargs):
        calls.append("render")
        return real(*args, **kwargs)

    monkeypatch.setattr(render, "render", counting)
    tokens = [random_token("p") for _ in range(3)]
    user = new_user(client, headers, devices=[(t, "AOS") for t in tokens])
    body = {"title": "{% if n != '0' %}{{ n }} new{% endif %}", "body": "{{ n | plural: 'item', 'items' }}"}
    assert client.put("/v1/templates/TOPIC/plain", json=body, headers=headers).status_code == 201
    assert client.put(f"/v1/users/{user}/subscriptions/topic/plain/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/plain/all/publish", json={"variables": {"n": "2"}}, headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    assert calls == ["render"]  # once, when the job was made; never in the worker
    assert [_seen(emulator, t) for t in tokens] == [("2 new", "items")] * 3


def test_a_scheduled_single_send_of_a_recipient_template_is_rendered_for_the_user_when_sent(
    client, tenant, emulator, emu_runtime
):
    """A scheduled single send is a job the worker sends (``UserTarget``): the user's profile is read
    then, so a name changed after scheduling is the one the device shows."""
    service, headers = tenant
    token = random_token("sch")
    user = _user(client, headers, {"name": "Before", "timezone": "Asia/Seoul", "locale": "en-US"}, token)
    tpl = {"title": "Hi {{ recipient.name }}", "body": "Due {{ at | datetime: 'time:short' }}"}
    assert client.put("/v1/templates/SINGLE/due", json=tpl, headers=headers).status_code == 201
    with emu_runtime.sessions() as s:
        send_at = mysql.db_now(s) + timedelta(seconds=2)
    body = {"type": "due", "variables": {"at": "2026-12-05T00:00:00Z"}, "send_at": f"{send_at.isoformat()}Z"}
    r = client.post(f"/v1/users/{user}/send", json=body, headers=headers)
    assert r.status_code == 202, r.text
    service_user_id = client.get(f"/v1/users/{user}", headers=headers).json()["service_user_id"]
    assert client.put(f"/v1/users/{service_user_id}", json={"name": "After"}, headers=headers).status_code == 200

    def past() -> bool:
        with emu_runtime.sessions() as s:
            return bool(mysql.db_now(s) > send_at)

    wait_for(past, timeout=30, what="the database clock to pass send_at")
    run_worker_until_idle(emu_runtime, [service])
    assert _seen(emulator, token) == ("Hi After", "Due 9:00\u202fAM")


def _tag(runtime, service: str, user: str, key: str, kind: str, text: str | None, number: float | None) -> None:
    """A user tag written as the tags API (issue 30, another branch) stores it: schema 0026 ``user_tag``."""
    with runtime.sessions.begin() as s:
        s.execute(
            sql_text(
                "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, value_num, updated_at)"
                " VALUES (:s, :u, :k, :kind, :t, :n, UTC_TIMESTAMP(6))"
            ),
            {"s": service, "u": user, "k": key, "kind": kind, "t": text, "n": number},
        )


def test_recipient_tags_reach_each_recipients_text_through_the_worker(client, runtime, tenant, emulator, emu_runtime):
    service, headers = tenant
    pro_token, free_token = random_token("pro"), random_token("free")
    pro = _user(client, headers, {"name": "Pro"}, pro_token)
    free = _user(client, headers, {"name": "Free"}, free_token)
    _tag(runtime, service, pro, "plan", "s", "gold", None)
    _tag(runtime, service, pro, "points", "n", None, 1200.0)
    template = {
        "title": "Hi {{ recipient.name }}",
        "body": "{{ recipient.tags.plan | default: 'basic' }}{% if recipient.tags.points %}, {{ recipient.tags.points | number }} points{% endif %}",
    }
    assert client.put("/v1/templates/TOPIC/perks", json=template, headers=headers).status_code == 201
    for user in (pro, free):
        assert client.put(f"/v1/users/{user}/subscriptions/topic/perks/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/perks/all/publish", json={}, headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    assert _seen(emulator, pro_token) == ("Hi Pro", "gold, 1,200 points")
    assert _seen(emulator, free_token) == ("Hi Free", "basic")


def test_a_single_send_reads_the_users_tags(client, runtime, tenant, emu_app):
    service, headers = tenant
    token = random_token("one")
    user = _user(client, headers, {"name": "Pro"}, token)
    _tag(runtime, service, user, "plan", "s", "gold", None)
    template = {"title": "Hi {{ recipient.name }}", "body": "{{ recipient.tags.plan | default: 'basic' }}"}
    assert client.put("/v1/templates/SINGLE/perks", json=template, headers=headers).status_code == 201
    r = client.post(f"/v1/users/{user}/send", json={"type": "perks"}, headers=headers)
    assert r.status_code == 200 and r.json()["delivered"] == 1, r.text
    assert _seen(emu_app, token) == ("Hi Pro", "gold")


def test_a_template_that_runs_long_is_a_422_at_publish_and_nothing_is_queued(client, runtime, tenant, emu_app):
    from tests.unit.test_templates_logic import SLOW

    service, headers = tenant
    token = random_token("slow")
    user = _user(client, headers, {"name": "Ann"}, token)
    for method in ("TOPIC", "SINGLE"):
        r = client.put(f"/v1/templates/{method}/slow", json={"title": "t", "body": SLOW}, headers=headers)
        assert r.status_code == 201, r.text  # every static rule passes: only running it shows
    assert client.put(f"/v1/users/{user}/subscriptions/topic/slow/all", headers=headers).status_code == 201
    before = snapshot(runtime, service)
    for path, body in (("/v1/topics/slow/all/publish", {}), (f"/v1/users/{user}/send", {"type": "slow"})):
        r = client.post(path, json=body, headers=headers)
        assert r.status_code == 422, r.text
        detail = r.json()["error"]["details"][0]
        assert (detail["loc"], detail["type"]) == (["body", "body"], "template_error")
        assert "the render took longer than" in detail["msg"]
    assert snapshot(runtime, service) == before
    assert emu_app.last_request(token) is None


# --- the time limit counts CPU, not waiting (a sleep: not a unit test) ------------------------------


class _Waits:
    """A value whose text takes ``wait`` seconds of wall clock and no CPU the ``at``-th time it is
    written: a render descheduled on a loaded machine, as far as the clocks can tell."""

    def __init__(self, at: int, wait: float) -> None:
        self.calls, self.at, self.wait = 0, at, wait

    def __str__(self) -> str:
        self.calls += 1
        if self.calls == self.at:
            time.sleep(self.wait)
        return "x"


def test_a_render_that_waits_without_using_the_cpu_is_not_stopped():
    # 40 writes of v: the clock is first read at the CLOCK_EVERY-th check point, then v waits past the
    # limit (wall clock), then it is read again: a wall-clock limit would stop this render here
    parsed = liquid.parse("{% for i in (1..40) %}{{ v }}{% endfor %}")
    waits = _Waits(at=liquid.CLOCK_EVERY + 4, wait=liquid.TIME_LIMIT_S + 0.2)
    started = time.monotonic()
    text, missing = liquid.render_text(parsed, {"v": waits})
    assert text == "x" * 40 and not missing
    assert time.monotonic() - started > liquid.TIME_LIMIT_S  # it did wait past the limit
