"""One renderer for SINGLE, TOPIC and CYCLE (notee/domain/render.py): one placeholder grammar,
defaults, every missing variable in one 422, the providers' own size rules after rendering, and no
literal ``{{...}}`` ever reaching a device -- the last proven end to end against the emulator for
every template shape through every method.

Here, the rules that need no server; tests/integration/test_render_one.py has the rest."""

from __future__ import annotations

import json

import pytest

from notee.core.errors import InvalidInput, PayloadTooLarge
from notee.domain import render
from notee.providers import apns, fcm


def content(
    title: str = "t", body: str = "b", data: dict[str, str] | None = None, defaults: dict[str, str] | None = None
) -> render.TemplateContent:
    return render.TemplateContent(
        title=title, body=body, data=data, defaults=defaults, ttl_seconds=None, priority="high"
    )


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
    """With the notification id every push carries (its longest form): the size checked is the size sent."""
    from notee.core import notification_id
    from notee.providers.base import Message

    nid = notification_id.make("0" * 32, "tok")
    assert len(nid) == len(notification_id.SAMPLE)
    m = Message("tok", "AOS", "T", "B", {"k": "v"}, notification_id=nid)
    sent = fcm.fcm_message(m)
    counted = {"notification": sent["notification"], "data": sent["data"]}
    assert fcm.payload_bytes("T", "B", {"k": "v"}) == len(json.dumps(counted, separators=(",", ":")).encode())
    payload = apns.apns_payload("T", "B", {"k": "v"}, None, nid)
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    assert apns.payload_bytes("T", "B", {"k": "v"}) == len(body)


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
