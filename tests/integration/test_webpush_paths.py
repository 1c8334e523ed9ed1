"""Web Push on the shared delivery paths (issue 32): a WEB device travels the same path as an FCM or
APNs one, so every path is tested here for browsers, on the real stores, with the emulator's push
services decrypting each push: the assertions are on the plaintext the service worker would read.

Cycles, quiet hours (hold and drop), local-time delivery, send_at, TTL/Urgency from a publish's TTL
and priority, webhooks (the job's events and their counts), audiences (platforms, the platform
filter), rotation and deletion, 404/410 pruning in MySQL and Cassandra, a recipient's text too large
for a browser discovered when it is sent, and the circuit breaker per push service (one push
service down does not stop the others)."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client import REGISTRY
from sqlalchemy import text

from notee.core import clock
from notee.core.errors import ProviderUnavailable
from notee.core.vocabulary import FcmCredentials, ProviderCredentials, WebPushCredentials
from notee.domain import webhooks
from notee.domain.credentials import credentials_box
from notee.providers import apns, fcm
from notee.providers import webpush as web
from notee.providers.base import Message
from notee.providers.breaker import CircuitBreaker
from notee.providers.routing import ProviderSet
from notee.store import webhooks_sql
from notee.store.mysql import db_now
from notee.usecases import planning, publish
from notee.usecases.deliver import DeliveryOptions, deliver
from notee.usecases.delivery_result import HandedBack
from notee.usecases.job_requests import TopicPublish
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import run_worker_until_idle
from tests.support.logscan import remember_secret
from tests.support.registry import make_service, random_token, shared_service_account
from tests.support.scheduler import scheduler
from tests.support.tcp_switch import TcpSwitch
from tests.support.webpush import browser, token_of, vapid

pytestmark = pytest.mark.tenant(credentials=True, timezone="Asia/Seoul")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _user(client, headers, *, name="w", quiet=None, timezone=None, locale=None):
    body = {"name": name} | ({"quiet_hours": quiet} if quiet else {}) | ({"timezone": timezone} if timezone else {})
    body |= {"locale": locale} if locale else {}
    r = client.put(f"/v1/users/w-{random_token()[-12:]}", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()["user_id"]


def _subscribe(client, headers, user, topic="all", type_="news"):
    r = client.put(f"/v1/users/{user}/subscriptions/topic/{type_}/{topic}", headers=headers)
    assert r.status_code in (200, 201), r.text


def _reader(client, headers, emulator, public, flavor="fcm", topic="all", **user):
    """A user with one browser subscribed to news/<topic>: (user_id, subscription, token)."""
    user_id = _user(client, headers, **user)
    sub, token = browser(client, headers, emulator, user_id, flavor, public)
    if topic:
        _subscribe(client, headers, user_id, topic)
    return user_id, sub, token


def _template(client, headers, method="TOPIC", type_="news", **fields):
    body = {"title": "News", "body": "Today"} | fields
    r = client.put(f"/v1/templates/{method}/{type_}", json=body, headers=headers)
    assert r.status_code in (200, 201), r.text


def _shown(emulator, sub):
    """What the service worker received, in order: the payload without the notification id."""
    pushes = emulator.web_pushes(sub["id"])
    assert all(p["decrypt_error"] is None for p in pushes), pushes
    return [
        {**p["payload"], "data": {k: v for k, v in p["payload"]["data"].items() if k != "notee_id"}} for p in pushes
    ]


def _job(client, headers, job_id):
    return client.get(f"/v1/jobs/{job_id}", headers=headers).json()


def _tasks(runtime, job_id):
    with runtime.sessions() as s:
        return s.execute(
            text("SELECT task_no, lease_until, state, sent FROM fanout_task WHERE job_id = :j ORDER BY task_no"),
            {"j": job_id},
        ).all()


def _release_now(runtime, job_id):
    """The clock reaching a held part's minute, simulated: its queued tasks become due now."""
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) WHERE job_id = :j AND state = 'queued'"),
            {"j": job_id},
        )


