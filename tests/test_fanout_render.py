"""Pure publish logic: rendering, payload limit, slot ranges (table-driven)."""

from __future__ import annotations

import pytest

from notee.errors import InvalidInput, PayloadTooLarge
from notee.fanout.render import MAX_PAYLOAD_BYTES, render_payload, render_text, slot_ranges
from notee.fanout.worker import messages_for
from notee.vocabulary import Recipient

TEMPLATE = {"title": "Hi {{name}}", "body": "You have {{ n }} new", "data": {"a": "1"}, "ttl_seconds": 60,
            "priority": "normal"}


@pytest.mark.parametrize("text, variables, expected", [
    ("plain", {}, "plain"),
    ("Hi {{name}}", {"name": "Kim"}, "Hi Kim"),
    ("{{ a }}{{b}}{{a}}", {"a": "x", "b": "y"}, "xyx"),
    ("{{name}}", {"name": "{{other}}"}, "{{other}}"),  # substituted values are not re-expanded
    ("{not} {{ }}", {}, "{not} {{ }}"),
])
def test_render_text(text, variables, expected):
    assert render_text(text, variables, field="title") == expected


def test_render_text_missing_variable_is_invalid_input():
    with pytest.raises(InvalidInput) as err:
        render_text("Hi {{name}} {{x}}", {"name": "a"}, field="body")
    assert err.value.details == [{"loc": ["body", "variables", "x"], "type": "missing"}]


@pytest.mark.parametrize("variables, overrides, expected", [
    ({"name": "A", "n": "3"}, None,
     {"title": "Hi A", "body": "You have 3 new", "data": {"a": "1"}, "ttl_seconds": 60, "priority": "normal"}),
    ({"n": "1"}, {"title": "Fixed", "data": {"b": "2", "a": "9"}},
     {"title": "Fixed", "body": "You have 1 new", "data": {"a": "9", "b": "2"}, "ttl_seconds": 60,
      "priority": "normal"}),
    ({"x": "1"}, {"title": "T {{x}}", "body": "B"},
     {"title": "T 1", "body": "B", "data": {"a": "1"}, "ttl_seconds": 60, "priority": "normal"}),
])
def test_render_payload(variables, overrides, expected):
    assert render_payload(TEMPLATE, variables, overrides) == expected


def test_render_payload_template_data_as_json_text():
    got = render_payload({"title": "t", "body": "b", "data": '{"k": "v"}'}, None, None)
    assert got["data"] == {"k": "v"} and got["priority"] == "high"


def test_payload_over_provider_limit_is_rejected():
    with pytest.raises(PayloadTooLarge):
        render_payload({"title": "t", "body": "b"}, None, {"data": {"k": "x" * MAX_PAYLOAD_BYTES}})


@pytest.mark.parametrize("max_slot, per_task, expected", [
    (0, 1, [(0, 0)]),
    (-1, 1, [(0, 0)]),
    (2, 1, [(0, 0), (1, 1), (2, 2)]),
    (4, 2, [(0, 1), (2, 3), (4, 4)]),
    (3, 10, [(0, 3)]),
])
def test_slot_ranges(max_slot, per_task, expected):
    assert slot_ranges(max_slot, per_task) == expected


def test_messages_for_renders_one_message_per_recipient():
    payload = {"title": "T", "body": "B", "data": {"k": "v"}, "ttl_seconds": None, "priority": "high"}
    msgs = messages_for([Recipient("t1", "AOS", "u1"), Recipient("t2", "IOS", "u2")], payload)
    assert [(m.device_token, m.device_os, m.title, m.body, m.data) for m in msgs] == [
        ("t1", "AOS", "T", "B", {"k": "v"}), ("t2", "IOS", "T", "B", {"k": "v"})]
