"""Delivery webhooks (issue 18 item 4; docs/WEBHOOKS.md): a service registers an HTTPS endpoint and
receives signed job.finished / job.failed / token.pruned / dead_letter.created events, at least once,
retried with backoff, without ever holding fan-out up. The receiver is a real local HTTPS server with
its own CA (tests/support/webhook_receiver.py) that checks every signature and fails on purpose.

The rules of this topic that need no server are in tests/unit/test_webhooks.py."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from notee.core.settings import Settings
from notee.domain import webhooks
from notee.domain.credentials import credentials_box
from notee.store import jobs_sql, webhooks_sql
from notee.store.runtime import Runtime
from tests.support.fanout import job_progress, seed_topic, topic_job, topic_template, wait_job
from tests.support.logscan import remember_secret
from tests.support.processes import subprocess_env
from tests.support.registry import admin_headers, new_service
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import Receiver, dispatch_until_idle, start_receiver

DOCS = Path(__file__).resolve().parents[2] / "docs" / "WEBHOOKS.md"


@pytest.fixture()
def erun(emu_runtime):
    """This module's name for the family's emulator-routed runtime (tests/support/emulator.py)."""
    return emu_runtime


@pytest.fixture()
def receiver(tmp_path) -> Iterator[Receiver]:
    yield from start_receiver(tmp_path / "receiver-tls")


def _api_headers(client, settings, service: str) -> dict[str, str]:
    r = client.post(f"/v1/admin/services/{service}/api-keys", json={"label": "t"}, headers=admin_headers(settings))
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['api_key']}"}


def _dispatcher_settings(receiver: Receiver, **extra: object) -> Settings:
    return Settings().model_copy(
        update={
            "webhook_ca_file": str(receiver.ca_file),
            "webhook_allow_private_addresses": True,
            "webhook_backoff_base_s": 0.05,
        }
        | extra
    )


def _register(runtime: Runtime, service: str, url: str, events: list[str] | None = None) -> webhooks.NewEndpoint:
    """An endpoint made through the domain with private addresses allowed (the local receiver)."""
    settings = runtime.settings.model_copy(update={"webhook_allow_private_addresses": True})
    with runtime.sessions.begin() as s:
        created = webhooks.create_endpoint(
            s, credentials_box(settings), settings, service, url=url, events=events, description=None
        )
    remember_secret(created.secret)
    return created


def _deliveries(runtime: Runtime, endpoint_id: str) -> list[webhooks_sql.Delivery]:
    with runtime.sessions() as s:
        endpoint = s.execute(
            text("SELECT service FROM webhook_endpoint WHERE endpoint_id = :e"), {"e": endpoint_id}
        ).scalar_one()
        return webhooks_sql.list_deliveries(s, endpoint, endpoint_id, limit=200)


def test_a_publish_sends_signed_events_retried_until_the_receiver_recovers_while_the_job_goes_on(
    client, settings, erun, emulator, service_id, receiver, processes
):
    key = topic_template(erun, service_id)
    tokens = seed_topic(erun, service_id, "news", key, "sports", 40)
    dead, unlucky = tokens[:2], tokens[2:4]
    emulator.fcm_tokens(UNREGISTERED=dead)  # pruned -> token.pruned
    for token in unlucky:  # the device's own rate (429, no Retry-After) at every attempt -> dead letters
        emulator.fault("fcm", 429, match=token, times=50)
    headers = _api_headers(client, settings, service_id)
    env = {
        "NOTEE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true",
        "NOTEE_WEBHOOK_CA_FILE": str(receiver.ca_file),
        "NOTEE_WEBHOOK_BACKOFF_BASE_S": "0.2",
    }
    api = processes.api(**env)
    created = httpx.post(f"{api.url}/v1/webhooks", json={"url": receiver.url}, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    endpoint = created.json()
    secret = endpoint["secret"]
    remember_secret(secret)  # the session's log scan fails the run if it appears in any log
    assert secret.startswith("whsec_") and len(secret) > 40
    receiver.secret = secret
    receiver.failing = True  # the receiver is down until the job is over
    dispatcher = processes.start("webhooks", ["webhooks"], subprocess_env(**env))
    worker = processes.worker(service_id, NOTEE_FANOUT_MAX_ATTEMPTS="2")
    r = httpx.post(
        f"{api.url}/v1/topics/news/sports/publish", json={"variables": {"name": "x"}}, headers=headers, timeout=30
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    job, progress = wait_job(erun, service_id, job_id, timeout=120, workers=[worker])
    assert job.state == "done" and progress.pruned == 2 and progress.failed == 2, progress
    # The job finished while every webhook attempt was failing: fan-out never waited for them.
    wait_for(lambda: len(receiver.received) >= 2, timeout=60, what="failed attempts at the receiver")
    assert receiver.events(answered=200) == []
    receiver.failing = False

    def pruned() -> list[str]:  # one token.pruned event per token: they may arrive one by one
        return sorted(t for e in receiver.events("token.pruned") for t in e["data"]["tokens"])

    def lettered() -> list[str]:
        return sorted(
            ltr["device_token"] for e in receiver.events("dead_letter.created") for ltr in e["data"]["letters"]
        )

    wait_for(
        lambda: receiver.events("job.finished") and len(pruned()) >= len(dead) and len(lettered()) >= len(unlucky),
        timeout=90,
        what="every event delivered",
    )
    finished = receiver.events("job.finished")
    assert [e["data"]["job_id"] for e in finished] == [job_id]
    assert (finished[0]["data"]["sent"], finished[0]["data"]["pruned"]) == (progress.sent, 2)
    assert pruned() == sorted(dead)
    assert lettered() == sorted(unlucky)
    assert all(r.signature_ok for r in receiver.received), "every request carries a valid signature"
    attempts = {}
    for got in receiver.received:
        attempts.setdefault(got.headers["Notee-Event-Id"], []).append(
            (got.status, got.headers["Notee-Delivery-Attempt"])
        )
    assert any(len(seen) >= 2 and seen[0][0] == 500 and seen[-1][0] == 200 for seen in attempts.values()), attempts
    listed = httpx.get(f"{api.url}/v1/webhooks/{endpoint['endpoint_id']}/deliveries", headers=headers, timeout=30)
    assert listed.status_code == 200
    items = listed.json()["items"]
    wait_for(
        lambda: all(
            d["state"] == "delivered"
            for d in httpx.get(
                f"{api.url}/v1/webhooks/{endpoint['endpoint_id']}/deliveries", headers=headers, timeout=30
            ).json()["items"]
        ),
        timeout=60,
        what="every delivery recorded delivered",
    )
    assert len(items) == len(attempts)  # one delivery per event for this endpoint
    # Nothing returns the secret again, and no process logged it.
    for url in (
        "/v1/webhooks",
        f"/v1/webhooks/{endpoint['endpoint_id']}",
        f"/v1/webhooks/{endpoint['endpoint_id']}/deliveries",
    ):
        assert secret not in httpx.get(f"{api.url}{url}", headers=headers, timeout=30).text
    dispatcher.stop(timeout=30)
    worker.stop(timeout=30)
    api.stop(timeout=30)
    for proc in (dispatcher, worker, api):
        assert secret not in proc.output() and secret.removeprefix("whsec_") not in proc.output()


def test_a_delivery_is_resent_with_the_same_event_id(client, settings, erun, service_id, receiver):
    new_service(client, settings, service_id)
    created = _register(erun, service_id, receiver.url)
    receiver.secret = created.secret
    with erun.sessions.begin() as s:
        assert webhooks_sql.emit(s, service_id, "token.pruned", {"tokens": ["t"], "user_ids": [], "reason": "x"}) == 1
    dispatch_until_idle(_dispatcher_settings(receiver))
    [first] = receiver.events()
    headers = _api_headers(client, settings, service_id)
    listing = client.get(f"/v1/webhooks/{created.endpoint.endpoint_id}/deliveries", headers=headers)
    assert listing.status_code == 200, listing.text
    [delivery] = listing.json()["items"]
    assert (delivery["state"], delivery["attempts"], delivery["last_status"]) == ("delivered", 1, 200)
    r = client.post(
        f"/v1/webhooks/{created.endpoint.endpoint_id}/deliveries/{delivery['delivery_id']}/resend", headers=headers
    )
    assert r.status_code == 202 and r.json()["state"] == "pending" and r.json()["resent_at"], r.text
    dispatch_until_idle(_dispatcher_settings(receiver))
    again = receiver.events()
    assert len(again) == 2 and again[1]["id"] == first["id"] and again[1] == first  # same event, same body
    assert all(r.signature_ok for r in receiver.received)


def test_a_delivery_failing_past_the_retry_window_is_failed_and_kept_listed(
    client, settings, erun, service_id, receiver
):
    new_service(client, settings, service_id)
    created = _register(erun, service_id, receiver.url)
    receiver.failing = True
    with erun.sessions.begin() as s:
        webhooks_sql.emit(s, service_id, "job.failed", {"job_id": "j"})
        # The event is 25 hours old: the next failed attempt is its last.
        s.execute(
            text("UPDATE webhook_delivery SET created_at = created_at - INTERVAL 25 HOUR WHERE endpoint_id = :e"),
            {"e": created.endpoint.endpoint_id},
        )
    dispatcher = dispatch_until_idle(_dispatcher_settings(receiver))
    [delivery] = _deliveries(erun, created.endpoint.endpoint_id)
    assert (delivery.state, delivery.attempts, delivery.last_status) == ("failed", 1, 500)
    # At least one: the dispatcher claims every tenant's due deliveries, and the shared outbox may hold
    # earlier runs' (over a day old: failed at their next attempt too).
    assert delivery.finished_at is not None and dispatcher.attempts["failed"] >= 1
    assert len(receiver.received) == 1  # not tried again


def test_failed_attempts_are_retried_with_backoff_until_delivered(client, settings, erun, service_id, receiver):
    new_service(client, settings, service_id)
    created = _register(erun, service_id, receiver.url)
    receiver.secret = created.secret
    receiver.fail_first = 3
    with erun.sessions.begin() as s:
        webhooks_sql.emit(s, service_id, "job.finished", {"job_id": "j"})

    def attempt_once() -> list[webhooks_sql.Delivery]:
        dispatch_until_idle(_dispatcher_settings(receiver))
        return _deliveries(erun, created.endpoint.endpoint_id)

    wait_for(lambda: attempt_once()[0].state == "delivered", timeout=60, what="delivered after 3 failures")
    [delivery] = _deliveries(erun, created.endpoint.endpoint_id)
    assert delivery.attempts == 4 and delivery.last_status == 200
    assert [r.status for r in receiver.received] == [500, 500, 500, 200]
    assert [r.headers["Notee-Delivery-Attempt"] for r in receiver.received] == ["1", "2", "3", "4"]
    assert len({r.headers["Notee-Event-Id"] for r in receiver.received}) == 1
    assert all(r.signature_ok for r in receiver.received)


def test_an_endpoint_resolving_to_a_private_address_is_refused_at_send_time(
    client, settings, erun, service_id, receiver
):
    """A name that resolves to loopback (as after a DNS change) is never called when private
    addresses are not allowed; the attempt records why and is retried like any failure."""
    new_service(client, settings, service_id)
    created = _register(erun, service_id, receiver.url.replace("127.0.0.1", "localhost"))
    with erun.sessions.begin() as s:
        webhooks_sql.emit(s, service_id, "job.finished", {"job_id": "j"})
    dispatch_until_idle(
        _dispatcher_settings(receiver, webhook_allow_private_addresses=False, webhook_backoff_base_s=60)
    )
    [delivery] = _deliveries(erun, created.endpoint.endpoint_id)
    assert delivery.state == "pending" and delivery.attempts == 1 and delivery.last_status is None
    assert "loopback address" in (delivery.last_error or "")
    assert receiver.received == []


def test_an_event_is_written_only_with_the_change_that_caused_it(client, settings, erun, service_id, receiver):
    key = topic_template(erun, service_id)
    created = _register(erun, service_id, receiver.url, events=["job.finished"])
    job = topic_job(erun, service_id, key, "sports")
    with erun.sessions() as s:  # a cancel rolled back: no event
        jobs_sql.cancel_job(s, service_id, job.job_id)
        s.rollback()
    assert _deliveries(erun, created.endpoint.endpoint_id) == []
    with erun.sessions.begin() as s:  # committed: exactly one
        jobs_sql.cancel_job(s, service_id, job.job_id)
    [delivery] = _deliveries(erun, created.endpoint.endpoint_id)
    assert delivery.event_type == "job.finished" and delivery.payload["data"]["state"] == "cancelled"
    assert job_progress(erun, job.job_id)[0].state == "cancelled"
    with erun.sessions.begin() as s:  # an event type the endpoint did not ask for: nothing written
        assert webhooks_sql.emit(s, service_id, "token.pruned", {"tokens": ["t"]}) == 0


def test_finished_deliveries_are_pruned_after_retention_and_pending_ones_kept(
    client, settings, erun, service_id, receiver
):
    from notee.usecases import retention

    new_service(client, settings, service_id)
    created = _register(erun, service_id, receiver.url)
    with erun.sessions.begin() as s:
        for _ in range(3):
            webhooks_sql.emit(s, service_id, "job.finished", {"job_id": "j"})
        ids = [d.delivery_id for d in webhooks_sql.list_deliveries(s, service_id, created.endpoint.endpoint_id)]
        s.execute(
            text(
                "UPDATE webhook_delivery SET state = 'delivered', finished_at = UTC_TIMESTAMP(6) - INTERVAL :d DAY"
                " WHERE delivery_id = :i"
            ),
            [{"i": ids[0], "d": settings.retention_days + 1}, {"i": ids[1], "d": 1}],
        )
    assert retention.prune_webhook_deliveries(erun) >= 1
    left = sorted(d.delivery_id for d in _deliveries(erun, created.endpoint.endpoint_id))
    assert left == sorted(ids[1:])


def test_endpoints_are_created_listed_and_deleted_and_the_secret_is_shown_once_and_stored_encrypted(
    client, settings, erun, service_id
):
    headers = new_service(client, settings, service_id)
    r = client.post(
        "/v1/webhooks",
        json={"url": "https://hooks.example.com/notee", "events": ["token.pruned"], "description": "crm"},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    body = r.json()
    secret = body.pop("secret")
    remember_secret(secret)
    assert body["events"] == ["token.pruned"] and body["url"] == "https://hooks.example.com/notee"
    endpoint_id = body["endpoint_id"]
    listed = client.get("/v1/webhooks", headers=headers)
    one = client.get(f"/v1/webhooks/{endpoint_id}", headers=headers)
    assert listed.json()["items"] == [body] and one.json() == body
    assert secret not in listed.text + one.text and "secret" not in listed.text + one.text
    with erun.sessions() as s:
        stored = s.execute(
            text("SELECT secret FROM webhook_endpoint WHERE endpoint_id = :e"), {"e": endpoint_id}
        ).scalar_one()
    assert secret.encode() not in bytes(stored) and secret.removeprefix("whsec_").encode() not in bytes(stored)
    assert webhooks.open_secret(credentials_box(settings), bytes(stored)) == secret  # encrypted, not hashed
    default = client.post("/v1/webhooks", json={"url": "https://hooks.example.com/all"}, headers=headers)
    remember_secret(default.json()["secret"])
    assert default.json()["events"] == ["job.finished", "job.failed", "token.pruned", "dead_letter.created"]
    assert client.delete(f"/v1/webhooks/{endpoint_id}", headers=headers).status_code == 204
    assert client.get(f"/v1/webhooks/{endpoint_id}", headers=headers).status_code == 404
    assert client.delete(f"/v1/webhooks/{endpoint_id}", headers=headers).status_code == 404


@pytest.mark.parametrize(
    ("body", "loc", "kind"),
    [
        ({"url": "http://hooks.example.com/x"}, ["body", "url"], "url_scheme"),  # plain http: dev setting only
        ({"url": "ftp://hooks.example.com/x"}, ["body", "url"], "url_scheme"),
        ({"url": "https://127.0.0.1/x"}, ["body", "url"], "url_address"),
        ({"url": "https://[::1]:8443/x"}, ["body", "url"], "url_address"),
        ({"url": "https://169.254.169.254/latest/meta-data"}, ["body", "url"], "url_address"),  # cloud metadata
        ({"url": "https://10.1.2.3/x"}, ["body", "url"], "url_address"),
        ({"url": "https://localhost:9000/x"}, ["body", "url"], "url_address"),
        ({"url": "https://[2002:7f00:1::]/x"}, ["body", "url"], "url_address"),  # 6to4 of 127.0.0.1
        ({"url": "https://[2002:a9fe:a9fe::1]/x"}, ["body", "url"], "url_address"),  # 6to4 of the metadata address
        ({"url": "https://[2001:0:808:808:8000:63bf:80ff:fffe]/x"}, ["body", "url"], "url_address"),  # Teredo
        ({"url": "https://2130706433/x"}, ["body", "url"], "url_address"),  # 127.0.0.1, as getaddrinfo reads it
        ({"url": "https://0x7f.1/x"}, ["body", "url"], "url_address"),
        ({"url": "https://127.0.0.1./x"}, ["body", "url"], "url_address"),
        ({"url": "https://user:pw@hooks.example.com/x"}, ["body", "url"], "url_userinfo"),
        ({"url": "https://hooks.example.com/x#frag"}, ["body", "url"], "url_fragment"),
        ({"url": "https:///nohost"}, ["body", "url"], "url_parsing"),
        ({"url": "https://hooks.example.com:99999/x"}, ["body", "url"], "url_parsing"),
        ({"url": "https://hooks.example.com/" + "a" * 2100}, ["body", "url"], "string_too_long"),
        ({"url": 7}, ["body", "url"], "string_type"),
        ({"url": "https://hooks.example.com/x", "events": ["job.started"]}, ["body", "events", "0"], "literal_error"),
        ({"url": "https://hooks.example.com/x", "events": []}, ["body", "events"], "too_short"),
        ({"url": "https://hooks.example.com/x", "secret": "mine"}, ["body", "secret"], "extra_forbidden"),
        ({"url": "https://hooks.example.com/x", "description": "a\nb"}, ["body", "description"], "value_error"),
    ],
)
def test_a_bad_endpoint_is_422_in_the_error_format_and_writes_nothing(
    client, settings, erun, service_id, body, loc, kind
):
    headers = new_service(client, settings, service_id)
    r = client.post("/v1/webhooks", json=body, headers=headers)
    assert r.status_code == 422, r.text
    detail = r.json()["error"]["details"][0]
    assert detail["loc"] == loc and detail["type"] == kind, detail
    with erun.sessions() as s:
        assert webhooks_sql.count_endpoints(s, service_id) == 0


def test_bad_delivery_queries_are_422_and_another_tenants_endpoint_is_404(client, settings, erun, service_id):
    headers = new_service(client, settings, service_id)
    endpoint = client.post("/v1/webhooks", json={"url": "https://hooks.example.com/x"}, headers=headers).json()
    remember_secret(endpoint["secret"])
    base = f"/v1/webhooks/{endpoint['endpoint_id']}/deliveries"
    for params in ({"state": "sent"}, {"limit": 0}, {"limit": 201}, {"before_id": 0}):
        r = client.get(base, params=params, headers=headers)
        assert r.status_code == 422 and r.json()["error"]["details"], (params, r.text)
    assert client.post(f"{base}/0/resend", headers=headers).status_code == 422
    assert client.post(f"{base}/123456789/resend", headers=headers).status_code == 404
    stranger = new_service(client, settings, "X" + secrets.token_hex(5).upper())
    for method, url in (
        ("GET", f"/v1/webhooks/{endpoint['endpoint_id']}"),
        ("GET", base),
        ("DELETE", f"/v1/webhooks/{endpoint['endpoint_id']}"),
    ):
        assert client.request(method, url, headers=stranger).status_code == 404
    assert client.get(f"/v1/webhooks/{endpoint['endpoint_id']}", headers=headers).status_code == 200


def test_a_service_has_at_most_the_configured_number_of_endpoints(client, settings, erun, service_id):
    headers = new_service(client, settings, service_id)
    for i in range(settings.webhook_max_endpoints):
        r = client.post("/v1/webhooks", json={"url": f"https://hooks.example.com/{i}"}, headers=headers)
        assert r.status_code == 201, r.text
        remember_secret(r.json()["secret"])
    r = client.post("/v1/webhooks", json={"url": "https://hooks.example.com/one-more"}, headers=headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"


def test_the_verification_snippet_of_the_docs_accepts_a_real_request_and_rejects_tampering(
    client, settings, erun, service_id, receiver
):
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert len(blocks) == 1
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(DOCS), "exec"), namespace)  # the block exactly as documented
    verify = namespace["verify_notee_signature"]
    new_service(client, settings, service_id)
    created = _register(erun, service_id, receiver.url)
    with erun.sessions.begin() as s:
        webhooks_sql.emit(s, service_id, "token.pruned", {"tokens": ["tök-1"], "user_ids": [], "reason": "x"})
    dispatch_until_idle(_dispatcher_settings(receiver))
    [got] = receiver.received
    header = got.headers["Notee-Signature"]
    assert verify(created.secret, header, got.body) is True
    assert verify(created.secret, header, got.body.replace(b"t\xc3\xb6k-1", b"t\xc3\xb6k-2")) is False
    assert verify("whsec_wrong", header, got.body) is False
    t = int(header.split(",")[0].removeprefix("t="))
    old = webhooks.signature(created.secret, t - 3600, got.body)
    assert verify(created.secret, old, got.body) is False  # a replay outside the tolerance
    assert verify(created.secret, "garbage", got.body) is False
