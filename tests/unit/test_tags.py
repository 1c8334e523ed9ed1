"""notee.domain.tags: the rules of a tag patch or replacement, the stored form and back (docs/AUDIENCES.md)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from notee.core.errors import InvalidInput
from notee.core.settings import Settings
from notee.domain import tags
from notee.domain.tags import StoredTag


def _loc(exc: pytest.ExceptionInfo[InvalidInput]) -> list[Any]:
    return list(exc.value.details[0]["loc"])


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("pro", StoredTag("s", value_str="pro")),
        ("", StoredTag("s", value_str="")),
        ("é" * 255, StoredTag("s", value_str="é" * 255)),
        (31, StoredTag("n", value_num=31.0)),
        (-4.5, StoredTag("n", value_num=-4.5)),
        (True, StoredTag("b", value_num=1.0)),
        (False, StoredTag("b", value_num=0.0)),
        ({"timestamp": "1970-01-01T00:00:10Z"}, StoredTag("t", value_num=10.0)),
        ({"timestamp": "2026-01-01T09:00:00+09:00"}, StoredTag("t", value_num=1767225600.0)),
        ({"timestamp": "2026-01-01t00:00:00.5z"}, StoredTag("t", value_num=1767225600.5)),
    ],
)
def test_each_type_has_its_stored_form(value: Any, stored: StoredTag) -> None:
    assert tags.to_stored("k", value) == stored


@pytest.mark.parametrize(
    "value",
    [
        "pro",
        "",
        31,
        -4.5,
        0.1,
        True,
        False,
        {"timestamp": "2026-12-31T00:00:00Z"},
        {"timestamp": "2026-12-31T00:00:00.25Z"},
    ],
)
def test_stored_form_goes_back_to_the_same_json(value: Any) -> None:
    assert tags.to_json(tags.to_stored("k", value)) == value
    assert type(tags.to_json(tags.to_stored("k", value))) is type(value)


def test_a_timestamp_comes_back_in_utc() -> None:
    stored = tags.to_stored("k", {"timestamp": "2026-01-01T09:00:00+09:00"})
    assert tags.to_json(stored) == {"timestamp": "2026-01-01T00:00:00Z"}


def test_an_integral_number_comes_back_an_integer_a_huge_one_a_float() -> None:
    assert tags.to_json(tags.to_stored("k", 4.0)) == 4 and isinstance(tags.to_json(tags.to_stored("k", 4.0)), int)
    assert isinstance(tags.to_json(tags.to_stored("k", 1e300)), float)


@pytest.mark.parametrize("key", ["plan", "a", "A.b:c_d-e", "x" * 64, "0"])
def test_keys_that_pass(key: str) -> None:
    assert tags.check_key(key) == key


@pytest.mark.parametrize("key", ["", "x" * 65, "a b", "a/b", "ключ", "a\n", "a$", "a\x00"])
def test_keys_that_fail_name_the_key(key: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        tags.check_patch({key: 1}, limit=100)
    assert _loc(exc) == ["body", key]
    assert exc.value.details[0]["type"] == "tag_key"


@pytest.mark.parametrize(
    ("value", "type_"),
    [
        ("x" * 256, "string_too_long"),
        ("a\x00b", "control_characters"),
        ("a\nb", "control_characters"),
        ("a\x7fb", "control_characters"),
        ("a\x85b", "control_characters"),
        ("\ud800", "unicode"),
        (math.nan, "finite_number"),
        (math.inf, "finite_number"),
        (-math.inf, "finite_number"),
        (10**400, "finite_number"),
        ([1, 2], "tag_type"),
        ({"a": 1}, "tag_type"),
        ({"timestamp": "2026-01-01T00:00:00Z", "x": 1}, "tag_type"),
        ({"timestamp": "2026-01-01"}, "timestamp_format"),
        ({"timestamp": "2026-01-01T00:00:00"}, "timestamp_format"),  # no offset
        ({"timestamp": "2026-02-30T00:00:00Z"}, "timestamp_format"),
        ({"timestamp": "2026-01-01 00:00:00Z"}, "timestamp_format"),
        ({"timestamp": "20260101T000000Z"}, "timestamp_format"),  # ISO basic: not RFC 3339
        ({"timestamp": 1767225600}, "timestamp_format"),
        ({"timestamp": None}, "timestamp_format"),
    ],
)
def test_values_that_fail_name_the_key(value: Any, type_: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        tags.check_patch({"ok": 1, "bad": value}, limit=100)
    assert _loc(exc) == ["body", "bad"]
    assert exc.value.details[0]["type"] == type_


def test_the_nan_json_parses_is_refused() -> None:
    # Python's json module (and so a route's body) takes NaN and Infinity.
    with pytest.raises(InvalidInput):
        tags.check_replacement(json.loads('{"k": NaN}'), limit=100)


def test_a_patch_sets_and_removes() -> None:
    patch = tags.check_patch({"plan": "pro", "age": 31, "old": None}, limit=100)
    assert patch.set == {"plan": StoredTag("s", value_str="pro"), "age": StoredTag("n", value_num=31.0)}
    assert patch.remove == frozenset({"old"})


def test_a_replacement_refuses_null() -> None:
    with pytest.raises(InvalidInput) as exc:
        tags.check_replacement({"plan": None}, limit=100)
    assert _loc(exc) == ["body", "plan"]


@pytest.mark.parametrize("body", [[], "x", 1, None, [["k", 1]]])
def test_the_body_must_be_an_object(body: Any) -> None:
    for check in (tags.check_patch, tags.check_replacement):
        with pytest.raises(InvalidInput) as exc:
            check(body, limit=100)
        assert _loc(exc) == ["body"]


def test_the_loc_prefix_is_the_callers() -> None:
    with pytest.raises(InvalidInput) as exc:
        tags.check_patch({"k": []}, limit=100, loc=("body", "tags"))
    assert _loc(exc) == ["body", "tags", "k"]


def test_the_limit_counts_the_result_of_a_patch() -> None:
    existing = [f"k{i}" for i in range(3)]
    tags.check_count(existing, tags.check_patch({"k0": 1, "k3": None}, limit=3), limit=3)  # an update, a no-op removal
    tags.check_count(existing, tags.check_patch({"k0": None, "new": 1}, limit=3), limit=3)  # one out, one in
    with pytest.raises(InvalidInput) as exc:
        tags.check_count(existing, tags.check_patch({"new": 1}, limit=3), limit=3)
    assert exc.value.details[0]["type"] == "too_many_tags"
    assert exc.value.details[0]["ctx"] == {"limit": 3}


def test_a_body_over_the_limit_fails_before_any_store() -> None:
    with pytest.raises(InvalidInput):
        tags.check_replacement({f"k{i}": i for i in range(4)}, limit=3)
    with pytest.raises(InvalidInput):
        tags.check_patch({f"k{i}": i for i in range(4)}, limit=3)
    tags.check_replacement({f"k{i}": i for i in range(3)}, limit=3)


def test_keys_after() -> None:
    patch = tags.check_patch({"a": None, "c": 1}, limit=10)
    assert tags.keys_after(["a", "b"], patch) == {"b", "c"}


def test_tags_json_is_in_key_order() -> None:
    rows = [("b", StoredTag("b", value_num=0.0)), ("a", StoredTag("s", value_str="x"))]
    assert list(tags.tags_json(rows).items()) == [("a", "x"), ("b", False)]


def test_the_limit_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().tags_per_user_max == 100
    monkeypatch.setenv("NOTEE_TAGS_PER_USER_MAX", "7")
    assert Settings().tags_per_user_max == 7