def test_a_browser_subscribed_to_a_cycle_gets_its_minutes_push(
    client, runtime, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers, "CYCLE", "remind", title="Drink {{what}}", body="b", defaults={"what": "water"})
    due_user, due_sub, _ = _reader(client, headers, emulator, public, "mozilla", topic=None)
    later_user, later_sub, _ = _reader(client, headers, emulator, public, "apple", topic=None)
    for user, minute in ((due_user, 30), (later_user, 31)):
        r = client.put(
            f"/v1/users/{user}/subscriptions/cycle/remind",
            json={"days": ["MON"], "hour": 23, "minute": minute, "timezone": "Asia/Seoul"},
            headers=headers,
        )
        assert r.status_code in (200, 201), r.text
    minute = utc(2031, 3, 3, 14, 30)  # Monday 23:30 in Seoul
    scheduler(runtime).run_minute(minute, now=minute)
    run_worker_until_idle(emu_runtime, [service])
    assert _shown(emulator, due_sub) == [{"title": "Drink water", "body": "b", "data": {}}]
    assert emulator.web_pushes(later_sub["id"]) == []  # 23:31's subscriber waits for its own minute


@pytest.mark.parametrize("mode", ["hold", "drop"])
def test_quiet_hours_hold_or_drop_a_browsers_push_as_a_phones(
    client, runtime, settings, tenant, emulator, emu_runtime, mode
):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers, quiet_hours=mode)
    _, awake, _ = _reader(client, headers, emulator, public, "fcm")
    _, asleep, _ = _reader(client, headers, emulator, public, "mozilla", quiet={"start": "22:00", "end": "07:00"})
    at = utc(2026, 11, 29, 14, 30)  # simulated, in the past: 23:30 in Seoul, inside the sleeper's night
    with runtime.sessions.begin() as s:
        job = publish.publish_topic(
            runtime, s, TopicPublish(service=service, type_="news", topic="all", at=at.replace(tzinfo=None))
        )
    held = {t.lease_until for t in _tasks(runtime, job.job_id) if planning.task_unit(job.target, t.task_no)[0] >= 1}
    run_worker_until_idle(emu_runtime, [service])  # every part's minute is past: all of them run
    status = _job(client, headers, job.job_id)
    assert status["state"] == "done", status
    assert _shown(emulator, awake) == [{"title": "News", "body": "Today", "data": {}}]
    if mode == "hold":
        assert held == {datetime(2026, 11, 29, 22, 0)}  # released at 07:00 KST
        assert _shown(emulator, asleep) == [{"title": "News", "body": "Today", "data": {}}]
        assert (status["targeted"], status["sent"], status["quiet_dropped"]) == (2, 2, 0)
    else:
        assert emulator.web_pushes(asleep["id"]) == []
        assert (status["targeted"], status["sent"], status["quiet_dropped"]) == (1, 1, 1)


def test_local_time_reaches_each_browser_at_its_own_minute(client, runtime, settings, tenant, emulator, emu_runtime):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers)
    _, here, _ = _reader(client, headers, emulator, public, timezone="UTC")
    _, kolkata, _ = _reader(client, headers, emulator, public, "apple", timezone="Asia/Kolkata")
    with runtime.sessions() as s:
        now = db_now(s)
    r = client.post("/v1/topics/news/all/publish", json={"local_time": f"{now:%H:%M}"}, headers=headers)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    assert (len(emulator.web_pushes(here["id"])), len(emulator.web_pushes(kolkata["id"]))) == (1, 0)
    later = {t.lease_until.replace(microsecond=0) for t in _tasks(runtime, job_id) if t.state == "queued"}
    assert clock.local_release(now, now.hour, now.minute, "Asia/Kolkata").replace(tzinfo=None) in later
    _release_now(runtime, job_id)
    run_worker_until_idle(emu_runtime, [service])
    assert _shown(emulator, kolkata) == [{"title": "News", "body": "Today", "data": {}}]
    assert len(emulator.web_pushes(here["id"])) == 1 and _job(client, headers, job_id)["state"] == "done"


def test_each_browser_reads_its_locales_variant(client, settings, tenant, emulator, emu_runtime):
    service, headers = tenant
    public = vapid(client, settings, service)
    variants = {"ko": {"title": "소식", "body": "오늘"}, "de": {"title": "Neues", "body": "Heute"}}
    _template(client, headers, variants=variants)
    _, ko_sub, _ = _reader(client, headers, emulator, public, "fcm", locale="ko-KR")
    de_user, de_sub, _ = _reader(client, headers, emulator, public, "mozilla")
    r = client.post(
        f"/v1/users/{de_user}/devices",
        json={"os": "WEB", "subscription": {k: de_sub[k] for k in ("endpoint", "keys")}, "locale": "de-AT"},
        headers=headers,
    )
    assert r.status_code == 200, r.text  # the browser's own locale, given on registration, wins
    _, en_sub, _ = _reader(client, headers, emulator, public, "apple")
    assert client.post("/v1/topics/news/all/publish", headers=headers).status_code == 202
    run_worker_until_idle(emu_runtime, [service])
    got = [_shown(emulator, sub)[0] for sub in (ko_sub, de_sub, en_sub)]
    assert [(p["title"], p["body"]) for p in got] == [("소식", "오늘"), ("Neues", "Heute"), ("News", "Today")]


