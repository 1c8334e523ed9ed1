"""The console's pushes per minute, a job's per-page timeline and the composer's delivery choices
(issue 33, docs/CONSOLE.md "Compose and follow"), over HTTP against a real worker's pages:

- each fan-out page's counts land in ``push_minute`` with its checkpoint, so the service's chart of
  the last hour, the job's chart and its per-page timeline say what the job's counts say;
- the composer sends TTL, priority and the quiet-hours choice per publish, restated on the
  confirmation page; ``quiet_hours: override`` reaches a recipient in its quiet hours whom the
  template (``drop``) would skip; a bad choice is 422 and writes nothing;
- another tenant's job, chart and timeline are 404 or empty, never its numbers."""

from __future__ import annotations

import html
import json
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from notee.store import jobs_sql
from tests.integration.test_console_compose import form_fields, sign_in
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import random_token

pytestmark = pytest.mark.tenant(credentials=True)

TOTAL = re.compile(r'aria-label="([^"]*): (\d+) in all"')


def _user(client, headers, *, quiet: dict[str, str] | None = None) -> str:
    """A user (UTC) with one Android device subscribed to TOPIC news/all; its token."""
    body = {"timezone": "UTC"} | ({"quiet_hours": quiet} if quiet else {})
    r = client.put(f"/v1/users/u-{random_token()[-10:]}", json=body, headers=headers)
    assert r.status_code == 201, r.text
    user = r.json()["user_id"]
    token = random_token("act")
    r = client.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS"}, headers=headers)
    assert r.status_code == 201, r.text
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    return token


def _quiet_now() -> dict[str, str]:
    """A window of the UTC clock around now (an hour either side; across midnight is a window too)."""
    now = datetime.now(UTC)
    return {"start": f"{now - timedelta(hours=1):%H:%M}", "end": f"{now + timedelta(hours=1):%H:%M}"}


def _chart_total(html: str, element_id: str) -> int:
    figure = html.split(f'id="{element_id}"', 1)[1].split("</figure>", 1)[0]
    found = TOTAL.search(figure)
    assert found, figure[:300]
    return int(found.group(2))


def _minutes(runtime, job_id: str) -> list[tuple[int, int, int]]:
    with runtime.sessions() as s:
        rows = s.execute(
            text("SELECT task_no, pages, sent FROM push_minute WHERE job_id = :j ORDER BY minute_utc, task_no"),
            {"j": job_id},
        ).all()
    return [(int(r.task_no), int(r.pages), int(r.sent)) for r in rows]


