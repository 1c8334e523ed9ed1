"""Cancelling a job (POST /v1/jobs/{job_id}/cancel, the SDK's cancel_job, `notee jobs cancel`): a
queued job sends nothing; a running one stops after the page each lane is sending, with its counts
kept and true (the emulator received exactly what the job says it sent); a dead worker's task of a
cancelled job is never run again; another tenant cannot cancel it."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import text

from notee.store import jobs_sql, task_leases
from tests.support.fanout import (
    job_progress,
    run_worker_until_idle,
    seed_topic,
    topic_job,
    topic_template,
)
from tests.support.registry import new_service
from tests.support.waiting import wait_for


@pytest.fixture()
def erun(emu_runtime):
    """This module's name for the family's emulator-routed runtime (tests/support/emulator.py)."""
    return emu_runtime


def _api_headers(client, settings, service: str) -> dict[str, str]:
    """An API key of a service made by the factories (new_service would create it again)."""
    from tests.support.registry import admin_headers

    r = client.post(f"/v1/admin/services/{service}/api-keys", json={"label": "t"}, headers=admin_headers(settings))
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['api_key']}"}


def test_a_queued_job_is_cancelled_and_sends_nothing(client, settings, erun, emulator, service_id):
    key = topic_template(erun, service_id)
    seed_topic(erun, service_id, "news", key, "sports", 50)
    job = topic_job(erun, service_id, key, "sports")
    headers = _api_headers(client, settings, service_id)
    r = client.post(f"/v1/jobs/{job.job_id}/cancel", headers=headers)
    assert r.status_code == 200 and r.json()["state"] == "cancelled" and r.json()["finished_at"], r.text
    run_worker_until_idle(erun, [service_id])
    assert emulator.delivered() == 0
    final, progress = job_progress(erun, job.job_id)
    assert final.state == "cancelled" and progress.sent == 0 and progress.tasks_done == final.task_count
    again = client.post(f"/v1/jobs/{job.job_id}/cancel", headers=headers)  # idempotent
    assert again.status_code == 200 and again.json()["state"] == "cancelled"


def test_a_running_job_stops_at_the_next_page_with_true_counts(client, settings, erun, emulator, service_id, processes):
    key = topic_template(erun, service_id)
    seed_topic(erun, service_id, "news", key, "sports", 3000)
    job = topic_job(erun, service_id, key, "sports")
    headers = _api_headers(client, settings, service_id)
    emulator.latency(20)  # each push takes a while, so the job is still running when it is cancelled
    worker = processes.worker(service_id, lanes=1, NOTEE_FANOUT_FETCH_SIZE="100", NOTEE_FANOUT_SEND_CONCURRENCY="20")
    try:
        wait_for(lambda: job_progress(erun, job.job_id)[1].sent > 0, timeout=60, what="the first page")
        r = client.post(f"/v1/jobs/{job.job_id}/cancel", headers=headers)
        assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
        at_cancel = r.json()["sent"]
        wait_for(
            lambda: job_progress(erun, job.job_id)[1].tasks_done == job.task_count,
            timeout=60,
            what="the running task to stop",
        )
    finally:
        worker.stop(timeout=30)
        emulator.latency(0)
    final, progress = job_progress(erun, job.job_id)
    assert final.state == "cancelled"
    assert 0 < progress.sent < 3000
    assert progress.sent <= at_cancel + 100  # at most the page being sent when the cancel came (one lane)
    assert emulator.delivered() == progress.sent  # the counts say exactly what was sent


def test_a_dead_workers_task_of_a_cancelled_job_is_not_run_again(client, settings, erun, service_id):
    key = topic_template(erun, service_id)
    seed_topic(erun, service_id, "news", key, "sports", 10)
    job = topic_job(erun, service_id, key, "sports")
    claim = task_leases.claim(erun.sessions, owner="dead-worker", lease_s=30, services=[service_id])
    assert claim is not None and claim.job_id == job.job_id
    assert (
        client.post(f"/v1/jobs/{job.job_id}/cancel", headers=_api_headers(client, settings, service_id)).json()["state"]
        == "cancelled"
    )
    with erun.sessions.begin() as s:  # the worker died: its lease runs out
        s.execute(
            text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE job_id = :j"),
            {"j": job.job_id},
        )
    assert task_leases.claim(erun.sessions, owner="other", lease_s=30, services=[service_id]) is None
    with pytest.raises(task_leases.JobCancelled):  # had it lived, its next checkpoint would stop it
        from notee.core.vocabulary import PageCounts

        task_leases.checkpoint(
            erun.sessions, claim, current_slot=claim.current_slot, paging_state=None, counts=PageCounts(), lease_s=30
        )
    states = [t.state for t in jobs_sql.tasks(erun.sessions(), job.job_id)]
    assert states == ["cancelled"] * len(states)


def test_another_tenant_cannot_cancel_a_job(client, settings, erun, service_id):
    key = topic_template(erun, service_id)
    job = topic_job(erun, service_id, key, "sports")
    stranger = new_service(client, settings, "X" + secrets.token_hex(5).upper())
    r = client.post(f"/v1/jobs/{job.job_id}/cancel", headers=stranger)
    assert r.status_code == 404
    assert job_progress(erun, job.job_id)[0].state == "queued"
