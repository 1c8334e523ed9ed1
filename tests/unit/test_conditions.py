"""FCM topic conditions (notee/domain/conditions.py): the grammar, its errors (with the position they
name), the evaluation against a device's memberships and the topics a condition's job walks."""

from __future__ import annotations

import pytest

from notee.core.errors import InvalidInput
from notee.domain.conditions import MAX_TOPICS, parse_condition

GOOD = [
    # (condition, memberships it is true for (of its topics), memberships it is false for)
    ("'a' in topics", [{"a"}, {"a", "b"}], [set()]),
    ('"a" in topics', [{"a"}], [set()]),
    ("'a' in topics && 'b' in topics", [{"a", "b"}], [{"a"}, {"b"}, set()]),
    ("'a' in topics || 'b' in topics", [{"a"}, {"b"}, {"a", "b"}], [set()]),
    ("'a' in topics && !('b' in topics)", [{"a"}], [{"a", "b"}, {"b"}, set()]),
    ("'a' in topics && !'b' in topics", [{"a"}], [{"a", "b"}]),
    ("'a' in topics || 'b' in topics && 'c' in topics", [{"a"}, {"b", "c"}], [{"b"}, {"c"}]),  # && first
    ("('a' in topics || 'b' in topics) && 'c' in topics", [{"a", "c"}, {"b", "c"}], [{"a"}, {"c"}]),
    ("!(!('a' in topics))", [{"a"}], [set()]),
    ("  'a'   in   topics   ", [{"a"}], [set()]),
    ("'a' in topics&&'b' in topics", [{"a", "b"}], [{"a"}]),
    ("'a' in topics && ('b' in topics || !('c' in topics))", [{"a"}, {"a", "b", "c"}], [{"a", "c"}]),
    ("'sports news' in topics", [{"sports news"}], [set()]),
    ("'it''s' in topics || 'x' in topics", None, None),  # two topics: 'it' ... is an error, checked below
    ("'한국' in topics", [{"한국"}], [set()]),
    ('"it\'s" in topics', [{"it's"}], [set()]),
    ("'a' in topics || 'a' in topics", [{"a"}], [set()]),
    (
        "'a' in topics && 'b' in topics && 'c' in topics && 'd' in topics && 'e' in topics",
        [set("abcde")],
        [set("abcd")],
    ),
]


@pytest.mark.parametrize(("text", "true_for", "false_for"), [g for g in GOOD if g[1] is not None])
def test_a_good_condition_holds_exactly_for_its_memberships(
    text: str, true_for: list[set[str]], false_for: list[set[str]]
) -> None:
    condition = parse_condition(text)
    for member in true_for:
        assert condition.holds(member), member
    for member in false_for:
        assert not condition.holds(member), member


BAD = [
    # (condition, the position the error names, its type)
    ("", 0, "invalid_condition"),
    ("   ", 0, "invalid_condition"),
    ("'a' in topics &&", 16, "invalid_condition"),
    ("'a' in topics ||| 'b' in topics", 16, "invalid_condition"),
    ("'a' in topic", 7, "invalid_condition"),
    ("'a' topics", 4, "invalid_condition"),
    ("'a' in topicsx", 7, "invalid_condition"),
    ("'a in topics", 0, "invalid_condition"),
    ("a in topics", 0, "invalid_condition"),
    ("('a' in topics", 14, "invalid_condition"),
    ("'a' in topics)", 13, "invalid_condition"),
    ("'a' in topics 'b' in topics", 14, "invalid_condition"),
    ("'a' in topics & 'b' in topics", 14, "invalid_condition"),
    ("'' in topics", 1, "invalid_topic"),
    ("'" + "x" * 51 + "' in topics", 1, "invalid_topic"),
    ("'a\u200bb' in topics", 1, "invalid_topic"),
    ("'a' in topics &&\n'b' in topics", 16, "invalid_condition"),
    ("!('a' in topics)", 0, "condition_needs_a_topic"),
    ("'a' in topics || !('b' in topics)", 0, "condition_needs_a_topic"),
    ("!('a' in topics && 'b' in topics)", 0, "condition_needs_a_topic"),
    (
        "'a' in topics || 'b' in topics || 'c' in topics || 'd' in topics || 'e' in topics || 'f' in topics",
        85,
        "too_many_topics",
    ),
    ("'it''s' in topics", 4, "invalid_condition"),
    ("()", 1, "invalid_condition"),
    ("!", 1, "invalid_condition"),
    ("'a' in topics && " * 70 + "'b' in topics", 1000, "too_long"),
]


@pytest.mark.parametrize(("text", "position", "kind"), BAD)
def test_a_bad_condition_is_422_naming_the_offending_position(text: str, position: int, kind: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_condition(text)
    (detail,) = caught.value.details or []
    assert detail["loc"] == ["body", "condition"]
    assert detail["type"] == kind
    assert detail["ctx"]["position"] == position, detail
    assert f"position {position}" in caught.value.message


def test_at_most_five_distinct_topics_but_repeats_are_free() -> None:
    five = " || ".join(f"'t{i}' in topics" for i in range(MAX_TOPICS))
    assert len(parse_condition(five + " || 't0' in topics").topics) == MAX_TOPICS


@pytest.mark.parametrize(
    ("text", "counts", "walked"),
    [
        ("'a' in topics && !('b' in topics)", {}, ["a"]),
        ("'a' in topics || 'b' in topics", {}, ["a", "b"]),
        ("('a' in topics || 'b' in topics) && 'c' in topics", {"a": 10, "b": 10, "c": 5}, ["c"]),
        ("('a' in topics || 'b' in topics) && 'c' in topics", {"a": 1, "b": 1, "c": 5}, ["a", "b"]),
        ("'a' in topics && 'b' in topics", {"a": 100, "b": 3}, ["b"]),
        ("'a' in topics && 'b' in topics", {}, ["a"]),
    ],
)
def test_the_job_walks_the_cheapest_topics_that_meet_every_recipient(
    text: str, counts: dict[str, int], walked: list[str]
) -> None:
    condition = parse_condition(text)
    assert condition.walked_topics(counts) == walked
    for member in condition.satisfying():
        assert member & set(walked)
