"""Listing jobs (issue 16.3): GET /v1/jobs and the admin's GET /v1/admin/services/{service}/jobs, with
a cycle job made by the scheduler itself among topic publishes: each filter (state, method, type,
creation time) alone and combined, keyset paging (ties on created_at included), bad input as a 422
in the error format, and a key that sees only its own service's jobs."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import text

from notee.core.vocabulary import CycleTarget
from tests.support.registry import admin_headers, new_service, new_template
from tests.support.scheduler import DueIndex, scheduler, utc

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def _set_created(runtime, job_id: str, at: datetime) -> None:
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE fanout_job SET created_at = :t WHERE job_id = :j"),
            {"t": at.replace(tzinfo=None), "j": job_id},
        )


@pytest.fixture(scope="module")
def tenant(client, runtime, module_tenant):
    """The family's tenant of this module with 4 topic publishes (types alpha, beta), one cycle job
    made by a scheduler minute, one job cancelled and one failed; creation times T0 + 0..4 h, two of
    them equal (a tie)."""
    service, auth = module_tenant
    new_template(client, auth, "TOPIC", "alpha")
    new_template(client, auth, "TOPIC", "beta")
    cycle_key = new_template(client, auth, "CYCLE", "remind")["notification_key"]

    def publish(type_: str, topic: str) -> str:
        r = client.post(f"/v1/topics/{type_}/{topic}/publish", json={"variables": {"name": "x"}}, headers=auth)
        assert r.status_code == 202, r.text
        return str(r.json()["job_id"])

    a1, a2, b1, a3 = publish("alpha", "one"), publish("alpha", "two"), publish("beta", "one"), publish("alpha", "3")
    due = DueIndex(runtime)
    due.mark(service, "remind", cycle_key, [CycleTarget("Pacific/Chatham", "WED", 4, 17)])
    try:
        minute = utc(2026, 11, 3, 14, 32)  # WED 04:17 in Chatham (UTC+13:45)
        result = scheduler(runtime).run_minute(minute, now=minute)
        assert result.jobs_created >= 1, result
    finally:
        due.cleanup()
    with runtime.sessions() as s:
        cycle = s.execute(
            text("SELECT job_id FROM fanout_job WHERE service = :s AND notification_method = 'CYCLE'"), {"s": service}
        ).scalar_one()
    assert client.post(f"/v1/jobs/{a2}/cancel", headers=auth).json()["state"] == "cancelled"
    with runtime.sessions.begin() as s:
        s.execute(text("UPDATE fanout_job SET state = 'failed', error = 'x' WHERE job_id = :j"), {"j": b1})
    created = {a1: T0, a2: T0 + timedelta(hours=1), b1: T0 + timedelta(hours=2), cycle: T0 + timedelta(hours=3)}
    created[a3] = created[cycle]  # a tie on created_at: paging orders it by job_id
    for job_id, at in created.items():
        _set_created(runtime, job_id, at)
    newest_first = sorted(created, key=lambda j: (created[j], j), reverse=True)
    return {
        "service": service,
        "auth": auth,
        "ids": {"a1": a1, "a2": a2, "b1": b1, "a3": a3, "cycle": cycle},
        "newest_first": newest_first,
    }


def ids(client, tenant, path: str = "/v1/jobs", headers=None, **params) -> list[str]:
    r = client.get(path, params=params, headers=headers or tenant["auth"])
    assert r.status_code == 200, r.text
    return [j["job_id"] for j in r.json()["items"]]


def test_cycle_jobs_are_listed_with_topic_publishes(client, tenant):
    r = client.get("/v1/jobs", headers=tenant["auth"])
    items = r.json()["items"]
    assert [j["job_id"] for j in items] == tenant["newest_first"]
    cycle = next(j for j in items if j["job_id"] == tenant["ids"]["cycle"])
    assert cycle["notification_type"] == "remind"
    assert cycle["target"] == {"timezone": "Pacific/Chatham", "day": "WED", "hour": 4, "minute": 17}


def test_each_filter_alone_and_combined(client, tenant):
    j = tenant["ids"]
    assert ids(client, tenant, method="CYCLE") == [j["cycle"]]
    assert ids(client, tenant, method="TOPIC") == [x for x in tenant["newest_first"] if x != j["cycle"]]
    assert ids(client, tenant, method="SINGLE") == []
    assert ids(client, tenant, type="remind") == [j["cycle"]]
    assert ids(client, tenant, type="beta") == [j["b1"]]
    assert ids(client, tenant, state="cancelled") == [j["a2"]]
    assert ids(client, tenant, state="failed") == [j["b1"]]
    assert set(ids(client, tenant, state="queued")) == {j["a1"], j["a3"], j["cycle"]}
    assert ids(client, tenant, state="done") == []
    # Time range: created_from inclusive, created_to exclusive, any offset.
    assert set(ids(client, tenant, created_from=(T0 + timedelta(hours=2)).isoformat())) == {
        j["b1"],
        j["a3"],
        j["cycle"],
    }
    assert ids(client, tenant, created_to=(T0 + timedelta(hours=1)).isoformat()) == [j["a1"]]
    seoul = (T0 + timedelta(hours=1)).astimezone(timezone(timedelta(hours=9))).isoformat()  # the same instant
    assert ids(client, tenant, created_from=seoul, created_to=(T0 + timedelta(hours=2)).isoformat()) == [j["a2"]]
    # Combined.
    assert ids(client, tenant, method="TOPIC", state="queued", type="alpha") == [j["a3"], j["a1"]]
    assert ids(client, tenant, method="TOPIC", created_from=(T0 + timedelta(hours=3)).isoformat()) == [j["a3"]]


def test_the_cursor_walks_every_page_once_ties_included(client, tenant):
    for params, expected in (({}, tenant["newest_first"]), ({"state": "queued"}, None)):
        seen, cursor = [], None
        while True:
            page = client.get(
                "/v1/jobs",
                params=params | {"limit": 1, **({"cursor": cursor} if cursor else {})},
                headers=tenant["auth"],
            ).json()
            assert len(page["items"]) <= 1
            seen += [x["job_id"] for x in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen))
        assert seen == (expected if expected is not None else ids(client, tenant, **params))
    two = client.get("/v1/jobs", params={"limit": 2}, headers=tenant["auth"]).json()
    rest = client.get("/v1/jobs", params={"cursor": two["next_cursor"]}, headers=tenant["auth"]).json()
    assert [x["job_id"] for x in two["items"] + rest["items"]] == tenant["newest_first"]
    assert rest["next_cursor"] is None


def test_the_admin_lists_any_services_jobs_with_the_same_filters(client, settings, tenant):
    admin = admin_headers(settings)
    path = f"/v1/admin/services/{tenant['service']}/jobs"
    assert ids(client, tenant, path, admin) == tenant["newest_first"]
    assert ids(client, tenant, path, admin, method="CYCLE") == [tenant["ids"]["cycle"]]
    assert ids(client, tenant, path, admin, state="cancelled", limit=5) == [tenant["ids"]["a2"]]
    r = client.get("/v1/admin/services/NOSUCH1/jobs", headers=admin)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.get(path, headers=tenant["auth"]).status_code == 401  # a service key is not the admin


def test_another_service_sees_none_of_these_jobs(client, settings, tenant):
    other = new_service(client, settings, "K" + secrets.token_hex(5).upper())
    assert ids(client, tenant, headers=other) == []
    assert ids(client, tenant, headers=other, method="CYCLE") == []


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"state": "sleeping"}, ["query", "state"]),
        ({"method": "BROADCAST"}, ["query", "method"]),
        ({"type": "no spaces"}, ["query", "type"]),
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": 201}, ["query", "limit"]),
        ({"created_from": "yesterday"}, ["query", "created_from"]),
        ({"created_to": "2026-11-02T08:00:00"}, ["query", "created_to"]),  # no offset: not guessed
        ({"cursor": "bm90LWEtY3Vyc29y"}, ["query", "cursor"]),
    ],
)
def test_bad_filters_are_a_422_in_the_error_format(client, tenant, params, loc):
    r = client.get("/v1/jobs", params=params, headers=tenant["auth"])
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_input" and error["details"][0]["loc"] == loc, error