def test_a_scheduled_publish_reaches_no_browser_before_send_at(
    client, runtime, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers)
    _, sub, _ = _reader(client, headers, emulator, public, "mozilla")
    with runtime.sessions() as s:
        send_at = db_now(s) + timedelta(hours=1)
    r = client.post("/v1/topics/news/all/publish", json={"send_at": send_at.isoformat() + "Z"}, headers=headers)
    assert r.status_code == 202 and r.json()["state"] == "scheduled", r.text
    job_id = r.json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    assert emulator.web_pushes(sub["id"]) == [] and _job(client, headers, job_id)["state"] == "scheduled"
    assert {t.lease_until.replace(microsecond=0) for t in _tasks(runtime, job_id)} == {send_at.replace(microsecond=0)}
    _release_now(runtime, job_id)  # send_at reached, simulated
    run_worker_until_idle(emu_runtime, [service])
    assert _shown(emulator, sub) == [{"title": "News", "body": "Today", "data": {}}]
    assert _job(client, headers, job_id)["state"] == "done"


def test_a_publishs_ttl_and_priority_become_the_ttl_and_urgency_headers(
    client, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers, ttl_seconds=600)
    _, sub, _ = _reader(client, headers, emulator, public, "apple")
    for body in ({"ttl_seconds": 90, "priority": "normal"}, {}, {"ttl_seconds": 0}):
        assert client.post("/v1/topics/news/all/publish", json=body, headers=headers).status_code == 202
        run_worker_until_idle(emu_runtime, [service])
    got = [(p["ttl"], p["urgency"]) for p in emulator.web_pushes(sub["id"])]
    assert got == [(90, "normal"), (600, "high"), (0, "high")]  # the template's TTL when the publish has none


def test_webhooks_carry_a_browser_jobs_events_with_true_counts(
    client, runtime, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers)
    _, ok, _ = _reader(client, headers, emulator, public, "fcm")
    _, gone, gone_token = _reader(client, headers, emulator, public, "mozilla")
    _, stale, _ = _reader(client, headers, emulator, _vapid_creds()[1], "apple")  # made with another key: 403
    emulator.web_gone(gone["id"], status=410)
    wh_settings = runtime.settings.model_copy(update={"webhook_allow_private_addresses": True})
    with runtime.sessions.begin() as s:
        endpoint = webhooks.create_endpoint(
            s,
            credentials_box(wh_settings),
            wh_settings,
            service,
            url="https://127.0.0.1:9/hook",
            events=None,
            description=None,
        )
    remember_secret(endpoint.secret)
    r = client.post("/v1/topics/news/all/publish", headers=headers)
    job_id = r.json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    assert len(emulator.web_pushes(ok["id"])) == 1 and emulator.web_pushes(stale["id"]) == []
    with runtime.sessions() as s:
        events = webhooks_sql.list_deliveries(s, service, endpoint.endpoint.endpoint_id, limit=50)
    (finished,) = [e.payload for e in events if e.event_type == "job.finished"]
    counts = {k: finished["data"][k] for k in ("targeted", "sent", "failed", "pruned")}
    assert counts == {"targeted": 3, "sent": 1, "failed": 1, "pruned": 1}, finished
    assert any(e.event_type == "token.pruned" and gone_token in json.dumps(e.payload) for e in events), events
    assert any(e.event_type == "dead_letter.created" and job_id in json.dumps(e.payload) for e in events), events


def test_platforms_and_the_platform_filter_narrow_an_audience_to_browsers(
    client, runtime, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers)
    service_user = f"aud-{random_token()[-12:]}"
    r = client.put(f"/v1/users/{service_user}", json={"name": "a"}, headers=headers)
    assert r.status_code == 201, r.text
    user = r.json()["user_id"]
    sub, _ = browser(client, headers, emulator, user, "fcm", public)
    phone = random_token("a")
    assert (
        client.post(f"/v1/users/{user}/devices", json={"token": phone, "os": "AOS"}, headers=headers).status_code == 201
    )
    for target in (
        {"users": [service_user], "platforms": ["WEB"]},
        {"filter": [[{"attribute": "platform", "op": "=", "value": "WEB"}]]},
    ):
        r = client.post("/v1/publish/news", json=target, headers=headers)
        assert r.status_code == 202, r.text
        run_worker_until_idle(emu_runtime, [service])
        status = _job(client, headers, r.json()["job_id"])
        assert (status["state"], status["targeted"], status["sent"]) == ("done", 1, 1), (target, status)
    assert len(emulator.web_pushes(sub["id"])) == 2 and deliveries_per_token(emulator, [phone]) == {phone: 0}


