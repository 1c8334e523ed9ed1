"""No silent success (issue 13, items 4 and 6), against MariaDB, Cassandra and the emulator:

- the log provider only for a service an admin put in ``dry_run`` delivery mode, whose sends and
  jobs say ``dry_run: true``;
- a device of a platform the service has no credentials for is a counted failure ``no_credentials``
  (not sent, not pruned); a send or job where no device can be sent fails once with a clear error;
- a provider configuration error fails the whole job once, keeping the dead letters and pruned
  tokens collected before it;
- the emulator rerouting every push is announced by every process and shown by ``/healthz``.
The rules of this topic that need no server are in tests/unit/test_delivery_truth.py.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import pytest
from sqlalchemy import text

from notee.core.errors import ProviderConfigError
from notee.providers.base import Message
from notee.store import deadletter
from tests.support.fanout import job_progress, run_worker_until_idle, seed_topic, topic_job
from tests.support.registry import (
    admin_headers,
    apns_credentials,
    fcm_service_account,
    new_service,
    new_template,
    new_user,
    random_token,
)


def _set_mode(client, settings, service: str, mode: str):
    return client.patch(f"/v1/admin/services/{service}", json={"delivery_mode": mode}, headers=admin_headers(settings))


def _devices(client, headers, user) -> list[str]:
    return sorted(d["token"] for d in client.get(f"/v1/users/{user}/devices", headers=headers).json()["items"])


def _letters(runtime, service: str) -> list:
    with runtime.sessions() as s:
        return deadletter.list_for_service(s, service)


def test_delivery_mode_is_live_by_default_and_an_admin_sets_it(client, settings, service_id):
    new_service(client, settings, service_id)
    admin = admin_headers(settings)
    assert client.get(f"/v1/admin/services/{service_id}", headers=admin).json()["delivery_mode"] == "live"
    r = _set_mode(client, settings, service_id, "dry_run")
    assert r.status_code == 200, r.text
    assert r.json()["delivery_mode"] == "dry_run"
    assert client.get(f"/v1/admin/services/{service_id}", headers=admin).json()["delivery_mode"] == "dry_run"
    bad = _set_mode(client, settings, service_id, "maybe")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"
    assert client.get(f"/v1/admin/services/{service_id}", headers=admin).json()["delivery_mode"] == "dry_run"
    assert client.patch(f"/v1/admin/services/{service_id}", json={"delivery_mode": "live"}).status_code == 401
    assert _set_mode(client, settings, "NOPE" + service_id[:4], "live").status_code == 404


def test_a_service_key_cannot_change_its_delivery_mode(client, settings, service_id):
    headers = new_service(client, settings, service_id)
    r = client.patch(f"/v1/admin/services/{service_id}", json={"delivery_mode": "dry_run"}, headers=headers)
    assert r.status_code in (401, 403)
    assert (
        client.get(f"/v1/admin/services/{service_id}", headers=admin_headers(settings)).json()["delivery_mode"]
        == "live"
    )


def test_dry_run_single_send_reaches_no_provider_and_says_so(client, settings, service_id, emu_app, caplog):
    headers = new_service(client, settings, service_id)
    assert _set_mode(client, settings, service_id, "dry_run").status_code == 200
    tokens = [random_token("a"), random_token("i")]
    user = new_user(client, headers, devices=[(tokens[0], "AOS"), (tokens[1], "IOS")])
    new_template(client, headers, "SINGLE", "hi", title="Hi {{name}}", body="b")
    caplog.set_level(logging.INFO)
    r = client.post(f"/v1/users/{user}/send", json={"type": "hi", "variables": {"name": "A"}}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "devices": 2,
        "delivered": 2,
        "pruned": 0,
        "retried": 0,
        "failed": 0,
        "dry_run": True,
        "quiet_dropped": 0,
        "send_id": r.json()["send_id"],  # this send's id for its stats (docs/ENGAGEMENT.md)
    }
    assert emu_app.stats()["counts"] == {}  # nothing left the process
    assert "dry run" in caplog.text


def test_dry_run_topic_job_says_dry_run_and_sends_nothing(client, settings, runtime, service_id, emulator, emu_runtime):
    headers = new_service(client, settings, service_id)
    assert _set_mode(client, settings, service_id, "dry_run").status_code == 200
    token = random_token("t")
    user = new_user(client, headers, devices=[(token, "AOS")])
    new_template(client, headers, "TOPIC", "news", title="News", body="b")
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    job_id = client.post("/v1/topics/news/all/publish", headers=headers).json()["job_id"]
    # the mode is the job's, taken when it was made: switching back before it runs changes nothing
    assert _set_mode(client, settings, service_id, "live").status_code == 200
    run_worker_until_idle(emu_runtime, [service_id])
    status = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert (status["state"], status["sent"], status["failed"], status["dry_run"]) == ("done", 1, 0, True)
    assert emulator.deliveries(token)["attempts"] == 0
    live_job = client.post("/v1/topics/news/all/publish", headers={**headers, "Idempotency-Key": "2"}).json()
    assert client.get(f"/v1/jobs/{live_job['job_id']}", headers=headers).json()["dry_run"] is False


def test_device_of_a_platform_without_credentials_is_a_counted_failure(client, settings, runtime, service_id, emu_app):
    headers = new_service(client, settings, service_id)
    r = client.put(
        f"/v1/admin/services/{service_id}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text
    ios, aos = random_token("i"), random_token("a")
    user = new_user(client, headers, devices=[(ios, "IOS"), (aos, "AOS")])
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="b")
    r = client.post(f"/v1/users/{user}/send", json={"type": "hi"}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "devices": 2,
        "delivered": 1,
        "pruned": 0,
        "retried": 0,
        "failed": 1,
        "dry_run": False,
        "quiet_dropped": 0,
        "send_id": r.json()["send_id"],  # this send's id for its stats (docs/ENGAGEMENT.md)
    }
    assert emu_app.deliveries(ios)["apns"] == 1
    assert emu_app.deliveries(aos)["attempts"] == 0  # not sent
    assert _devices(client, headers, user) == sorted([ios, aos])  # not pruned
    [letter] = _letters(runtime, service_id)
    assert (letter.device_token, letter.reason, letter.provider) == (aos, "no_credentials", "none")


def test_single_send_where_no_device_has_credentials_fails_once(client, settings, runtime, service_id, emu_app):
    headers = new_service(client, settings, service_id)
    tokens = [random_token("a"), random_token("i")]
    user = new_user(client, headers, devices=[(tokens[0], "AOS"), (tokens[1], "IOS")])
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="b")
    r = client.post(f"/v1/users/{user}/send", json={"type": "hi"}, headers=headers)
    assert r.status_code == 424, r.text
    err = r.json()["error"]
    assert err["code"] == "provider_config" and "no provider credentials" in err["message"]
    assert emu_app.stats()["counts"] == {}
    assert _devices(client, headers, user) == sorted(tokens)
    assert _letters(runtime, service_id) == []


def test_topic_job_where_no_device_has_credentials_fails_once(
    client, settings, runtime, service_id, emulator, emu_runtime
):
    headers = new_service(client, settings, service_id)
    r = client.put(
        f"/v1/admin/services/{service_id}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200
    tokens = [random_token("a") for _ in range(3)]
    user = new_user(client, headers, devices=[(t, "AOS") for t in tokens])  # all Android, only APNs keys
    new_template(client, headers, "TOPIC", "news", title="News", body="b")
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    job_id = client.post("/v1/topics/news/all/publish", headers=headers).json()["job_id"]
    run_worker_until_idle(emu_runtime, [service_id])
    status = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert (status["state"], status["sent"], status["failed"], status["pruned"]) == ("failed", 0, 3, 0), status
    assert "no provider credentials" in status["error"] and "fcm" in status["error"].lower()
    assert emulator.stats()["counts"] == {}
    assert _devices(client, headers, user) == sorted(tokens)


def test_config_error_keeps_what_was_collected_before_it(client, settings, runtime, service_id, emulator, emu_runtime):
    """Android first (FCM: one dead token, one permanent failure, one delivered), then iOS, where
    APNs rejects the key: the error stops the send, the pruned token and the dead letter stay."""
    from notee.providers.routing import ProviderSet
    from notee.usecases.deliver import DeliveryAborted, DeliveryOptions, deliver
    from notee.usecases.delivery_store import load_service_credentials

    headers = new_service(client, settings, service_id, credentials=True)
    r = client.put(
        f"/v1/admin/services/{service_id}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200
    dead, bad, fine, ios = (random_token(p) for p in ("dead", "bad", "fine", "ios"))
    user = new_user(client, headers, devices=[(dead, "AOS"), (bad, "AOS"), (fine, "AOS"), (ios, "IOS")])
    emulator.fcm_tokens(UNREGISTERED=[dead])
    emulator.fault("fcm", 401, match=bad, code="THIRD_PARTY_AUTH_ERROR")
    emulator.fault("apns", 403, code="InvalidProviderToken", times=10)
    messages = [Message(t, os_, "T", "B") for t, os_ in ((dead, "AOS"), (bad, "AOS"), (fine, "AOS"), (ios, "IOS"))]

    async def run():
        providers = ProviderSet(emu_runtime.settings)
        try:
            creds = await asyncio.to_thread(load_service_credentials, emu_runtime, service_id)
            return await deliver(emu_runtime, providers, service_id, messages, DeliveryOptions(credentials=creds))
        finally:
            await providers.close()

    with pytest.raises(DeliveryAborted) as err:
        asyncio.run(run())
    assert isinstance(err.value, ProviderConfigError) and "APNs" in err.value.message
    partial = err.value.partial
    assert (partial.delivered, partial.invalid_tokens, [t for t, _ in partial.failed]) == (1, [dead], [bad])
    assert _devices(client, headers, user) == sorted([bad, fine, ios])  # the dead token was still pruned
    [letter] = _letters(runtime, service_id)
    assert (letter.device_token, letter.reason) == (bad, "THIRD_PARTY_AUTH_ERROR")


def test_config_error_fails_the_whole_job_once(client, settings, runtime, service_id, emulator, emu_runtime):
    """Two tasks (two slots); APNs rejects the key on the first page: the job fails with the error,
    the other task is never sent, the emulator saw exactly one rejected request per device of that page."""
    from notee.store import jobs_sql
    from tests.support.fanout import topic_template

    key = topic_template(runtime, service_id, "news", title="Hi")
    r = client.put(
        f"/v1/admin/services/{service_id}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", 29_997)  # the next rows straddle slots 0/1
    tokens = seed_topic(runtime, service_id, "news", key, "all", 4, os="IOS")
    job = topic_job(runtime, service_id, key, "all")
    assert job.task_count == 2
    emulator.fault("apns", 403, code="InvalidProviderToken", times=100)
    run_worker_until_idle(emu_runtime, [service_id], lanes=1)
    row, progress = job_progress(runtime, job.job_id)
    assert row.state == "failed" and "APNs rejected" in row.error, row
    with runtime.sessions() as s:
        tasks = jobs_sql.tasks(s, job.job_id)
    assert [t.state for t in tasks] == ["failed", "failed"]
    assert progress.sent == 0
    assert emulator.stats()["counts"].get("apns.recv") == 2  # one page of 2 devices, never the other task's
    assert sum(emulator.deliveries(t)["attempts"] for t in tokens) == 2


def test_a_requeued_job_resends_none_of_the_devices_its_configuration_error_page_had_done(
    client, settings, runtime, service_id, emulator, emu_runtime
):
    """One page: three Android devices (FCM delivers two; the third is answered 503, to be retried),
    then an iOS one, where APNs rejects the key: the job fails with the two counted. Once the key is
    fixed and the job requeued, the page sends only the two not done: each device got exactly one
    push, and the job counts each device once. Before, the requeued page was sent whole again (the
    two delivered devices pushed twice, counted twice)."""
    from notee.store import jobs_sql
    from tests.support.fanout import topic_template

    key = topic_template(runtime, service_id, "news", title="Hi")
    r = client.put(
        f"/v1/admin/services/{service_id}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text
    android = seed_topic(runtime, service_id, "news", key, "all", 3)
    [ios] = seed_topic(runtime, service_id, "news", key, "all", 1, os="IOS", prefix=f"{service_id}-ios-")
    job = topic_job(runtime, service_id, key, "all")
    assert job.task_count == 1
    emulator.fault("fcm", 503, match=android[2], times=1)  # waits to be retried: not done when the page stops
    emulator.fault("apns", 403, match=ios, code="InvalidProviderToken", times=1)
    run_worker_until_idle(emu_runtime, [service_id], lanes=1, fetch_size=100)
    row, progress = job_progress(runtime, job.job_id)
    assert row.state == "failed" and "APNs rejected" in row.error, row
    assert (progress.sent, progress.failed) == (2, 0)  # FCM's group went first, then APNs stopped the page

    with runtime.sessions.begin() as s:  # the key is fixed (the fault was used up): an operator requeues
        assert jobs_sql.requeue_failed(s, job.job_id) == 1
    run_worker_until_idle(emu_runtime, [service_id], lanes=1, fetch_size=100)
    row, progress = job_progress(runtime, job.job_id)
    assert row.state == "done", row
    assert {t: emulator.deliveries(t)["fcm"] for t in android} == dict.fromkeys(android, 1)
    assert emulator.deliveries(android[2])["attempts"] == 2  # answered 503, then delivered after the requeue
    assert emulator.deliveries(ios)["attempts"] == 2  # rejected once, then delivered
    assert (progress.targeted, progress.sent, progress.failed, progress.pruned) == (4, 4, 0, 0), progress


def test_healthz_shows_the_emulator(client, settings):
    body = client.get("/healthz").json()
    assert body["emulator_url"] == settings.emulator_url  # None unless this session routes to an emulator


def test_healthz_shows_an_emulator_reroute(settings, runtime):
    from fastapi.testclient import TestClient

    from notee.api.app import create_app

    rerouted = settings.model_copy(update={"emulator_url": "https://127.0.0.1:9"})
    with TestClient(create_app(rerouted, runtime=runtime)) as c:
        r = c.get("/healthz")
    assert r.json()["emulator_url"] == "https://127.0.0.1:9"


@pytest.mark.parametrize("process", ["api", "worker", "scheduler"])
def test_every_process_warns_at_start_when_the_emulator_reroutes_pushes(process, tmp_path):
    """Each real process, started with NOTEE_EMULATOR_URL, logs a WARNING naming the URL at start."""
    import os
    import signal
    import time

    from notee.emulator.control import free_port

    # scoped so the real processes touch no other test's rows: the worker claims only a tenant that
    # does not exist, the scheduler ticks in its own namespace
    env = {
        **os.environ,
        "NOTEE_EMULATOR_URL": "https://127.0.0.1:9",
        "NOTEE_API_PORT": str(free_port()),
        "NOTEE_SCHEDULER_NAMESPACE": f"warn-{os.getpid()}-{time.monotonic_ns()}",
        "NOTEE_SCHEDULER_GRACE_MINUTES": "0",
    }
    args = {"api": ["api"], "worker": ["worker", "--service", "ZNOBODY"], "scheduler": ["scheduler"]}[process]
    log_path = tmp_path / "out.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "notee", *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "WARNING" not in log_path.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    lines = [ln for ln in log_path.read_text().splitlines() if "WARNING" in ln and "emulator" in ln]
    assert lines and "https://127.0.0.1:9" in lines[0], log_path.read_text()[-2000:]


def test_dead_letter_reason_no_credentials_is_not_pruned_by_the_worker(
    client, settings, runtime, service_id, emulator, emu_runtime
):
    """A topic job mixing platforms with only APNs keys: iOS sent, Android counted failed, none pruned."""
    headers = new_service(client, settings, service_id)
    assert (
        client.put(
            f"/v1/admin/services/{service_id}/credentials/apns",
            json=apns_credentials(),
            headers=admin_headers(settings),
        ).status_code
        == 200
    )
    ios, aos = random_token("i"), random_token("a")
    user = new_user(client, headers, devices=[(ios, "IOS"), (aos, "AOS")])
    new_template(client, headers, "TOPIC", "news", title="News", body="b")
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code in (200, 201)
    job_id = client.post("/v1/topics/news/all/publish", headers=headers).json()["job_id"]
    run_worker_until_idle(emu_runtime, [service_id])
    status = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert (status["state"], status["sent"], status["failed"], status["pruned"]) == ("done", 1, 1, 0), status
    assert emulator.deliveries(ios)["apns"] == 1 and emulator.deliveries(aos)["attempts"] == 0
    assert _devices(client, headers, user) == sorted([ios, aos])
    with runtime.sessions() as s:
        reasons = s.execute(text("SELECT device_token, reason FROM dead_letter WHERE job_id = :j"), {"j": job_id}).all()
    assert [(t, r) for t, r in reasons] == [(aos, "no_credentials")]


def test_fcm_credentials_helper_is_valid(client, settings, service_id):
    new_service(client, settings, service_id)
    r = client.put(
        f"/v1/admin/services/{service_id}/credentials/fcm",
        json={"service_account": fcm_service_account()},
        headers=admin_headers(settings),
    )
    assert r.status_code == 200 and r.json() == {"fcm": True, "apns": False, "webpush": False}


def test_topic_job_of_a_service_without_any_credentials_fails_once(
    client, settings, runtime, service_id, emulator, emu_runtime
):
    """No credentials at all: the first page fails the whole job (both tasks) with a clear error; the
    emulator receives nothing and no device is pruned or dead-lettered."""
    from notee.store import jobs_sql
    from tests.support.registry import make_service, make_template

    make_service(runtime, service_id)  # no credentials
    key = make_template(runtime, service_id, "TOPIC", "news", title="Hi")
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", 29_997)  # the next rows straddle slots 0/1
    seed_topic(runtime, service_id, "news", key, "all", 4)
    job = topic_job(runtime, service_id, key, "all")
    assert job.task_count == 2
    run_worker_until_idle(emu_runtime, [service_id], lanes=1)
    row, progress = job_progress(runtime, job.job_id)
    assert row.state == "failed" and "no provider credentials" in row.error, row
    with runtime.sessions() as s:
        assert [t.state for t in jobs_sql.tasks(s, job.job_id)] == ["failed", "failed"]
    assert (progress.sent, progress.pruned) == (0, 0)
    assert emulator.stats()["counts"] == {}
    assert _letters(runtime, service_id) == []
