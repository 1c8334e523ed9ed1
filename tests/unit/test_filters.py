"""Audience filters (docs/AUDIENCES.md "Filters"): what parse_filter takes, what it refuses and where
its 422 points, the version key's order, the job snapshot's round trip, and the SQL each predicate
compiles to (MariaDB's dialect, no server)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.dialects import mysql

from notee.core.audience import Audience, audience_from_json, audience_to_json
from notee.core.errors import InvalidInput
from notee.domain.filters import parse_filter
from notee.domain.versions import version_key
from notee.store.audience_sql import audience_condition, slot_bounds, slot_of

NOW = datetime(2026, 12, 5, 12, 0, 0)


def _problem(raw: Any) -> dict[str, Any]:
    with pytest.raises(InvalidInput) as caught:
        parse_filter(raw)
    (detail,) = caught.value.details
    return detail


def test_a_filter_of_every_op_and_kind_parses_and_normalises_its_values() -> None:
    parsed = parse_filter(
        [
            [
                {"tag": "plan", "op": "=", "value": "pro"},
                {"tag": "age", "op": ">=", "value": 18},
                {"tag": "vip", "op": "!=", "value": True},
                {"tag": "trial_end", "op": "<", "value": {"timestamp": "2027-01-01T00:00:00Z"}},
                {"tag": "trial_end", "op": "elapsed_gt", "value": 86400},
                {"tag": "city", "op": "in", "value": ["Seoul", "Busan"]},
                {"tag": "old", "op": "not_exists"},
            ],
            [
                {"attribute": "app_version", "op": ">=", "value": "5.2"},
                {"attribute": "platform", "op": "in", "value": ["IOS"]},
                {"attribute": "country", "op": "=", "value": "KR"},
                {"attribute": "created_at", "op": ">", "value": "2026-01-01T09:00:00+09:00"},
                {"attribute": "last_seen", "op": "elapsed_lt", "value": 3600},
                {"attribute": "locale", "op": "exists"},
            ],
        ]
    )
    first, second = parsed
    assert [(p.tag, p.op, p.kind) for p in first][:4] == [
        ("plan", "=", "s"),
        ("age", ">=", "n"),
        ("vip", "!=", "b"),
        ("trial_end", "<", "t"),
    ]
    assert first[1].value == 18.0
    assert first[3].value == 1798761600.0  # 2027-01-01T00:00:00Z
    assert first[5].value == ("Seoul", "Busan")
    assert first[6].value is None
    assert second[0].value == version_key("5.2")
    assert second[3].value == 1767225600.0  # 2026-01-01T00:00:00Z
    assert second[4].kind == "t" and second[4].value == 3600.0


@pytest.mark.parametrize(
    ("raw", "loc", "type_"),
    [
        ({}, ["body", "filter"], "filter_shape"),
        ([], ["body", "filter"], "filter_shape"),
        ([[]], ["body", "filter", 0], "filter_shape"),
        ([[{"tag": "a", "op": "=", "value": 1}]] * 11, ["body", "filter"], "filter_too_large"),
        ([[{"tag": "a", "op": "exists"}] * 51], ["body", "filter"], "filter_too_large"),
        ([[{"tag": "a", "op": "~", "value": 1}]], ["body", "filter", 0, 0, "op"], "unknown_op"),
        ([[{"tag": "a", "attribute": "locale", "op": "exists"}]], ["body", "filter", 0, 0], "filter_shape"),
        ([[{"op": "exists"}]], ["body", "filter", 0, 0], "filter_shape"),
        ([[{"tag": "bad key", "op": "exists"}]], ["body", "filter", 0, 0, "tag"], "tag_key"),
        ([[{"attribute": "shoe_size", "op": "exists"}]], ["body", "filter", 0, 0, "attribute"], "unknown_attribute"),
        ([[{"tag": "a", "op": "=", "value": 1, "extra": 2}]], ["body", "filter", 0, 0, "extra"], "extra_forbidden"),
        ([[{"tag": "a", "op": "<", "value": True}]], ["body", "filter", 0, 0, "op"], "op_mismatch"),
        ([[{"tag": "a", "op": "in", "value": "x"}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
        ([[{"tag": "a", "op": "in", "value": ["x", 1]}]], ["body", "filter", 0, 0, "value", 1], "type_mismatch"),
        ([[{"tag": "a", "op": "elapsed_gt", "value": "1d"}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
        ([[{"tag": "a", "op": "exists", "value": 1}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
        ([[{"tag": "a", "op": "="}]], ["body", "filter", 0, 0, "value"], "missing"),
        ([[{"tag": "a", "op": "=", "value": [1]}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
        ([[{"tag": "a", "op": "=", "value": "x" * 256}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
        ([[{"tag": "a", "op": "=", "value": "a\u0000b"}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
        (
            [[{"tag": "a", "op": "<", "value": {"timestamp": "yesterday"}}]],
            ["body", "filter", 0, 0, "value"],
            "type_mismatch",
        ),
        (
            [[{"tag": "a", "op": "<", "value": {"timestamp": "2026-01-01T00:00:00"}}]],
            ["body", "filter", 0, 0, "value"],
            "type_mismatch",
        ),
        (
            [[{"attribute": "app_version", "op": ">", "value": "5 2"}]],
            ["body", "filter", 0, 0, "value"],
            "type_mismatch",
        ),
        (
            [[{"attribute": "platform", "op": "=", "value": "WINDOWS"}]],
            ["body", "filter", 0, 0, "value"],
            "type_mismatch",
        ),
        ([[{"attribute": "platform", "op": "<", "value": "IOS"}]], ["body", "filter", 0, 0, "op"], "op_mismatch"),
        ([[{"attribute": "created_at", "op": "=", "value": 5}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
        ([[{"tag": "a", "op": "in", "value": list(range(101))}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
        ([[{"tag": "a", "op": "=", "value": float("nan")}]], ["body", "filter", 0, 0, "value"], "type_mismatch"),
    ],
)
def test_a_bad_filter_is_422_naming_its_offending_part(raw: Any, loc: list[Any], type_: str) -> None:
    detail = _problem(raw)
    assert detail["loc"] == loc and detail["type"] == type_, detail


def test_an_audience_survives_the_job_snapshot_unchanged() -> None:
    included = parse_filter(
        [[{"tag": "city", "op": "in", "value": ["Seoul"]}, {"attribute": "platform", "op": "=", "value": "IOS"}]]
    )
    excluded = parse_filter([[{"tag": "vip", "op": "=", "value": True}], [{"tag": "age", "op": "<", "value": 18}]])
    audience = Audience((included,), (excluded,))
    assert audience_from_json(json.loads(json.dumps(audience_to_json(audience)))) == audience


def _sql(raw: Any, exclude: Any = None) -> str:
    audience = Audience((parse_filter(raw),), (parse_filter(exclude),) if exclude else ())
    condition = audience_condition(audience, NOW)
    return str(condition.compile(dialect=mysql.dialect(), compile_kwargs={"literal_binds": True}))


def test_a_negated_tag_predicate_is_not_exists_so_users_without_the_tag_match() -> None:
    sql = _sql([[{"tag": "plan", "op": "!=", "value": "pro"}]])
    assert (
        sql.startswith("NOT (EXISTS (SELECT") and "user_tag.kind = 's'" in sql and "user_tag.value_str = 'pro'" in sql
    )
    sql = _sql([[{"tag": "city", "op": "not_in", "value": ["Seoul", "Busan"]}]])
    assert "NOT (EXISTS" in sql and "IN ('Seoul', 'Busan')" in sql


def test_every_tag_lookup_names_the_service_and_the_user_of_the_device() -> None:
    sql = _sql([[{"tag": "plan", "op": "=", "value": "pro"}, {"tag": "age", "op": ">", "value": 3}]])
    assert sql.count("user_tag.service = d.service") == 2 and sql.count("user_tag.user_id = d.user_id") == 2


def test_an_attribute_is_two_valued_so_an_excluded_group_excludes_only_its_matches() -> None:
    sql = _sql(
        [[{"attribute": "platform", "op": "=", "value": "IOS"}]],
        exclude=[[{"attribute": "locale", "op": "=", "value": "ko"}]],
    )
    assert sql.endswith("AND coalesce(u.locale IS NOT NULL AND u.locale != '' AND u.locale = 'ko', false) = 0")


def test_elapsed_compares_with_the_given_clock() -> None:
    sql = _sql([[{"attribute": "last_seen", "op": "elapsed_gt", "value": 3600}]])
    assert "d.updated_at < '2026-12-05 11:00:00'" in sql
    sql = _sql([[{"tag": "trial_end", "op": "elapsed_lt", "value": 60}]])
    assert f"user_tag.value_num > {datetime(2026, 12, 5, 11, 59, tzinfo=UTC).timestamp()}" in sql


def test_slots_split_the_uuid_space_in_256_ranges() -> None:
    assert slot_bounds(0) == ("00", "01") and slot_bounds(255) == ("ff", "g")
    assert slot_of("3f2b9c1e-8d4a-4c6b-9e2f-1a7d5b0c4e88") == 0x3F
    low, high = slot_bounds(0x3F)
    assert low <= "3f2b9c1e-8d4a-4c6b-9e2f-1a7d5b0c4e88" < high
