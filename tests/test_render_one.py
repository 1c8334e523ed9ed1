"""One renderer for SINGLE, TOPIC and CYCLE (notee/domain/render.py): one placeholder grammar,
defaults, every missing variable in one 422, the providers' own size rules after rendering, and no
literal ``{{...}}`` ever reaching a device -- the last proven end to end against the emulator for
every template shape through every method."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta, timezone

import pytest

from notee.core.errors import InvalidInput, PayloadTooLarge
from notee.domain import render
from notee.providers import apns, fcm
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import new_service, new_template, new_user, random_token
from tests.support.stores import snapshot


def content(
    title: str = "t", body: str = "b", data: dict[str, str] | None = None, defaults: dict[str, str] | None = None
) -> render.TemplateContent:
    return render.TemplateContent(
        title=title, body=body, data=data, defaults=defaults, ttl_seconds=None, priority="high"
    )


# --- the grammar (pure) --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, names",
    [
        ("plain", []),
        ("Hi {{name}}", ["name"]),
        ("Hi {{ user.name }} and {{user.name}} {{n2}}", ["user.name", "n2"]),
        ("{{_x}}{{a_b.c_d}}", ["_x", "a_b.c_d"]),
    ],
)
def test_placeholders(text, names):
    assert render.placeholders(text) == names


@pytest.mark.parametrize(
    "text", ["{{}}", "{{ }}", "{{1x}}", "{{a b}}", "{{a-b}}", "{{a.}}", "{{.a}}", "x {{a}}}", "{{{a}}", "{{ a | b }}"]
)
def test_anything_else_in_double_braces_is_refused_when_saved(text):
    with pytest.raises(InvalidInput) as err:
        render.check_template("TOPIC", content(title=text))
    assert err.value.details[0]["loc"] == ["body", "title"]
    assert err.value.details[0]["type"] == "invalid_placeholder"


def test_every_problem_of_a_template_is_reported_at_once():
    with pytest.raises(InvalidInput) as err:
        render.check_template(
            "CYCLE",
            content(title="{{a}} {{1}}", body="{{b}}", data={"k": "{{c}}"}, defaults={"b": "B", "zz": "unused"}),
        )
    got = {(tuple(d["loc"]), d["type"]) for d in err.value.details}
    assert got == {
        (("body", "title"), "invalid_placeholder"),
        (("body", "title"), "missing_default"),  # {{a}}: a CYCLE push has nobody to fill it
        (("body", "data", "k"), "missing_default"),
        (("body", "defaults", "zz"), "unused_default"),
    }


def test_cycle_template_needs_a_default_for_every_placeholder():
    render.check_template("CYCLE", content(title="Hi {{name}}", defaults={"name": "there"}))
    render.check_template("TOPIC", content(title="Hi {{name}}"))  # a publish can fill it
    render.check_template("SINGLE", content(title="Hi {{name}}"))
    with pytest.raises(InvalidInput):
        render.check_template("CYCLE", content(title="Hi {{name}}"))


@pytest.mark.parametrize("defaults", [{"1x": "a"}, {"a": "{{b}}"}, {"a": "x\x00"}, {"a": 1}])
def test_bad_defaults_are_refused(defaults):
    with pytest.raises(InvalidInput):
        render.check_template("TOPIC", content(title="{{a}}", defaults=defaults))


# --- rendering (pure) ------------------------------------------------------------------------------


def test_variables_then_defaults_fill_title_body_and_data():
    got = render.render(
        content(
            title="Hi {{user.name}}",
            body="{{n}} new",
            data={"k": "{{n}}", "s": "x"},
            defaults={"n": "no", "user.name": "there"},
        ),
        {"n": "3"},
    )
    assert (got.title, got.body, got.data) == ("Hi there", "3 new", {"k": "3", "s": "x"})


def test_every_missing_variable_is_reported_in_one_error():
    with pytest.raises(InvalidInput) as err:
        render.render(content(title="{{a}} {{b}}", body="{{b}} {{c}}", data={"k": "{{d}}"}), {"c": "1"})
    assert [d["loc"] for d in err.value.details] == [["body", "variables", n] for n in ("a", "b", "d")]
    assert err.value.code == "invalid_input"


def test_overrides_are_rendered_and_data_merges():
    got = render.render(
        content(title="T", body="B", data={"a": "1", "b": "2"}),
        {"x": "X"},
        {"title": "Now {{x}}", "data": {"b": "{{x}}", "c": "3"}},
    )
    assert (got.title, got.body, got.data) == ("Now X", "B", {"a": "1", "b": "X", "c": "3"})


@pytest.mark.parametrize("variables", [{"a": "{{b}}"}, {"a": "{{ b }}"}, {"a": "x}}y{{z"}])
def test_a_value_that_would_put_double_braces_on_a_device_is_refused(variables):
    with pytest.raises(InvalidInput):
        render.render(content(title="{{a}}"), variables)


def test_size_rules_are_each_providers_own_after_rendering():
    # APNs wraps title/body in {"aps": {"alert": ...}}; FCM counts notification + data. Both 4096 bytes.
    small = render.render(content(title="{{t}}"), {"t": "x"})
    assert fcm.payload_bytes(small.title, small.body, small.data) <= fcm.PAYLOAD_LIMIT
    assert apns.payload_bytes(small.title, small.body, small.data) <= apns.PAYLOAD_LIMIT
    fill = apns.PAYLOAD_LIMIT - apns.payload_bytes("", "b", {})  # exactly at APNs' limit: FCM's is lower
    ok = render.render(content(title="{{t}}"), {"t": "x" * fill})
    assert apns.payload_bytes(ok.title, ok.body, ok.data) == apns.PAYLOAD_LIMIT
    with pytest.raises(PayloadTooLarge) as err:
        render.render(content(title="{{t}}"), {"t": "x" * (fill + 1)})
    assert [d["loc"] for d in err.value.details] == [["payload", "apns"]]
    with pytest.raises(PayloadTooLarge) as err:
        render.render(content(title="{{t}}", body="{{t}}"), {"t": "한" * 1400})  # UTF-8 bytes, not characters
    assert [d["loc"] for d in err.value.details] == [["payload", "fcm"], ["payload", "apns"]]


def test_fcm_size_is_the_message_the_sender_builds():
    from notee.providers.base import Message

    m = Message("tok", "AOS", "T", "B", {"k": "v"})
    sent = fcm.fcm_message(m)
    counted = {"notification": sent["notification"], "data": sent["data"]}
    assert fcm.payload_bytes("T", "B", {"k": "v"}) == len(json.dumps(counted, separators=(",", ":")).encode())
    body = json.dumps(apns.apns_payload("T", "B", {"k": "v"}), separators=(",", ":"), ensure_ascii=False).encode()
    assert apns.payload_bytes("T", "B", {"k": "v"}) == len(body)


# --- the API: templates -----------------------------------------------------------------------------


@pytest.fixture()
def tenant(client, settings, service_id):
    return service_id, new_service(client, settings, service_id, credentials=True)


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


# --- every template shape through every method, as the emulator received it ---------------------

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
    return note["title"], note["body"], body.get("data") or {}


@pytest.fixture()
def emu_client(client, settings, emulator):
    """The API app with its providers pointed at the emulator."""
    from notee.providers.routing import ProviderSet
    from notee.usecases.sender import DeliverySender

    sender = DeliverySender(client.app.state.runtime)
    sender.providers = ProviderSet(
        settings.model_copy(update={"emulator_url": emulator.url, "emulator_ca_file": emulator.ca_file})
    )
    app_sender, client.app.state.sender = client.app.state.sender, sender  # the app's own, back after the test
    yield emulator
    client.app.state.sender = app_sender
    client.portal.call(sender.close)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_single_send_delivers_every_shape_rendered(client, tenant, emu_client, shape):
    _, headers = tenant
    token = random_token("s")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/SINGLE/s", json=_template_body(shape), headers=headers).status_code == 201
    r = client.post(f"/v1/users/{user}/send", json={"type": "s", "variables": SHAPES[shape][4]}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["delivered"] == 1
    title, body, data = SHAPES[shape][5]
    assert _seen(emu_client, token) == (title, body, data)


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


# --- the cases the two former renderers were tested with, on the one renderer ----------------------


@pytest.mark.parametrize(
    "title, variables, expected",
    [
        ("Hi {{name}}", {"name": "Ann"}, "Hi Ann"),
        ("Hi {{ name }}, {{name}}", {"name": "Ann"}, "Hi Ann, Ann"),
        ("{{ a }}{{b}}{{a}}", {"a": "x", "b": "y"}, "xyx"),
        ("No vars", {}, "No vars"),
        ("{ {name} }", {}, "{ {name} }"),  # not double braces: plain text
    ],
)
def test_render_title(title, variables, expected):
    assert render.render(content(title=title), variables).title == expected


def test_size_counts_utf8_bytes():
    assert fcm.payload_bytes("", "한" * 10, {}) - fcm.payload_bytes("", "", {}) == 30
    assert apns.payload_bytes("", "한" * 10, {}) - apns.payload_bytes("", "", {}) == 30


def test_template_data_stored_as_json_text_is_read():
    got = render.render(render.TemplateContent("t", "b", '{"k": "{{v}}"}', {"v": "1"}, 60, "normal"))  # type: ignore[arg-type]
    assert (got.data, got.ttl_seconds, got.priority) == ({"k": "1"}, 60, "normal")


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


def test_apns_size_rule_matches_what_apns_accepts(client, settings, tenant, emu_client):
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

    def parts(n: int) -> dict[str, str]:
        return {"a": "x" * 2000, "b": "y" * 2000, "c": "z" * (n - 4000)}

    at_limit = client.post(f"/v1/users/{user}/send", json={"type": "big", "variables": parts(fill)}, headers=headers)
    assert at_limit.status_code == 200 and at_limit.json()["delivered"] == 1, at_limit.text
    assert emu_client.deliveries(token)["apns"] == 1
    over = client.post(f"/v1/users/{user}/send", json={"type": "big", "variables": parts(fill + 1)}, headers=headers)
    assert over.status_code == 422 and over.json()["error"]["code"] == "payload_too_large"
    assert [d["loc"] for d in over.json()["error"]["details"]] == [["payload", "apns"]]
    assert emu_client.deliveries(token)["attempts"] == 1  # the refused one never left
