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


def _target(text: str, walked: list[str], tasks: list[int] | None = None) -> dict[str, object]:
    condition = parse_condition(text)
    counts = tasks or [1] * len(walked)
    return {
        "condition": text,
        "topics": list(condition.topics),
        "walks": [{"topic": t, "tasks": n, "slots": None} for t, n in zip(walked, counts, strict=True)],
    }


def test_a_condition_task_keeps_a_row_once_over_the_walked_topics() -> None:
    from notee.worker.audience_rows import ConditionRows

    target = _target("'a' in topics || 'b' in topics", ["a", "b"], [2, 1])
    members = {"a": frozenset({"t-ab", "t-a", "old-x"}), "b": frozenset({"t-ab", "t-b"})}
    row = lambda token, origin=None, os_="AOS": (token, os_, "u", 0, origin)  # noqa: E731
    walk_a = ConditionRows(target, 1, members)  # task 1: still the first walk (a has two tasks)
    walk_b = ConditionRows(target, 2, members)
    rows_a = [row("t-ab"), row("t-a"), row("new-x", "old-x")]
    rows_b = [row("t-ab"), row("t-b"), row("new-x", "old-x")]
    assert [r[0] for r in walk_a(rows_a)] == ["t-ab", "t-a", "new-x"]
    assert [r[0] for r in walk_b(rows_b)] == ["t-b"]  # t-ab and the rotated device were sent from a
    ios_only = ConditionRows(target, 2, members, ["IOS"])
    assert ios_only([row("t-b", os_="IOS"), row("t-b2", os_="AOS")]) == [row("t-b", os_="IOS")]


def test_and_not_keeps_the_walked_topics_rows_outside_the_excluded_one() -> None:
    from notee.worker.audience_rows import ConditionRows

    target = _target("'a' in topics && !('b' in topics)", ["a"])
    keep = ConditionRows(target, 0, {"b": frozenset({"in-b"})})
    assert [r[0] for r in keep([("in-b", "AOS", "u", 0, None), ("only-a", "AOS", "u", 1, None)])] == ["only-a"]


def test_the_member_cache_loads_once_per_job_and_drops_idle_jobs() -> None:
    from notee.worker.audience_rows import MemberCache

    cache, loads = MemberCache(), []

    def load(topic: str) -> frozenset[str]:
        loads.append(topic)
        return frozenset({topic})

    assert cache.acquire("j1", ["a"], load) == {"a": frozenset({"a"})}
    cache.acquire("j1", ["a"], load)
    assert loads == ["a"]
    cache.release("j1")
    assert cache.jobs() == ["j1"]  # one task of j1 still runs
    cache.acquire("j2", ["b"], load)
    assert cache.jobs() == ["j1", "j2"]
    cache.release("j1")
    cache.acquire("j1", ["a"], load)  # idle, kept until another job comes: not loaded again
    assert loads == ["a", "b"]
    cache.release("j1")
    cache.acquire("j3", ["c"], load)
    assert cache.jobs() == ["j2", "j3"]  # j1 idle: dropped


def test_an_audience_job_covers_every_slot_once() -> None:
    from notee.usecases.planning import ONE_TASK_USERS, audience_ranges

    assert audience_ranges(3) == [(0, 255)]
    ranges = audience_ranges(ONE_TASK_USERS + 1)
    assert len(ranges) == 16 and ranges == audience_ranges(None)
    covered = [s for a, b in ranges for s in range(a, b + 1)]
    assert covered == list(range(256))
    assert ranges[1] == (16, 31)
