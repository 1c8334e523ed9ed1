"""Scheduled publishes and single sends (issue 18 item 1): ``send_at`` keeps a job `scheduled` in
MySQL until then; the claim (database clock) never hands its tasks out earlier, so it survives
restarts of every process, is sent exactly once at/after send_at, and can be cancelled before."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest
from sqlalchemy import text

from notee.core.vocabulary import TopicTarget
from notee.store import jobs_sql, mysql, task_leases
from notee.usecases import publish
from notee.usecases.job_requests import JobRequest
from tests.support.emulator import census
from tests.support.fanout import (
    count_rows,
    job_progress,
    run_worker_until_idle,
    seed_topic,
    topic_job,
    topic_template,
    wait_job,
)
from tests.support.registry import admin_headers, new_service, new_template, new_user, random_token
from tests.support.waiting import wait_for


@pytest.fixture()
def erun(emu_runtime):
    """This module's name for the family's emulator-routed runtime (tests/support/emulator.py)."""
    return emu_runtime


def _db_now(runtime) -> datetime:
    with runtime.sessions() as s:
        return mysql.db_now(s)


def _rfc3339(naive_utc: datetime, offset_hours: int = 0) -> str:
    """The instant as RFC 3339 in a zone ``offset_hours`` east of UTC (the API must not care which)."""
    return naive_utc.replace(tzinfo=UTC).astimezone(timezone(timedelta(hours=offset_hours))).isoformat()


def _api_headers(client, settings, service: str) -> dict[str, str]:
    r = client.post(f"/v1/admin/services/{service}/api-keys", json={"label": "t"}, headers=admin_headers(settings))
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['api_key']}"}


def _wait_db_clock_past(runtime, moment: datetime) -> None:
    wait_for(lambda: _db_now(runtime) > moment, timeout=30, what="the database clock to pass send_at")


def test_a_scheduled_publish_survives_restarts_and_is_sent_once_at_send_at(
    client, settings, erun, emulator, service_id, processes
):
    key = topic_template(erun, service_id)
    tokens = seed_topic(erun, service_id, "news", key, "sports", 300)
    headers = _api_headers(client, settings, service_id)
    api = processes.api(name="api-1")
    worker = processes.worker(service_id, name="worker-1")
    # 10 s ahead: a first request to a freshly started API took over 3 s on a loaded machine, and
    # a send_at already passed on arrival is sent at once (queued), not scheduled.
    send_at = _db_now(erun) + timedelta(seconds=10)
    r = httpx.post(
        f"{api.url}/v1/topics/news/sports/publish",
        json={"variables": {"name": "later"}, "send_at": _rfc3339(send_at, offset_hours=9)},  # +09:00 on purpose
        headers=headers,
        timeout=30,
    )
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["state"] == "scheduled"
    assert datetime.fromisoformat(accepted["send_at"]).astimezone(UTC).replace(tzinfo=None) == send_at
    job_id = accepted["job_id"]
    # Restart every process the job depends on while it waits: the job is a row, not a timer.
    worker.stop(timeout=30)
    api.stop(timeout=30)
    api = processes.api(name="api-2")
    workers = [processes.worker(service_id, name="worker-2"), processes.worker(service_id, name="worker-3")]
    job, progress = wait_job(erun, service_id, job_id, timeout=120, workers=workers)
    assert job.state == "done" and progress.sent == progress.targeted == 300, progress
    seen = census(emulator, tokens)
    assert seen.missing == [] and seen.duplicated == 0  # sent once, by one of the two workers
    with erun.sessions() as s:
        first_claim = s.execute(
            text("SELECT MIN(started_at) FROM fanout_task WHERE job_id = :j"), {"j": job_id}
        ).scalar_one()
    assert first_claim >= send_at  # no task was claimed before send_at (both on the database clock)
    status = httpx.get(f"{api.url}/v1/jobs/{job_id}", headers=headers, timeout=30).json()
    assert status["state"] == "done" and status["send_at"].startswith(send_at.strftime("%Y-%m-%dT%H:%M:%S"))


def test_a_scheduled_job_cancelled_before_send_at_is_never_sent(client, settings, erun, emulator, service_id):
    key = topic_template(erun, service_id)
    seed_topic(erun, service_id, "news", key, "sports", 50)
    headers = _api_headers(client, settings, service_id)
    send_at = _db_now(erun) + timedelta(seconds=3)
    r = client.post(
        "/v1/topics/news/sports/publish",
        json={"variables": {"name": "x"}, "send_at": _rfc3339(send_at)},
        headers=headers,
    )
    assert r.status_code == 202 and r.json()["state"] == "scheduled", r.text
    job_id = r.json()["job_id"]
    listed = client.get("/v1/jobs", params={"state": "scheduled"}, headers=headers).json()["items"]
    assert [j["job_id"] for j in listed] == [job_id]
    r = client.post(f"/v1/jobs/{job_id}/cancel", headers=headers)
    assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
    _wait_db_clock_past(erun, send_at)
    run_worker_until_idle(erun, [service_id])  # a worker running after send_at finds nothing to send
    assert emulator.delivered() == 0
    final, progress = job_progress(erun, job_id)
    assert final.state == "cancelled" and progress.sent == progress.targeted == 0
    assert {t.state for t in jobs_sql.tasks(erun.sessions(), job_id)} == {"cancelled"}


def test_the_claim_never_takes_a_task_before_send_at(erun, service_id):
    """Store level, no waiting: a job an hour ahead is not claimable; once its time has come (moved
    into the past here) exactly one claim takes its one task and the job runs."""
    key = topic_template(erun, service_id)
    with erun.sessions.begin() as s:
        later = mysql.db_now(s) + timedelta(hours=1)
        job = publish.create_job(
            erun,
            s,
            JobRequest(
                service=service_id,
                notification_key=key,
                method="TOPIC",
                type_="news",
                target=TopicTarget("sports"),
                idempotency_key=None,
                variables={"name": "x"},
                send_at=later,
            ),
        )
    assert job.state == "scheduled" and job.send_at == later
    assert task_leases.claim(erun.sessions, owner="early", lease_s=30, services=[service_id]) is None
    with erun.sessions.begin() as s:  # an hour later
        s.execute(
            text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE job_id = :j"),
            {"j": job.job_id},
        )
    claim = task_leases.claim(erun.sessions, owner="on-time", lease_s=30, services=[service_id])
    assert claim is not None and claim.job_id == job.job_id
    assert task_leases.claim(erun.sessions, owner="second", lease_s=30, services=[service_id]) is None
    assert job_progress(erun, job.job_id)[0].state == "running"


def test_a_scheduled_single_send_becomes_a_job_sent_to_the_users_devices_then(client, settings, erun, emulator):
    service = "S" + secrets.token_hex(5).upper()
    headers = new_service(client, settings, service, credentials=True)
    new_template(client, headers, "SINGLE", "otp", title="Code {{code}}")
    tokens = [random_token("sched-a"), random_token("sched-b")]
    user_id = new_user(client, headers, devices=[(tokens[0], "AOS")])
    send_at = _db_now(erun) + timedelta(seconds=2)
    body = {"type": "otp", "variables": {"code": "4711"}, "data": {"k": "v"}, "send_at": _rfc3339(send_at, -5)}
    r = client.post(f"/v1/users/{user_id}/send", json=body, headers={**headers, "Idempotency-Key": "otp-1"})
    assert r.status_code == 202 and r.json()["state"] == "scheduled", r.text
    job_id = r.json()["job_id"]
    again = client.post(f"/v1/users/{user_id}/send", json=body, headers={**headers, "Idempotency-Key": "otp-1"})
    assert again.status_code == 202 and again.json()["job_id"] == job_id  # a retry does not schedule twice
    moved = client.post(
        f"/v1/users/{user_id}/send",
        json={**body, "send_at": _rfc3339(send_at + timedelta(minutes=5))},
        headers={**headers, "Idempotency-Key": "otp-1"},
    )
    assert moved.status_code == 422 and moved.json()["error"]["details"][0]["type"] == "idempotency_key_reused"
    listed = client.get("/v1/jobs", params={"method": "SINGLE", "state": "scheduled"}, headers=headers).json()
    assert [(j["job_id"], j["target"]) for j in listed["items"]] == [(job_id, {"user_id": user_id})]
    # A device registered after scheduling gets it too: the worker reads the user's devices when it sends.
    d = client.post(f"/v1/users/{user_id}/devices", json={"token": tokens[1], "os": "AOS"}, headers=headers)
    assert d.status_code in (200, 201), d.text
    _wait_db_clock_past(erun, send_at)
    run_worker_until_idle(erun, [service])
    final, progress = job_progress(erun, job_id)
    assert final.state == "done" and (progress.targeted, progress.sent) == (2, 2), progress
    seen = census(emulator, tokens)
    assert seen.missing == [] and seen.duplicated == 0
    request = emulator.last_request(tokens[0])
    assert request is not None and "Code 4711" in str(request)


@pytest.mark.parametrize(
    ("send_at", "kind"),
    [
        ("2030-01-01T09:00:00", "value_error"),  # no offset: which zone? refused, never guessed
        ("2030-01-01", "value_error"),
        (1893456000, "value_error"),  # epoch seconds
        ("tomorrow", "value_error"),
        ("2001-01-01T00:00:00Z", "send_at_in_past"),
        ("2999-01-01T00:00:00Z", "send_at_too_far"),
    ],
)
def test_a_bad_send_at_is_422_in_the_error_format_and_nothing_is_written(
    client, settings, erun, service_id, send_at, kind
):
    topic_template(erun, service_id)
    headers = _api_headers(client, settings, service_id)
    r = client.post(
        "/v1/topics/news/sports/publish", json={"variables": {"name": "x"}, "send_at": send_at}, headers=headers
    )
    assert r.status_code == 422, r.text
    detail = r.json()["error"]["details"][0]
    assert detail["loc"] == ["body", "send_at"] and detail["type"] == kind, detail
    assert count_rows(erun, service_id) == (0, 0)


def test_a_scheduled_single_send_to_an_unknown_user_is_404_and_writes_nothing(client, settings, erun):
    service = "S" + secrets.token_hex(5).upper()
    headers = new_service(client, settings, service, credentials=True)
    new_template(client, headers, "SINGLE", "otp", title="Code")
    send_at = _rfc3339(_db_now(erun) + timedelta(minutes=5))
    r = client.post(
        "/v1/users/00000000-0000-4000-8000-000000000000/send", json={"type": "otp", "send_at": send_at}, headers=headers
    )
    assert r.status_code == 404, r.text
    assert count_rows(erun, service) == (0, 0)


def test_a_job_without_send_at_is_queued_as_before(erun, service_id):
    key = topic_template(erun, service_id)
    job = topic_job(erun, service_id, key, "sports")
    assert job.state == "queued" and job.send_at is None