def test_a_rotated_or_deleted_browser_gets_nothing_at_its_old_subscription(
    client, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers)
    _, old, old_token = _reader(client, headers, emulator, public, "fcm")
    removed_user, removed, removed_token = _reader(client, headers, emulator, public, "apple")
    new = emulator.web_subscribe("mozilla", public)  # pushsubscriptionchange
    r = client.post("/v1/devices/rotate", json={"old_token": old_token, "new_token": token_of(new)}, headers=headers)
    assert r.status_code == 200 and r.json()["rotated"] == 1, r.text
    path = f"/v1/users/{removed_user}/devices/{quote(removed_token, safe='')}"
    assert client.delete(path, headers=headers).status_code == 204
    r = client.post("/v1/topics/news/all/publish", headers=headers)
    run_worker_until_idle(emu_runtime, [service])
    assert len(emulator.web_pushes(new["id"])) == 1  # the topic subscription moved with the device
    assert emulator.web_pushes(old["id"]) == [] and emulator.web_pushes(removed["id"]) == []
    status = _job(client, headers, r.json()["job_id"])
    assert (status["targeted"], status["sent"], status["failed"]) == (1, 1, 0), status


def test_404_and_410_prune_the_browser_from_mysql_and_cassandra(
    client, runtime, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = vapid(client, settings, service)
    _template(client, headers)
    user = _user(client, headers)
    alive, alive_token = browser(client, headers, emulator, user, "fcm", public)
    gone404, token404 = browser(client, headers, emulator, user, "apple", public)
    gone410, token410 = browser(client, headers, emulator, user, "mozilla", public)
    _subscribe(client, headers, user)
    emulator.web_gone(gone404["id"], status=404)
    emulator.web_gone(gone410["id"], status=410)
    first = client.post("/v1/topics/news/all/publish", headers=headers).json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    status = _job(client, headers, first)
    assert (status["targeted"], status["sent"], status["pruned"], status["failed"]) == (3, 1, 2, 0), status
    devices = [d["token"] for d in client.get(f"/v1/users/{user}/devices", headers=headers).json()["items"]]
    assert devices == [alive_token]
    rows = runtime.cql.execute(
        f"SELECT device_token FROM {runtime.keyspaces.notification}.notification_per_user WHERE user_id = %s AND service = %s",
        (user, service),
    )
    assert {row.device_token for row in rows} - {""} == {alive_token}  # "": the user's own row
    second = client.post("/v1/topics/news/all/publish", headers=headers).json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])  # the topic's subscriber rows went with the devices
    assert (_job(client, headers, second)["targeted"], len(emulator.web_pushes(alive["id"]))) == (1, 2)
    assert token404 not in str(rows) and token410 not in str(rows)


def test_a_recipients_text_too_large_for_a_browser_is_a_counted_failure(
    client, runtime, settings, tenant, emulator, emu_runtime
):
    service, headers = tenant
    public = vapid(client, settings, service)
    # a template within its own limit (3,584 bytes) whose text grows with the recipient's name
    pad, data = "x" * 1850, {f"d{i}": "y" * 800 for i in range(2)}
    _template(client, headers, title="t", body="{{ recipient.name }}" * 5 + pad, data=data)

    def fits(name: str) -> tuple[bool, bool]:  # (FCM and APNs take it, a browser takes it)
        args = ("t", name * 5 + pad, data)
        phones = fcm.payload_bytes(*args) <= fcm.PAYLOAD_LIMIT and apns.payload_bytes(*args) <= apns.PAYLOAD_LIMIT
        return phones, web.payload_bytes(*args) <= web.PAYLOAD_LIMIT

    long_name = next("N" * n for n in range(192) if not fits("N" * n)[1])
    assert fits(long_name) == (True, False) and fits("Al") == (True, True)  # the phones' limits hold; a browser's not
    _, short, _ = _reader(client, headers, emulator, public, "fcm", name="Al")
    _, long_, long_token = _reader(client, headers, emulator, public, "mozilla", name=long_name)
    r = client.post("/v1/topics/news/all/publish", headers=headers)
    assert r.status_code == 202, r.text  # the job's own text (an empty name) fits: discovered when sent
    run_worker_until_idle(emu_runtime, [service])
    assert _shown(emulator, short) == [{"title": "t", "body": "Al" * 5 + pad, "data": data}]
    assert emulator.web_pushes(long_["id"]) == []
    status = _job(client, headers, r.json()["job_id"])
    assert (status["state"], status["sent"], status["failed"]) == ("done", 1, 1), status
    dead = client.get("/v1/dead-letters", headers=headers).json()["items"]
    assert [d["reason"].split(":")[0] for d in dead if d["device_token"] == long_token] == ["payload_too_large"], dead


