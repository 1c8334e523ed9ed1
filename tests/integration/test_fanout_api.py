"""The publish API end to end: POST /v1/topics/{type}/{topic}/publish, GET /v1/jobs/{job_id}, with
real subscriptions (through the API), a real worker and the emulator."""

from __future__ import annotations

import pytest

from tests.support.fanout import count_rows, emulator_runtime, run_worker_until_idle
from tests.support.registry import new_service, new_user, random_token

pytestmark = pytest.mark.tenant(credentials=True)


@pytest.fixture()
def tenant(tenant):
    """The family's tenant with a TOPIC template ``news``."""
    tenant.template("TOPIC", "news", title="Hello {{name}}", body="Body")
    return tenant


def _publish(client, headers, topic="sports", body=None, key=None, type_="news"):
    h = dict(headers)
    if key:
        h["Idempotency-Key"] = key
    body = body if body is not None else {"variables": {"name": "A"}}
    return client.post(f"/v1/topics/{type_}/{topic}/publish", json=body, headers=h)


def test_publish_returns_a_job_and_the_idempotency_key_returns_it_again(client, tenant):
    service, headers = tenant
    r = _publish(client, headers, key="k-1")
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    again = _publish(client, headers, key="k-1")
    assert again.status_code == 202 and again.json()["job_id"] == job_id
    other = _publish(client, headers, key="k-2")
    assert other.json()["job_id"] != job_id
    no_key = _publish(client, headers)
    assert no_key.json()["job_id"] not in (job_id, other.json()["job_id"])
    assert count_rows(client.app.state.runtime, service) == (3, 3)
    g = client.get(f"/v1/jobs/{job_id}", headers=headers)
    assert g.status_code == 200
    body = g.json()
    assert body["state"] == "queued" and body["target"] == {"topic": "sports"}
    assert {k: body[k] for k in ("targeted", "sent", "failed", "pruned", "retried", "tasks", "tasks_done")} == {
        "targeted": 0,
        "sent": 0,
        "failed": 0,
        "pruned": 0,
        "retried": 0,
        "tasks": 1,
        "tasks_done": 0,
    }
    assert body["started_at"] is None and body["finished_at"] is None
    assert "paging_state" not in g.text


@pytest.mark.parametrize(
    "path, body, headers_extra, status, code",
    [
        ("/v1/topics/nope/sports/publish", {}, {}, 404, "not_found"),
        ("/v1/topics/news/" + "x" * 51 + "/publish", {}, {}, 422, "invalid_input"),
        ("/v1/topics/news/a%01b/publish", {"variables": {"name": "a"}}, {}, 422, "invalid_input"),
        ("/v1/topics/bad%20type/sports/publish", {"variables": {"name": "a"}}, {}, 422, "invalid_input"),
        ("/v1/topics/news/sports/publish", {"variables": {}}, {}, 422, "invalid_input"),  # {{name}} missing
        ("/v1/topics/news/sports/publish", {"variables": {"name": "a"}, "extra": 1}, {}, 422, "invalid_input"),
        ("/v1/topics/news/sports/publish", {"variables": {"name": 5}}, {}, 422, "invalid_input"),
        ("/v1/topics/news/sports/publish", {"variables": {"name": "a"}, "title": ""}, {}, 422, "invalid_input"),
        (
            "/v1/topics/news/sports/publish",
            {"variables": {"name": "a"}, "data": {f"k{i}": "v" * 1000 for i in range(5)}},
            {},
            422,
            "payload_too_large",
        ),
        (
            "/v1/topics/news/sports/publish",
            {"variables": {"name": "a"}},
            {"Idempotency-Key": "x" * 201},
            422,
            "invalid_input",
        ),
        (
            "/v1/topics/news/sports/publish",
            {"variables": {"name": "a"}},
            {"Authorization": "Bearer nk_bad_bad"},
            401,
            "unauthorized",
        ),
    ],
)
def test_bad_publish_is_rejected_and_writes_nothing(client, tenant, path, body, headers_extra, status, code):
    service, headers = tenant
    r = client.post(path, json=body, headers={**headers, **headers_extra})
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert count_rows(client.app.state.runtime, service) == (0, 0)


def test_a_job_is_invisible_to_other_tenants(client, settings, tenant, service_id):
    _, headers = tenant
    job_id = _publish(client, headers).json()["job_id"]
    other_headers = new_service(client, settings, service_id + "X")
    r = client.get(f"/v1/jobs/{job_id}", headers=other_headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.get("/v1/jobs/00000000-0000-0000-0000-000000000000", headers=headers).status_code == 404
    assert client.get("/v1/jobs/short", headers=headers).status_code == 422


def test_publish_reaches_every_subscribed_device_and_prunes_dead_tokens(client, tenant, emulator):
    service, headers = tenant
    live = [(random_token("a"), "AOS"), (random_token("i"), "IOS"), (random_token("b"), "AOS")]
    dead = random_token("dead")
    users = [new_user(client, headers, devices=[d]) for d in live]
    users.append(new_user(client, headers, devices=[(dead, "AOS")]))
    for user_id in users:
        r = client.put(f"/v1/users/{user_id}/subscriptions/topic/news/sports", headers=headers)
        assert r.status_code in (200, 201), r.text
    new_user(client, headers, devices=[(random_token("n"), "AOS")])  # not subscribed
    emulator.fcm_tokens(UNREGISTERED=[dead])

    job_id = _publish(client, headers, body={"variables": {"name": "Kim"}, "data": {"k": "v"}}).json()["job_id"]
    rt = emulator_runtime()
    try:
        run_worker_until_idle(rt, [service])
    finally:
        rt.close()

    body = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert body["state"] == "done", body
    assert (body["targeted"], body["sent"], body["pruned"], body["failed"]) == (4, 3, 1, 0)
    assert body["started_at"] and body["finished_at"]
    for token, _ in live:
        assert emulator.deliveries(token)["fcm"] == 1
    last = emulator.last_request(live[0][0])
    assert "Hello Kim" in str(last)
    # the dead token was pruned: its device and subscription are gone
    devices = client.get(f"/v1/users/{users[-1]}/devices", headers=headers).json()
    assert dead not in str(devices)
