"""Saved segments and audience estimates (issue 30; docs/AUDIENCES.md "Segments", "Estimates"):
create, read with the count of what a segment reaches now, list by cursor (counts on request), replace
(or create) with PUT, delete; bad input is a 422 naming its part with nothing written; the
per-service limit; ``audience_of`` (what a publish naming segments snapshots) and its 422 naming
unknown names; estimates of every target (exact MySQL counts for filters, segments and user lists,
the subscriber counters for topics and conditions); and a second tenant that sees none of it."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from notee.core.errors import InvalidInput
from notee.domain.segments import audience_of
from notee.store.runtime import Runtime

PRO = [[{"tag": "plan", "op": "=", "value": "pro"}]]
FREE_OR_IOS = [[{"tag": "plan", "op": "=", "value": "free"}], [{"attribute": "platform", "op": "=", "value": "IOS"}]]


def _tag(runtime: Runtime, service: str, user_id: str, key: str, value: str) -> None:
    """A string tag written to the store (the tags API is another part of issue 30)."""
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, updated_at)"
                " VALUES (:s, :u, :k, 's', :v, UTC_TIMESTAMP(6))"
            ),
            {"s": service, "u": user_id, "k": key, "v": value},
        )


@pytest.fixture()
def people(tenant, runtime) -> dict[str, str]:
    """Four users of the tenant: pro-a (AOS + IOS), pro-b (AOS), free-c (IOS), none-d (AOS, no tag)."""
    made = {}
    for name, plan, oses in (
        ("pro-a", "pro", "AI"),
        ("pro-b", "pro", "A"),
        ("free-c", "free", "I"),
        ("none-d", None, "A"),
    ):
        devices = [(f"{name}-{secrets.token_hex(8)}", "IOS" if o == "I" else "AOS") for o in oses]
        made[name] = tenant.user(name, devices=devices)
        if plan:
            _tag(runtime, tenant.service, made[name], "plan", plan)
    return made


def _create(client, headers, name: str, filter_: Any, **extra: Any) -> Any:
    return client.post("/v1/segments", json={"name": name, "filter": filter_, **extra}, headers=headers)


def _rows(runtime: Runtime, service: str) -> int:
    with runtime.sessions() as s:
        return int(s.execute(text("SELECT COUNT(*) FROM segment WHERE service = :s"), {"s": service}).scalar_one())


def test_segment_lifecycle_counts_what_it_reaches_now(client, tenant, people, runtime):
    r = _create(client, tenant.headers, "pros", PRO, description="paying users")
    assert r.status_code == 201, r.text
    assert r.json()["reach"] is None and r.json()["filter"] == PRO and r.json()["description"] == "paying users"

    got = client.get("/v1/segments/pros", headers=tenant.headers).json()
    assert got["reach"] == {"users": 2, "devices": 3, "devices_by_platform": {"AOS": 2, "IOS": 1}}

    put = client.put("/v1/segments/pros", json={"filter": FREE_OR_IOS}, headers=tenant.headers)
    assert put.status_code == 200, put.text
    assert put.json()["reach"] == {"users": 2, "devices": 2, "devices_by_platform": {"IOS": 2}}
    assert put.json()["description"] == ""  # replaced: a PUT without one clears it

    made = client.put("/v1/segments/fresh", json={"filter": PRO}, headers=tenant.headers)
    assert made.status_code == 201 and made.json()["reach"]["users"] == 2

    _tag(runtime, tenant.service, people["none-d"], "plan", "pro")  # counts are of now, not of the save
    assert client.get("/v1/segments/fresh", headers=tenant.headers).json()["reach"]["users"] == 3

    assert client.delete("/v1/segments/pros", headers=tenant.headers).status_code == 204
    assert client.get("/v1/segments/pros", headers=tenant.headers).status_code == 404
    assert client.delete("/v1/segments/pros", headers=tenant.headers).status_code == 404


def test_list_pages_by_cursor_and_counts_on_request(client, tenant, people):
    for i in range(5):
        assert _create(client, tenant.headers, f"s{i}", PRO).status_code == 201
    seen, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = client.get("/v1/segments", params=params, headers=tenant.headers).json()
        seen += [(s["name"], s["reach"]) for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [(f"s{i}", None) for i in range(5)]
    counted = client.get("/v1/segments", params={"counts": "true", "limit": 3}, headers=tenant.headers).json()
    assert [s["reach"]["users"] for s in counted["items"]] == [2, 2, 2]
    too_many = client.get("/v1/segments", params={"counts": "true", "limit": 50}, headers=tenant.headers)
    assert too_many.status_code == 422 and too_many.json()["error"]["details"][0]["loc"] == ["query", "limit"]
    bad = client.get("/v1/segments", params={"cursor": "nope!"}, headers=tenant.headers)
    assert bad.status_code == 422


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"name": "x", "filter": [[{"tag": "plan", "op": "<", "value": True}]]}, ["body", "filter", 0, 0, "op"]),
        (
            {"name": "x", "filter": [[{"attribute": "nope", "op": "=", "value": 1}]]},
            ["body", "filter", 0, 0, "attribute"],
        ),
        (
            {"name": "x", "filter": [[{"tag": "n", "op": "elapsed_gt", "value": "1"}]]},
            ["body", "filter", 0, 0, "value"],
        ),
        ({"name": "bad name", "filter": PRO}, ["body", "name"]),
        ({"name": "x", "filter": PRO, "description": "a\x00b"}, ["body", "description"]),
        ({"name": "x", "filter": []}, ["body", "filter"]),
    ],
)
def test_bad_input_is_422_naming_its_part_and_writes_nothing(client, tenant, runtime, body, loc):
    r = client.post("/v1/segments", json=body, headers=tenant.headers)
    assert r.status_code == 422, r.text
    assert [str(p) for p in loc] in [d["loc"] for d in r.json()["error"]["details"]], r.json()
    assert _rows(runtime, tenant.service) == 0


def test_a_taken_name_is_409_and_the_first_stays(client, tenant):
    assert _create(client, tenant.headers, "dup", PRO).status_code == 201
    again = _create(client, tenant.headers, "dup", FREE_OR_IOS)
    assert again.status_code == 409, again.text
    assert client.get("/v1/segments/dup", headers=tenant.headers).json()["filter"] == PRO


def test_the_per_service_limit_is_409(client, tenant, runtime, settings):
    limit = settings.segments_per_service_max
    with runtime.sessions.begin() as s:  # all but one, straight to the store
        s.execute(
            text(
                "INSERT INTO segment (service, name, filter, created_at, updated_at)"
                " VALUES (:s, :n, '[]', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
            ),
            [{"s": tenant.service, "n": f"pre{i:05d}"} for i in range(limit - 1)],
        )
    assert _create(client, tenant.headers, "last", PRO).status_code == 201
    over = _create(client, tenant.headers, "over", PRO)
    assert over.status_code == 409 and over.json()["error"]["details"][0]["type"] == "segment_limit"
    assert client.put("/v1/segments/over", json={"filter": PRO}, headers=tenant.headers).status_code == 409
    assert client.put("/v1/segments/last", json={"filter": FREE_OR_IOS}, headers=tenant.headers).status_code == 200
    assert _rows(runtime, tenant.service) == limit


def test_another_tenant_sees_none_of_it_and_may_use_the_same_name(client, tenant, make_tenant, people):
    other = make_tenant()
    assert _create(client, tenant.headers, "mine", PRO).status_code == 201
    assert client.get("/v1/segments/mine", headers=other.headers).status_code == 404
    assert client.delete("/v1/segments/mine", headers=other.headers).status_code == 404
    assert client.get("/v1/segments", headers=other.headers).json()["items"] == []
    estimate = client.post("/v1/audience/estimate", json={"segments": {"include": ["mine"]}}, headers=other.headers)
    assert estimate.status_code == 422 and estimate.json()["error"]["details"][0]["loc"] == [
        "body",
        "segments",
        "include",
        "0",
    ]
    # the same name in the other service is its own segment, counting its own users (none)
    assert _create(client, other.headers, "mine", FREE_OR_IOS).status_code == 201
    assert client.get("/v1/segments/mine", headers=other.headers).json()["reach"]["users"] == 0
    mine = client.get("/v1/segments/mine", headers=tenant.headers).json()
    assert mine["filter"] == PRO and mine["reach"]["users"] == 2


def test_audience_of_reads_the_named_segments_and_names_unknown_ones(client, tenant, runtime):
    assert _create(client, tenant.headers, "a", PRO).status_code == 201
    assert _create(client, tenant.headers, "b", FREE_OR_IOS).status_code == 201
    with runtime.sessions() as s:
        audience = audience_of(s, tenant.service, ["a", "a"], ["b"])
        assert len(audience.include) == 1 and len(audience.exclude) == 1
        assert audience.include[0][0][0].tag == "plan"
        with pytest.raises(InvalidInput) as caught:
            audience_of(s, tenant.service, ["a", "zz"], ["b", "yy"])
    locs = [d["loc"] for d in caught.value.details]
    assert locs == [["body", "segments", "include", 1], ["body", "segments", "exclude", 1]]


def _estimate(client, headers, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/audience/estimate", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_estimates_of_filters_segments_and_user_lists_are_exact(client, tenant, people):
    h = tenant.headers
    by_filter = _estimate(client, h, {"filter": PRO})
    assert by_filter == {
        "users": 2,
        "devices": 3,
        "devices_by_platform": {"AOS": 2, "IOS": 1},
        "exact": True,
        "method": "mysql_count",
        "unknown_users": None,
        "topics": None,
    }
    assert _estimate(client, h, {"filter": PRO, "platforms": ["IOS"]})["devices_by_platform"] == {"IOS": 1}
    assert _create(client, h, "pros", PRO).status_code == 201
    assert _create(client, h, "ios", [[{"attribute": "platform", "op": "=", "value": "IOS"}]]).status_code == 201
    both = _estimate(client, h, {"segments": {"include": ["pros"], "exclude": ["ios"]}})
    # device attributes are tested per device: pro-a's iOS device is excluded, its Android one stays
    assert (both["users"], both["devices"], both["devices_by_platform"]) == (2, 2, {"AOS": 2})
    listed = _estimate(client, h, {"users": ["pro-a", "none-d", "ghost"], "platforms": ["AOS"]})
    assert (listed["users"], listed["devices"], listed["unknown_users"]) == (2, 2, 1)


def test_estimates_of_topics_and_conditions_come_from_the_counters(client, tenant, people):
    h = tenant.headers
    tenant.template("TOPIC", "news")
    for topic, names in (("sports", ["pro-a", "pro-b", "free-c"]), ("weather", ["pro-a"])):
        ids = [people[n] for n in names]
        r = client.post(f"/v1/topics/news/{topic}/subscribers", json={"user_ids": ids}, headers=h)
        assert r.status_code == 200, r.text
    topic = _estimate(client, h, {"topic": "sports", "type": "news"})
    assert topic | {"topics": None} == {
        "users": 3,
        "devices": None,
        "devices_by_platform": None,
        "exact": False,
        "method": "topic_counter",
        "unknown_users": None,
        "topics": None,
    }
    cond = _estimate(client, h, {"condition": "'sports' in topics && !('weather' in topics)", "type": "news"})
    assert (cond["users"], cond["method"], cond["topics"]) == (
        3,
        "topic_counters_upper_bound",
        {"sports": 3, "weather": 1},
    )
    either = _estimate(client, h, {"condition": "'sports' in topics || 'weather' in topics", "type": "news"})
    assert either["users"] == 4  # a bound: pro-a is in both


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({}, ["body"]),
        ({"filter": PRO, "topic": "x", "type": "news"}, ["body"]),
        ({"topic": "sports"}, ["body", "type"]),
        ({"condition": "'a' in topics &&", "type": "news"}, ["body", "condition"]),
        ({"filter": [[{"tag": "plan", "op": "in", "value": "pro"}]]}, ["body", "filter", 0, 0, "value"]),
        ({"segments": {"include": []}}, ["body", "segments", "include"]),
        ({"users": ["u"] * 20_001}, ["body", "users"]),
        ({"filter": PRO, "platforms": ["WIN"]}, ["body", "platforms", 0]),
    ],
)
def test_bad_estimates_are_422_naming_their_part(client, tenant, body, loc):
    r = client.post("/v1/audience/estimate", json=body, headers=tenant.headers)
    assert r.status_code == 422, r.text
    assert [str(p) for p in loc] in [d["loc"] for d in r.json()["error"]["details"]], r.json()


def test_elapsed_filters_count_against_the_database_clock(client, tenant, people):
    recent = [[{"attribute": "created_at", "op": "elapsed_lt", "value": 3600}]]
    assert _estimate(client, tenant.headers, {"filter": recent})["users"] == 4
    later = datetime.now(UTC).replace(year=datetime.now(UTC).year + 1).isoformat()
    future = [[{"attribute": "created_at", "op": ">", "value": later}]]
    assert _estimate(client, tenant.headers, {"filter": future})["users"] == 0