def _vapid_creds() -> tuple[WebPushCredentials, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return WebPushCredentials(pem.decode(), "mailto:ops@example.com"), base64.urlsafe_b64encode(point).rstrip(
        b"="
    ).decode()


def _breaker_series(circuit: str) -> list[float | None]:
    return [
        REGISTRY.get_sample_value("notee_circuit_breaker_state", {"provider": circuit, "state": st})
        for st in ("closed", "half_open", "open")
    ]


def test_one_push_service_down_does_not_stop_the_others(runtime, service_id, emulator):
    make_service(runtime, service_id)
    vapid_c, _ = _vapid_creds()
    creds = ProviderCredentials(fcm=FcmCredentials(shared_service_account()), webpush=vapid_c)
    port = int(emulator.url.rsplit(":", 1)[1])
    settings = runtime.settings.model_copy(update={"emulator_url": emulator.url, "emulator_ca_file": emulator.ca_file})
    with TcpSwitch("127.0.0.1", port) as switch:
        down_origin = f"https://localhost:{switch.port}"  # autopush, behind a switch the test turns off
        r = emulator.http.post("/_emu/webpush/subscribe", json={"origin": down_origin, "flavor": "mozilla"})
        down = [r.json()] + [
            emulator.http.post("/_emu/webpush/subscribe", json={"origin": down_origin, "flavor": "mozilla"}).json()
            for _ in range(2)
        ]
        up = [emulator.web_subscribe("fcm"), emulator.web_subscribe("apple")]  # FCM web and Apple, reachable
        phone = random_token("a")
        page = [Message(token_of(s), "WEB", "t", "b") for s in down + up] + [Message(phone, "AOS", "t", "b")]
        circuit = f"webpush:{down_origin}"
        job_id = f"j-web-{secrets.token_hex(6)}"  # its own: the test database keeps earlier runs' dead letters
        switch.off()

        async def go():
            providers = ProviderSet(settings)
            now = [0.0]  # the breaker's clock, moved by the test: its state is read when the test says
            breaker = CircuitBreaker(open_s=0.3, max_open_s=0.6, clock=lambda: now[0])
            options = DeliveryOptions(
                credentials=creds, job_id=job_id, breaker=breaker, entire_send=False, provider_wait_s=1.0
            )
            try:
                with pytest.raises(HandedBack) as handed:  # what was reached is done; the rest waits for later
                    await deliver(runtime, providers, service_id, page, options)
                seen = _breaker_series(circuit)
                with pytest.raises(ProviderUnavailable):  # nothing else to send: the page is handed back
                    await deliver(runtime, providers, service_id, page[:3], options)
                switch.on()
                now[0] += 0.6  # its open time is up: the next send probes it
                assert breaker.probing(circuit)
                back = await deliver(runtime, providers, service_id, page[:3], options)
                return handed.value, seen, back, breaker.states()
            finally:
                await providers.close()

        mixed, seen, back, states = asyncio.run(go())
    # FCM web, Apple and the phone: not stopped, and named done so the page's next try skips them; the
    # unreachable push service's three are not dead-lettered after the page's wait (before: they were).
    assert mixed.partial.delivered == 3 and mixed.partial.pruned == 0 and mixed.partial.failed == []
    assert mixed.done == {token_of(s) for s in up} | {phone} and mixed.processed == 3
    assert "held by an open circuit" in mixed.message and f"circuit open: {circuit}" in mixed.message
    with runtime.sessions() as session:
        dead = text("SELECT COUNT(*) FROM dead_letter WHERE service = :s AND job_id = :j")
        assert session.execute(dead, {"s": service_id, "j": job_id}).scalar() == 0
    assert seen == [0, 0, 1]  # notee_circuit_breaker_state{provider="webpush:<origin>", state="open"} 1
    assert states[circuit] == "closed" and states[f"webpush:{emulator.url.rstrip('/')}"] == "closed"
    assert back.delivered == 3
    for sub in up:
        assert len(emulator.web_pushes(sub["id"])) == 1
    for sub in down:
        assert len(emulator.web_pushes(sub["id"])) == 1  # once: after the push service came back
    assert deliveries_per_token(emulator, [phone]) == {phone: 1}