def test_the_composer_sends_ttl_priority_and_a_quiet_hours_override_and_charts_it_per_minute(
    app, client, runtime, tenant, make_tenant, emulator, emu_runtime
):
    service, headers = tenant
    r = client.put(
        "/v1/templates/TOPIC/news",
        json={"title": "News", "body": "b", "quiet_hours": "drop", "ttl_seconds": 3600, "priority": "high"},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    awake = [_user(client, headers) for _ in range(4)]
    asleep = _user(client, headers, quiet=_quiet_now())

    # Honoured (the API's default): the template drops the sleeper's push.
    r = client.post("/v1/topics/news/all/publish", json={}, headers=headers)
    assert r.status_code == 202, r.text
    honoured = r.json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    status = client.get(f"/v1/jobs/{honoured}", headers=headers).json()
    assert (status["state"], status["sent"], status["quiet_dropped"]) == ("done", 4, 1), status
    assert deliveries_per_token(emulator, [asleep]) == {asleep: 0}

    # The composer: TTL, priority and the override, restated on the confirmation page, then sent.
    c = sign_in(app, tenant.api_key)
    form = form_fields(c.get(f"/console/s/{service}/publish?template=TOPIC/news").text, "publish")
    form |= {"target": "topic", "topic": "all", "ttl_seconds": "120", "priority": "normal", "quiet_hours": "override"}
    confirm = c.post(f"/console/s/{service}/publish", data=form)
    assert confirm.status_code == 200, confirm.text
    restated = {
        k: html.unescape(re.search(rf'id="restated-{k}">([^<]*)<', confirm.text).group(1))
        for k in ("ttl", "priority", "quiet")
    }
    assert restated == {
        "ttl": "120 s (this publish's)",
        "priority": "normal (this publish's)",
        "quiet": "overridden: sent whatever the recipients' quiet hours",
    }
    sent = c.post(f"/console/s/{service}/publish", data=form_fields(confirm.text, "confirm"))
    assert sent.status_code == 303, sent.text
    job_id = sent.headers["location"].rsplit("/", 1)[1]
    with runtime.sessions() as s:
        job = jobs_sql.get_job(s, job_id, service)
        overrides = s.execute(text("SELECT overrides FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar_one()
    assert json.loads(overrides) == {"ttl_seconds": 120, "priority": "normal", "quiet_hours": "override"}
    assert job is not None and (job.payload["ttl_seconds"], job.payload["priority"]) == (120, "normal")
    run_worker_until_idle(emu_runtime, [service])
    status = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert (status["state"], status["sent"], status["quiet_dropped"]) == ("done", 5, 0), status
    assert deliveries_per_token(emulator, [asleep, *awake]) == {asleep: 1} | dict.fromkeys(awake, 2)  # both jobs

    # Every page's counts are in push_minute: the job's chart, its timeline and the service's chart.
    minutes = _minutes(runtime, job_id)
    assert minutes and sum(sent for _, _, sent in minutes) == 5 and all(pages >= 1 for _, pages, _ in minutes)
    page = c.get(f"/console/s/{service}/jobs/{job_id}")
    assert page.status_code == 200
    assert _chart_total(page.text, "job-minute-chart") == 5
    events = page.text.split('id="page-events"', 1)[1].split("</table>", 1)[0]
    assert "claimed by a worker" in events and "task done" in events, events
    assert re.search(r"sent pages at [0-9:–]+</td><td[^>]*>\d+ pages?: 5 sent, 0 failed, 0 pruned", events), events
    jobs_page = c.get(f"/console/s/{service}/jobs")
    assert _chart_total(jobs_page.text, "minute-chart") == 4 + 5  # both jobs sent within the last hour
    assert (
        "<title>Jobs · " in jobs_page.text and "<title>Jobs · " + service + " · Notee console</title>" in jobs_page.text
    )

    # Another tenant: none of it.
    other = make_tenant()
    o = sign_in(app, other.api_key)
    assert _chart_total(o.get(f"/console/s/{other.service}/jobs").text, "minute-chart") == 0
    for path in [f"/console/s/{service}/jobs/{job_id}", f"/console/s/{other.service}/jobs/{job_id}"]:
        stolen = o.get(path)
        assert stolen.status_code == 404 and "claimed by a worker" not in stolen.text, path


@pytest.mark.parametrize(
    "body",
    [{"quiet_hours": "sometimes"}, {"quiet_hours": True}, {"quiet_hours": ""}],
    ids=["unknown", "boolean", "empty"],
)
def test_a_bad_quiet_hours_choice_is_422_and_nothing_is_written(client, runtime, tenant, body):
    service, headers = tenant
    tenant.template("TOPIC", "news", title="News", body="b")
    key = f"k-{uuid.uuid4()}"
    r = client.post("/v1/topics/news/all/publish", json=body, headers=headers | {"Idempotency-Key": key})
    assert r.status_code == 422, r.text
    assert any(d["loc"][-1] == "quiet_hours" for d in r.json()["error"]["details"]), r.json()
    r = client.post("/v1/publish/news", json={"topic": "all"} | body, headers=headers)
    assert r.status_code == 422, r.text
    with runtime.sessions() as s:
        assert s.execute(text("SELECT COUNT(*) FROM fanout_job WHERE service = :s"), {"s": service}).scalar() == 0


def test_honour_is_the_default_and_the_same_request_for_its_idempotency_key(client, tenant):
    _, headers = tenant
    tenant.template("TOPIC", "news", title="News", body="b")
    key = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    first = client.post("/v1/topics/news/all/publish", json={}, headers=headers | key)
    again = client.post("/v1/topics/news/all/publish", json={"quiet_hours": "honour"}, headers=headers | key)
    assert first.status_code == again.status_code == 202 and first.json()["job_id"] == again.json()["job_id"]
    other = client.post("/v1/topics/news/all/publish", json={"quiet_hours": "override"}, headers=headers | key)
    assert other.status_code == 422, other.text  # another request under the same key
