"""Operators can act (issue 14, item 3): a failed job is resumed from its checkpoints (`notee jobs
requeue`, the admin API); dead letters are listed and replayed (tenant API, admin API; the CLI, which
goes through them, in tests/integration/test_cli_contract.py), never across tenants; a user's dead letters are
deleted with the user (not a shared device's)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from sqlalchemy import text

from notee.core.errors import ProviderConfigError
from notee.core.vocabulary import PageCounts
from notee.providers.base import Message
from notee.store import jobs_sql
from notee.worker.lanes import Worker, WorkerOptions
from notee.worker.outage import OutageBackoff
from tests.support.cli import notee
from tests.support.fanout import job_progress, seed_topic, topic_job, topic_template
from tests.support.registry import admin_headers, new_service, new_template, new_user, random_token


class Sender:
    """A SendPage recording tokens; ``fail_after`` pages, it raises ProviderConfigError (the job fails)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.fail_after = fail_after
        self.sent: Counter[str] = Counter()
        self.pages = 0

    async def __call__(self, service: str, job_id: str, messages: list[Message], dry_run: bool = False) -> PageCounts:
        if self.fail_after is not None and self.pages >= self.fail_after:
            raise ProviderConfigError("FCM rejected the credentials (HTTP 401)")
        self.pages += 1
        self.sent.update(m.device_token for m in messages)
        return PageCounts(targeted=len(messages), sent=len(messages))


def _run_until_idle(runtime, service: str, sender: Sender) -> None:
    async def go() -> None:
        worker = Worker(runtime, sender, WorkerOptions(lanes=1, services=[service], fetch_size=100))
        worker.backoff = OutageBackoff(base_s=0.01, cap_s=0.05)
        await worker.run(until_idle=True)

    asyncio.run(go())


def test_a_failed_job_is_requeued_and_resumes_from_its_checkpoint(client, runtime, settings, service_id):
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "rq", 250)
    job = topic_job(runtime, service_id, key, "rq")
    first = Sender(fail_after=1)
    _run_until_idle(runtime, service_id, first)
    failed, progress = job_progress(runtime, job.job_id)
    assert failed.state == "failed" and progress.sent == 100 and "credentials" in (failed.error or "")

    r = client.post(f"/v1/admin/jobs/{uuid.uuid4()}/requeue", headers=admin_headers(settings))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.post(f"/v1/admin/jobs/{job.job_id}/requeue", headers=admin_headers(settings))
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["sent"], r.json()["error"]) == ("running", 100, None)
    r = client.post(f"/v1/admin/jobs/{job.job_id}/requeue", headers=admin_headers(settings))
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"  # only a failed job

    rest = Sender()
    _run_until_idle(runtime, service_id, rest)
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done" and progress.sent == 250 and done.error is None
    both = first.sent + rest.sent
    assert set(both) == set(tokens) and set(both.values()) == {1}  # resumed at the checkpoint, nothing twice


def test_notee_jobs_requeue_cli(runtime, service_id, admin_env):
    """`notee jobs requeue` goes through the admin API (NOTEE_URL, NOTEE_ADMIN_TOKEN), as a subprocess."""
    key = topic_template(runtime, service_id)
    seed_topic(runtime, service_id, "news", key, "cli", 120)
    job = topic_job(runtime, service_id, key, "cli")
    _run_until_idle(runtime, service_id, Sender(fail_after=0))
    assert job_progress(runtime, job.job_id)[0].state == "failed"
    result = notee("jobs", "requeue", job.job_id, env=admin_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"job {job.job_id} requeued: running, 0 of 1 tasks done, 0 sent so far")
    again = notee("jobs", "requeue", job.job_id, "--json", env=admin_env)
    assert again.returncode == 1 and "only a failed job" in again.stderr  # a conflict: 1
    unknown = notee("jobs", "requeue", str(uuid.uuid4()), env=admin_env)
    assert unknown.returncode == 3, unknown.stderr  # not found
    keyless = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"}
    assert notee("jobs", "requeue", job.job_id, env=keyless).returncode == 4  # no credentials: unauthorized
    _run_until_idle(runtime, service_id, Sender())
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done" and progress.sent == 120
    with runtime.sessions() as s:
        assert [t.attempts for t in jobs_sql.tasks(s, job.job_id)] == [1]


def _dead_letter_by_single_send(client, headers, emulator, token: str, *, also: list[tuple[str, str]] = ()) -> str:
    """A real dead letter: a single send to ``token`` while the provider answers 429 every time."""
    user = new_user(client, headers, devices=[(token, "AOS"), *also])
    emulator.fault("fcm", 429, match=token, times=100, retry_after=0)
    r = client.post(f"/v1/users/{user}/send", json={"type": "hi"}, headers=headers)
    assert r.status_code == 200 and r.json()["failed"] == 1, r.text
    return user


