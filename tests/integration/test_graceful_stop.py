"""SIGTERM while pushes wait to be retried, with real `notee worker` / `notee api` processes, the real
stores and the emulator (issue 14, item 8).

* A worker whose page sleeps on a Retry-After wakes at once, releases its task without advancing the
  checkpoint, and exits 0 within its grace; the next worker sends every device exactly once.
* The API answers an in-flight single send within its shutdown budget: what waited to be retried is
  dead-lettered, the invalid token found on the way is pruned, and the answer's counts say so; then
  it exits 0.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from notee.emulator.control import free_port
from notee.store import jobs_sql
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import job_progress, seed_topic, topic_job, topic_template
from tests.support.logscan import log_dir, remember_secret
from tests.support.registry import new_service, random_token
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
RETRY_AFTER_S = 60  # far longer than any grace below: a worker that slept it out would be caught
GRACE_S = 15


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def test_sigterm_wakes_a_worker_sleeping_on_a_retry_releases_unadvanced_and_exits(
    runtime, service_id, emulator, processes
):
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "retry", 150)  # one task, pages of 100
    job = topic_job(runtime, service_id, key, "retry")
    emulator.fault("fcm", 429, times=1_000_000, retry_after=RETRY_AFTER_S)
    env = {"NOTEE_FANOUT_FETCH_SIZE": "100", "NOTEE_FANOUT_STOP_GRACE_S": str(GRACE_S)}
    a = processes.worker(service_id, lanes=1, name="stop-worker-a", **env)
    wait_for(lambda: "retrying 100 message(s)" in a.output(), timeout=60, what="a page waiting to retry")
    with runtime.sessions() as s:
        [before] = jobs_sql.tasks(s, job.job_id)
    assert (before.state, before.pages, before.sent) == ("running", 0, 0)
    a.signal(signal.SIGTERM)
    try:
        code = a.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not exit within its {GRACE_S} s grace:\n{a.output()[-2000:]}")
    assert code == 0, a.output()[-2000:]
    assert "released on stop while a page waited to retry; checkpoint unchanged" in a.output()
    with runtime.sessions() as s:
        [after] = jobs_sql.tasks(s, job.job_id)
        letters = s.execute(text("SELECT COUNT(*) FROM dead_letter WHERE job_id = :j"), {"j": job.job_id}).scalar()
    assert after.state == "queued" and after.lease_owner is None
    assert (after.current_slot, after.pages, after.sent, after.targeted) == (before.current_slot, 0, 0, 0)
    assert letters == 0  # nothing given up: the page waits for the next owner

    emulator.reset()  # the storm is over
    processes.worker(service_id, lanes=1, name="stop-worker-b", **env)
    wait_for(lambda: job_progress(runtime, job.job_id)[0].state == "done", timeout=120, what="job done")
    _, progress = job_progress(runtime, job.job_id)
    assert (progress.sent, progress.failed) == (len(tokens), 0)
    assert set(deliveries_per_token(emulator, tokens, api="fcm").values()) == {1}


def test_sigterm_lets_an_in_flight_single_send_record_dead_letters_and_prunes(runtime, settings, service_id, emulator):
    port = free_port()
    env = {
        **os.environ,
        "NO_PROXY": "127.0.0.1,localhost",
        "PYTHONUNBUFFERED": "1",
        "NOTEE_API_SHUTDOWN_BUDGET_S": "10",
    }
    log_path = log_dir() / f"stop-api-{secrets.token_hex(3)}.log"
    out = open(log_path, "ab")  # noqa: SIM115 - the API process writes to it until it is stopped below
    api = subprocess.Popen(
        [sys.executable, "-m", "notee", "api", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    out.close()
    base = f"http://127.0.0.1:{port}"
    try:
        http = httpx.Client(base_url=base, timeout=30)
        wait_for(lambda: _answers(http), timeout=60, what="the API")
        auth = new_service(http, settings, service_id, credentials=True)  # FCM credentials: devices have a route
        remember_secret(auth["Authorization"].removeprefix("Bearer "))
        assert http.put("/v1/templates/SINGLE/alert", json={"title": "Hi", "body": "B"}, headers=auth).status_code in (
            200,
            201,
        )
        user = http.put("/v1/users/u-stop", json={"name": "x"}, headers=auth).json()["user_id"]
        waiting, dead = [random_token("wait") for _ in range(3)], random_token("dead")
        for token in (*waiting, dead):
            d = http.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS", "region": "KR"}, headers=auth)
            assert d.status_code in (200, 201), d.text
        for token in waiting:
            emulator.fault("fcm", 503, match=token, times=100, retry_after=RETRY_AFTER_S)
        emulator.fcm_tokens(UNREGISTERED=[dead])

        answer: dict[str, httpx.Response | BaseException] = {}

        def send() -> None:
            try:
                answer["r"] = httpx.post(
                    f"{base}/v1/users/{user}/send", json={"type": "alert"}, headers=auth, timeout=RETRY_AFTER_S * 3
                )
            except BaseException as exc:  # reported below
                answer["r"] = exc

        sender = threading.Thread(target=send)
        sender.start()
        wait_for(lambda: "retrying 3 message(s)" in log_path.read_text(), timeout=60, what="the send waiting to retry")
        api.send_signal(signal.SIGTERM)
        sender.join(timeout=30)
        assert not sender.is_alive(), "the in-flight send was not answered within the shutdown budget"
        try:
            code = api.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the API did not exit after its budget:\n{log_path.read_text()[-2000:]}")
        assert code == 0, log_path.read_text()[-2000:]  # SIGTERM is a clean stop: exit 0, also with a send in flight
    finally:
        _stop(api)
    r = answer["r"]
    assert isinstance(r, httpx.Response), r
    assert r.status_code == 200, r.text
    assert r.json() == {
        "devices": 4,
        "delivered": 0,
        "pruned": 1,
        "retried": 3,
        "failed": 3,
        "dry_run": False,
        "quiet_dropped": 0,
        "send_id": r.json()["send_id"],  # this send's id for its stats (docs/ENGAGEMENT.md)
    }
    with runtime.sessions() as s:
        letters = s.execute(
            text("SELECT device_token, reason FROM dead_letter WHERE service = :s"), {"s": service_id}
        ).all()
        devices = s.execute(text("SELECT COUNT(*) FROM device WHERE service = :s"), {"s": service_id}).scalar()
    assert sorted(t for t, _ in letters) == sorted(waiting)
    assert all("not retried, shutting down after 1 attempt(s)" in reason for _, reason in letters)
    assert devices == 3  # the unregistered token was pruned before the API exited


def _answers(http: httpx.Client) -> bool:
    try:
        return http.get("/healthz").status_code < 500
    except httpx.HTTPError:
        return False
