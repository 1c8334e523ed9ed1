"""One renderer for SINGLE, TOPIC and CYCLE (notee/domain/render.py): one placeholder grammar,
defaults, every missing variable in one 422, the providers' own size rules after rendering, and no
literal ``{{...}}`` ever reaching a device -- the last proven end to end against the emulator for
every template shape through every method.

The rules of this topic that need no server are in tests/unit/test_render_one.py."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, timezone

import pytest

from notee.core import notification_id
from notee.domain import render
from notee.providers import apns
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import new_template, new_user, random_token
from tests.support.stores import snapshot

pytestmark = pytest.mark.tenant(credentials=True)


def test_template_defaults_round_trip(client, tenant):
    _, headers = tenant
    t = new_template(client, headers, "TOPIC", "news", title="Hi {{name}}", defaults={"name": "there"})
    assert t["defaults"] == {"name": "there"}
    assert client.get("/v1/templates/TOPIC/news", headers=headers).json()["defaults"] == {"name": "there"}


@pytest.mark.parametrize(
    "fields",
    [
        {"title": "Hi {{name}}"},  # no default: nothing could fill it
        {"title": "Hi {{name}}", "defaults": {"other": "x"}},
        {"title": "Hi", "data": {"k": "{{v}}"}},
        {"title": "Hi {{ 1 }}", "defaults": {}},
    ],
)
def test_cycle_template_with_an_unfillable_placeholder_is_422_and_nothing_written(client, runtime, tenant, fields):
    service, headers = tenant
    before = snapshot(runtime, service)
    r = client.put("/v1/templates/CYCLE/remind", json={"body": "b"} | fields, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_input"
    assert snapshot(runtime, service) == before


def test_invalid_placeholder_is_422_for_every_method(client, tenant):
    _, headers = tenant
    for method in ("SINGLE", "TOPIC", "CYCLE"):
        r = client.put(f"/v1/templates/{method}/x", json={"title": "Hi {{user name}}", "body": "b"}, headers=headers)
        assert r.status_code == 422, (method, r.text)


# (title, body, data, defaults, variables given by the request, what a device must show)
SHAPES = {
    "plain": ("Hello", "World", None, None, {}, ("Hello", "World", {})),
    "variable": (
        "Hi {{name}}",
        "Order {{ order }}",
        {"o": "{{order}}"},
        None,
        {"name": "Ann", "order": "42"},
        ("Hi Ann", "Order 42", {"o": "42"}),
    ),
    "dotted": ("Hi {{user.name}}", "b", None, None, {"user.name": "Alice"}, ("Hi Alice", "b", {})),
    "default": (
        "Hi {{name}}",
        "{{n}} new",
        {"k": "{{n}}"},
        {"name": "there", "n": "no"},
        {},
        ("Hi there", "no new", {"k": "no"}),
    ),
    "default_overridden": ("Hi {{name}}", "b", None, {"name": "there"}, {"name": "Bo"}, ("Hi Bo", "b", {})),
}

# What a device shows when the request gives no variables (only shapes whose defaults fill everything)
WITHOUT_VARIABLES = {
    "plain": SHAPES["plain"][5],
    "default": SHAPES["default"][5],
    "default_overridden": ("Hi there", "b", {}),
}


def _template_body(shape: str) -> dict:
    title, body, data, defaults, _, _ = SHAPES[shape]
    out: dict = {"title": title, "body": body}
    if data is not None:
        out["data"] = data
    if defaults is not None:
        out["defaults"] = defaults
    return out


def _seen(emu, token: str) -> tuple[str, str, dict]:
    last = emu.last_request(token)
    assert last is not None, "the emulator never received a push for this device"
    body = last["body"]
    note = body["notification"]
    texts = [note["title"], note["body"], *(body.get("data") or {}).keys(), *(body.get("data") or {}).values()]
    assert not [t for t in texts if "{{" in t or "}}" in t], body
    data = dict(body.get("data") or {})
    assert notification_id.parse(data.pop(notification_id.KEY, "")) is not None, body  # every push has its id
    return note["title"], note["body"], data


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_single_send_delivers_every_shape_rendered(client, tenant, emu_app, shape):
    _, headers = tenant
    token = random_token("s")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/SINGLE/s", json=_template_body(shape), headers=headers).status_code == 201
    r = client.post(f"/v1/users/{user}/send", json={"type": "s", "variables": SHAPES[shape][4]}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["delivered"] == 1
    title, body, data = SHAPES[shape][5]
    assert _seen(emu_app, token) == (title, body, data)


@pytest.mark.parametrize("with_variables", [True, False], ids=["with_variables", "without_variables"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_topic_publish_delivers_every_shape_rendered_or_refuses(
    client, runtime, tenant, emulator, emu_runtime, shape, with_variables
):
    service, headers = tenant
    token = random_token("t")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/TOPIC/news", json=_template_body(shape), headers=headers).status_code == 201
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    variables = SHAPES[shape][4] if with_variables else {}
    r = client.post("/v1/topics/news/all/publish", json={"variables": variables}, headers=headers)
    title, body, data = SHAPES[shape][5] if with_variables else WITHOUT_VARIABLES.get(shape, (None, None, None))
    needs = set(render.placeholders(" ".join([SHAPES[shape][0], SHAPES[shape][1], *(SHAPES[shape][2] or {}).values()])))
    if needs - set(variables) - set(SHAPES[shape][3] or {}):
        # nothing could fill a placeholder: 422 naming every missing variable, no job, nothing sent
        assert r.status_code == 422, r.text
        missing = {d["loc"][-1] for d in r.json()["error"]["details"]}
        assert missing == needs - set(SHAPES[shape][3] or {})
        assert emulator.stats()["counts"] == {}
        return
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    status = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=headers).json()
    assert (status["state"], status["sent"]) == ("done", 1), status
    assert _seen(emulator, token) == (title, body, data)


@pytest.mark.parametrize(
    "shape",
    sorted(
        s
        for s in SHAPES
        if not set(render.placeholders(" ".join([SHAPES[s][0], SHAPES[s][1], *(SHAPES[s][2] or {}).values()])))
        - set(SHAPES[s][3] or {})
    ),
)
def test_cycle_delivers_every_savable_shape_rendered(client, runtime, tenant, emulator, emu_runtime, shape):
    from tests.support.scheduler import jobs_of, scheduler

    service, headers = tenant
    token = random_token("c")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/CYCLE/remind", json=_template_body(shape), headers=headers).status_code == 201
    hour, minute_ = secrets.randbelow(24), secrets.randbelow(60)  # other tenants' buckets are rarely the same
    seoul = datetime(2031, 3, 3, hour, minute_, tzinfo=timezone(timedelta(hours=9)))  # a Monday in Seoul
    r = client.put(
        f"/v1/users/{user}/subscriptions/cycle/remind",
        json={"days": ["MON"], "hour": hour, "minute": minute_, "timezone": "Asia/Seoul"},
        headers=headers,
    )
    assert r.status_code in (200, 201), r.text
    minute = seoul.astimezone(UTC)
    try:
        scheduler(runtime).run_minute(minute, now=minute)
        assert len(jobs_of(runtime, service)) == 1  # this tenant's template rendered into one job
        run_worker_until_idle(emu_runtime, [service])
        assert _seen(emulator, token) == WITHOUT_VARIABLES[shape]  # a cycle push has no request variables
    finally:
        client.delete(f"/v1/users/{user}/subscriptions/cycle/remind", headers=headers)


def test_cycle_shapes_that_need_a_request_variable_cannot_be_saved(client, tenant):
    _, headers = tenant
    refused = [
        s
        for s in SHAPES
        if set(render.placeholders(" ".join([SHAPES[s][0], SHAPES[s][1], *(SHAPES[s][2] or {}).values()])))
        - set(SHAPES[s][3] or {})
    ]
    assert refused  # the matrix above covers both kinds
    for shape in refused:
        r = client.put(f"/v1/templates/CYCLE/c{secrets.token_hex(3)}", json=_template_body(shape), headers=headers)
        assert r.status_code == 422, (shape, r.text)


def test_a_topic_job_renders_once_not_per_device(client, tenant, emulator, emu_runtime, monkeypatch):
    """Rendering happens when the job is made (once), never in the worker (per page or device)."""
    service, headers = tenant
    calls: list[str] = []
    real = render.render

    def counting(*args, **kwargs):
        calls.append("render")
        return real(*args, **kwargs)

    monkeypatch.setattr(render, "render", counting)  # render_all (the job's) calls it through the module
    tokens = [random_token("r") for _ in range(3)]
    user = new_user(client, headers, devices=[(t, "AOS") for t in tokens])
    assert (
        client.put("/v1/templates/TOPIC/news", json={"title": "Hi {{name}}", "body": "b"}, headers=headers).status_code
        == 201
    )
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/news/all/publish", json={"variables": {"name": "Kim"}}, headers=headers)
    assert r.status_code == 202, r.text
    assert calls == ["render"]
    import notee.usecases.single_send as single_send

    monkeypatch.setattr(single_send, "render", counting)  # the only other caller of the renderer
    run_worker_until_idle(emu_runtime, [service])
    assert calls == ["render"]
    assert [_seen(emulator, t)[0] for t in tokens] == ["Hi Kim"] * 3


def test_apns_size_rule_matches_what_apns_accepts(client, settings, tenant, emu_app):
    """A push rendered to exactly APNs' 4,096-byte payload is accepted by the emulator's APNs (which
    answers 413 PayloadTooLarge above it); one byte more is refused before anything is sent."""
    from tests.support.registry import admin_headers, apns_credentials

    service, headers = tenant
    r = client.put(
        f"/v1/admin/services/{service}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text
    token = random_token("i")
    user = new_user(client, headers, devices=[(token, "IOS")])
    assert (
        client.put(
            "/v1/templates/SINGLE/big", json={"title": "{{a}}", "body": "{{b}}{{c}}"}, headers=headers
        ).status_code
        == 201
    )
    fill = apns.PAYLOAD_LIMIT - apns.payload_bytes("", "", {})  # a request variable holds at most 2,000

    def parts(n: int) -> dict[str, str]:  # n characters in all (the notification id takes room too)
        return {"a": "x" * 2000, "b": "y" * (n - 2001), "c": "z"}

    assert 2001 < fill <= 4001, fill  # each variable within its 2,000

    at_limit = client.post(f"/v1/users/{user}/send", json={"type": "big", "variables": parts(fill)}, headers=headers)
    assert at_limit.status_code == 200 and at_limit.json()["delivered"] == 1, at_limit.text
    assert emu_app.deliveries(token)["apns"] == 1
    over = client.post(f"/v1/users/{user}/send", json={"type": "big", "variables": parts(fill + 1)}, headers=headers)
    assert over.status_code == 422 and over.json()["error"]["code"] == "payload_too_large"
    assert [d["loc"] for d in over.json()["error"]["details"]] == [["payload", "apns"]]
    assert emu_app.deliveries(token)["attempts"] == 1  # the refused one never left