def test_dead_letters_are_listed_and_replayed_by_their_tenant_only(client, runtime, settings, emu_app):
    a, b = "A" + uuid.uuid4().hex[:8].upper(), "B" + uuid.uuid4().hex[:8].upper()
    a_auth, b_auth = (
        new_service(client, settings, a, credentials=True),
        new_service(client, settings, b, credentials=True),
    )
    new_template(client, b_auth, "SINGLE", "hi", title="Hi", body="there")
    ok, gone = random_token("ok"), random_token("gone")
    _dead_letter_by_single_send(client, b_auth, emu_app, ok)
    _dead_letter_by_single_send(client, b_auth, emu_app, gone)

    listed = client.get("/v1/dead-letters", headers=b_auth).json()
    assert {i["device_token"] for i in listed["items"]} == {ok, gone} and listed["next_before_id"] is None
    assert all(i["payload"]["title"] == "Hi" and "QUOTA_EXCEEDED" in i["reason"] for i in listed["items"])
    ids = [i["id"] for i in listed["items"]]
    page = client.get("/v1/dead-letters", params={"limit": 1}, headers=b_auth).json()
    assert [i["id"] for i in page["items"]] == [max(ids)] and page["next_before_id"] == max(ids)
    older = client.get("/v1/dead-letters", params={"before_id": max(ids)}, headers=b_auth).json()
    assert [i["id"] for i in older["items"]] == [min(ids)]
    # The API's one cursor style: next_cursor in, cursor out (before_id stays, deprecated).
    assert page["next_cursor"] is not None and listed["next_cursor"] is None
    by_cursor = client.get("/v1/dead-letters", params={"limit": 1, "cursor": page["next_cursor"]}, headers=b_auth)
    assert [i["id"] for i in by_cursor.json()["items"]] == [min(ids)]
    forged = client.get("/v1/dead-letters", params={"cursor": "WyJ4Il0="}, headers=b_auth)  # ["x"]
    assert forged.status_code == 422 and forged.json()["error"]["details"][0]["type"] == "invalid_cursor"

    # Another tenant sees none of them and cannot replay them.
    assert client.get("/v1/dead-letters", headers=a_auth).json()["items"] == []
    r = client.post("/v1/dead-letters/replay", json={"ids": ids}, headers=a_auth)
    assert r.status_code == 200 and r.json() == {"replayed": 0, "delivered": 0, "pruned": 0, "failed": 0}
    assert emu_app.deliveries(ok)["fcm"] == 0

    emu_app.reset()  # the provider recovered; one token is now unregistered
    emu_app.fcm_tokens(UNREGISTERED=[gone])
    r = client.post("/v1/dead-letters/replay", json={"ids": ids}, headers=b_auth)
    assert r.status_code == 200 and r.json() == {"replayed": 2, "delivered": 1, "pruned": 1, "failed": 0}
    assert emu_app.deliveries(ok)["fcm"] == 1
    assert client.get("/v1/dead-letters", headers=b_auth).json()["items"] == []
    r = client.post("/v1/dead-letters/replay", json={"ids": [0]}, headers=b_auth)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"


def test_a_letter_that_fails_again_is_recorded_again_never_lost(client, runtime, settings, service_id, emu_app):
    headers = new_service(client, settings, service_id, credentials=True)
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="there")
    token = random_token("still")
    _dead_letter_by_single_send(client, headers, emu_app, token)
    r = client.post("/v1/dead-letters/replay", headers=headers)  # provider still failing: the fault remains
    assert r.json() == {"replayed": 1, "delivered": 0, "pruned": 0, "failed": 1}
    [letter] = client.get("/v1/dead-letters", headers=headers).json()["items"]
    assert letter["device_token"] == token and "gave up after" in letter["reason"]


def test_admin_lists_and_replays_any_services_dead_letters(client, runtime, settings, service_id, emu_app):
    headers = new_service(client, settings, service_id, credentials=True)
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="there")
    token = random_token("adm")
    _dead_letter_by_single_send(client, headers, emu_app, token)
    admin = admin_headers(settings)
    r = client.get(f"/v1/admin/services/{service_id}/dead-letters", headers=admin)
    assert r.status_code == 200 and [i["device_token"] for i in r.json()["items"]] == [token]
    assert client.get("/v1/admin/services/NOSUCHSVC/dead-letters", headers=admin).status_code == 404
    emu_app.reset()
    r = client.post(f"/v1/admin/services/{service_id}/dead-letters/replay", json={}, headers=admin)
    assert r.status_code == 200 and r.json()["delivered"] == 1
    assert emu_app.deliveries(token)["fcm"] == 1


def test_dead_letters_are_deleted_with_their_user_but_not_a_shared_devices(
    client, runtime, settings, service_id, emu_app
):
    headers = new_service(client, settings, service_id, credentials=True)
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="there")
    own, shared = random_token("own"), random_token("shared")
    user = _dead_letter_by_single_send(client, headers, emu_app, own, also=[(shared, "AOS")])
    emu_app.fault("fcm", 429, match=shared, times=100, retry_after=0)
    other = new_user(client, headers, devices=[(shared, "AOS")])
    r = client.post(f"/v1/users/{other}/send", json={"type": "hi"}, headers=headers)
    assert r.json()["failed"] == 1
    tokens = lambda: sorted(i["device_token"] for i in client.get("/v1/dead-letters", headers=headers).json()["items"])  # noqa: E731
    assert tokens() == sorted([own, shared])
    assert client.delete(f"/v1/users/{user}", headers=headers).status_code == 204
    assert tokens() == [shared]  # the other user still holds that device
    assert client.delete(f"/v1/users/{other}", headers=headers).status_code == 204
    assert tokens() == []
    with runtime.sessions() as s:
        left = s.execute(text("SELECT COUNT(*) FROM dead_letter WHERE service = :s"), {"s": service_id}).scalar()
    assert left == 0
