"""Delivery end to end against the real MariaDB/Cassandra and the emulator: single sends, routing,
pruning, retries, dead letters, loud config errors, no secrets in logs; plus the pure helpers.

The rules of this topic that need no server are in tests/unit/test_providers_delivery.py."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import timedelta

import pytest
from sqlalchemy import text

from notee.core.clock import stored_now
from notee.core.notification_id import device_part
from notee.providers.base import Message
from notee.providers.routing import ProviderSet
from notee.store import deadletter
from tests.support.emulator import app_sending_to
from tests.support.registry import (
    admin_headers,
    apns_credentials,
    make_service,
    new_service,
    new_template,
    new_user,
    random_token,
)


class _SendId(str):
    """Equal to any single send's ``send_id`` (``s`` + 31 hex: docs/ENGAGEMENT.md)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and re.fullmatch(r"s[0-9a-f]{31}", other) is not None

    __hash__ = str.__hash__


ANY_SEND_ID = _SendId()


@pytest.fixture()
def emu_app(client, settings, emulator):
    """The API app with its providers pointed at the emulator, APNs at its own port."""
    with app_sending_to(client, settings, emulator, apns_port=True) as emu:
        yield emu


pytestmark = pytest.mark.tenant(credentials=True)


def _send(client, headers, user_id, **body):
    return client.post(f"/v1/users/{user_id}/send", json=body, headers=headers)


def test_single_send_reaches_every_device_of_the_user(client, tenant, emu_app):
    _service, headers = tenant
    tokens = [random_token("a"), random_token("b"), random_token("i")]
    user = new_user(client, headers, devices=[(tokens[0], "AOS"), (tokens[1], "AOS"), (tokens[2], "IOS")])
    other = new_user(client, headers, devices=[(random_token("o"), "AOS")])
    new_template(
        client,
        headers,
        "SINGLE",
        "welcome",
        title="Hi {{name}}",
        body="Order {{ order }} shipped",
        data={"order": "{{order}}"},
    )

    r = _send(client, headers, user, type="welcome", variables={"name": "Ann", "order": "42"})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "devices": 3,
        "delivered": 3,
        "pruned": 0,
        "retried": 0,
        "failed": 0,
        "dry_run": False,
        "quiet_dropped": 0,
        "send_id": ANY_SEND_ID,
    }
    for token in tokens:  # no APNs credentials: the IOS device goes through FCM too
        assert emu_app.deliveries(token)["fcm"] == 1
    seen = emu_app.last_request(tokens[0])["body"]
    assert seen["notification"] == {"title": "Hi Ann", "body": "Order 42 shipped"}
    assert seen["data"] == {"order": "42", "notee_id": f"{r.json()['send_id']}.{device_part(tokens[0])}"}
    assert emu_app.stats()["counts"]["fcm.ok"] == 3  # the other user got nothing
    assert other


def test_ios_goes_to_apns_when_the_service_has_apns_credentials(client, settings, tenant, emu_app, caplog):
    service, headers = tenant
    creds = apns_credentials()
    r = client.put(f"/v1/admin/services/{service}/credentials/apns", json=creds, headers=admin_headers(settings))
    assert r.status_code in (200, 204), r.text
    ios, aos = random_token("i"), random_token("a")
    user = new_user(client, headers, devices=[(ios, "IOS"), (aos, "AOS")])
    new_template(client, headers, "SINGLE", "ping", title="Ping", body="Pong")

    caplog.set_level(logging.DEBUG)
    r = _send(client, headers, user, type="ping")
    assert r.json()["delivered"] == 2
    assert emu_app.deliveries(ios) == {"token": ios, "fcm": 0, "apns": 1, "attempts": 1}
    assert emu_app.deliveries(aos)["fcm"] == 1
    # credentials and JWTs never reach logs or responses
    key_body = creds["private_key"].splitlines()[1]
    for text_ in (caplog.text, r.text):
        assert key_body not in text_ and "eyJ" not in text_ and "BEGIN PRIVATE KEY" not in text_


def test_missing_variable_is_422_and_nothing_is_sent(client, tenant, emu_app):
    _, headers = tenant
    token = random_token()
    user = new_user(client, headers, devices=[(token, "AOS")])
    new_template(client, headers, "SINGLE", "hello", title="Hi {{name}}", body="{{greeting}}!")
    r = _send(client, headers, user, type="hello", variables={"name": "Ann"})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["code"] == "invalid_input" and "greeting" in err["message"]
    assert emu_app.stats()["counts"] == {}


def test_payload_over_4kb_is_422_and_nothing_is_sent(client, tenant, emu_app):
    _, headers = tenant
    user = new_user(client, headers, devices=[(random_token(), "AOS")])
    new_template(client, headers, "SINGLE", "big", title="{{a}}", body="{{b}}{{c}}")
    r = _send(client, headers, user, type="big", variables={"a": "x" * 1500, "b": "y" * 1500, "c": "z" * 1200})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "payload_too_large"
    assert emu_app.stats()["counts"] == {}


@pytest.mark.parametrize(
    "body,status",
    [
        ({"type": "nope"}, 404),  # no such template
        ({"type": "bad type!"}, 422),
        ({"type": "x", "variables": {"a": 1}}, 422),
        ({"type": "x", "extra": 1}, 422),
        ({}, 422),
    ],
)
def test_bad_send_requests(client, tenant, emu_app, body, status):
    _, headers = tenant
    user = new_user(client, headers, devices=[(random_token(), "AOS")])
    r = _send(client, headers, user, **body)
    assert r.status_code == status, r.text
    assert "error" in r.json()
    assert emu_app.stats()["counts"] == {}


def test_topic_template_cannot_be_single_sent_and_other_tenants_user_is_404(client, settings, tenant, emu_app):
    service, headers = tenant
    user = new_user(client, headers, devices=[(random_token(), "AOS")])
    new_template(client, headers, "TOPIC", "news")
    assert _send(client, headers, user, type="news").status_code == 404
    other = new_service(client, settings, service[:-1] + ("X" if service[-1] != "X" else "Y"))
    new_template(client, other, "SINGLE", "news")
    assert _send(client, other, user, type="news").status_code == 404
    assert client.post(f"/v1/users/{user}/send", json={"type": "news"}).status_code == 401


def test_invalid_tokens_are_pruned_from_mysql_and_cassandra(client, runtime, tenant, emu_app, caplog):
    service, headers = tenant
    dead, alive = random_token("dead"), random_token("live")
    user = new_user(client, headers, devices=[(dead, "AOS"), (alive, "AOS")])
    new_template(client, headers, "TOPIC", "news")
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/sports", headers=headers).status_code in (200, 201)
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="there")
    emu_app.fcm_tokens(UNREGISTERED=[dead])

    caplog.set_level(logging.INFO)
    r = _send(client, headers, user, type="hi")
    assert r.json() == {
        "devices": 2,
        "delivered": 1,
        "pruned": 1,
        "retried": 0,
        "failed": 0,
        "dry_run": False,
        "quiet_dropped": 0,
        "send_id": ANY_SEND_ID,
    }
    devices = [d["token"] for d in client.get(f"/v1/users/{user}/devices", headers=headers).json()["items"]]
    assert devices == [alive]
    rows = runtime.cql.execute(
        f"SELECT device_token FROM {runtime.keyspaces.notification}.notification_per_user "
        "WHERE user_id = %s AND service = %s",
        (user, service),
    )
    tokens = {row.device_token for row in rows}
    assert alive in tokens and dead not in tokens
    assert dead not in caplog.text  # the log line names the token by a short hint only


def test_retryables_are_retried_then_delivered(client, tenant, emu_app):
    _, headers = tenant
    token = random_token()
    user = new_user(client, headers, devices=[(token, "AOS")])
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="there")
    emu_app.fault("fcm", 503, match=token, times=2, retry_after=0)
    r = _send(client, headers, user, type="hi")
    assert r.json() == {
        "devices": 1,
        "delivered": 1,
        "pruned": 0,
        "retried": 2,
        "failed": 0,
        "dry_run": False,
        "quiet_dropped": 0,
        "send_id": ANY_SEND_ID,
    }
    assert emu_app.deliveries(token) == {"token": token, "fcm": 1, "apns": 0, "attempts": 3}


def test_what_still_fails_is_dead_lettered(client, runtime, tenant, emu_app):
    service, headers = tenant
    token, fine = random_token(), random_token()
    user = new_user(client, headers, devices=[(token, "AOS"), (fine, "AOS")])
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="there")
    emu_app.fault("fcm", 429, match=token, times=100, retry_after=0)
    r = _send(client, headers, user, type="hi")
    bound = runtime.settings.fanout_max_attempts
    assert r.json() == {
        "devices": 2,
        "delivered": 1,
        "pruned": 0,
        "retried": bound - 1,
        "failed": 1,
        "dry_run": False,
        "quiet_dropped": 0,
        "send_id": ANY_SEND_ID,
    }
    assert emu_app.deliveries(token)["attempts"] == bound
    with runtime.sessions() as s:
        [letter] = deadletter.list_for_service(s, service)
    assert (letter.device_token, letter.provider, letter.attempts) == (token, "fcm", bound)
    assert "QUOTA_EXCEEDED" in letter.reason and letter.payload["title"] == "Hi"


def test_rejected_credentials_fail_loudly(client, tenant, emu_app):
    _, headers = tenant
    user = new_user(client, headers, devices=[(random_token(), "AOS"), (random_token(), "AOS")])
    new_template(client, headers, "SINGLE", "hi", title="Hi", body="there")
    emu_app.reject_bearer("*")  # every access token of the project refused
    r = _send(client, headers, user, type="hi")
    assert r.status_code == 424
    assert r.json()["error"]["code"] == "provider_config"
    assert emu_app.stats()["counts"]["fcm.unauthenticated"] == 4  # 2 devices, one refresh: not a retry loop


def test_an_unreachable_provider_is_not_the_devices_failure(runtime, settings, service_id, emulator):
    """Connections failing (nothing listens on the APNs port) are retried without using the devices'
    attempts, then the delivery raises ProviderUnavailable (the fan-out task is released for later,
    the API says 503): no device is dead-lettered or pruned, and nothing is reported as sent."""
    from notee.core.errors import ProviderUnavailable
    from notee.core.vocabulary import ApnsCredentials, ProviderCredentials
    from notee.emulator.control import free_port
    from notee.usecases.deliver import DeliveryOptions, deliver

    slept: list[float] = []

    async def no_wait(seconds: float) -> None:
        slept.append(seconds)

    creds = ProviderCredentials(apns=ApnsCredentials(**apns_credentials()))

    async def run() -> None:
        providers = ProviderSet(
            settings.model_copy(
                update={
                    "emulator_url": emulator.url,
                    "emulator_apns_url": f"https://localhost:{free_port()}",
                    "emulator_ca_file": emulator.ca_file,
                }
            )
        )
        try:
            await deliver(
                runtime,
                providers,
                service_id,
                [Message(random_token(), "IOS", "a", "b")] * 3,
                DeliveryOptions(credentials=creds, job_id=None, sleep=no_wait),
            )
        finally:
            await providers.close()

    with pytest.raises(ProviderUnavailable) as err:
        asyncio.run(run())
    assert err.value.status == 503
    assert len(slept) == runtime.settings.fanout_max_attempts - 1  # backed off between the rounds
    with runtime.sessions() as s:
        assert deadletter.list_for_service(s, service_id) == []


@pytest.mark.parametrize(
    "provider_wait_s,status,retry_after,outcome",
    [
        # a fan-out page: 503s (or FCM's project quota, which says Retry-After) are waited out
        (60.0, 503, 1, "delivered"),
        (60.0, 429, 1, "delivered"),
        # a single send (no wait): they count as attempts, the device is dead-lettered
        (None, 503, 1, "dead after 5"),
        # the page's wait used up (3 rounds of ~1 s): from then on they count
        (2.5, 503, 1, "dead after 8"),
        # a 429 without Retry-After is the device's own message rate: it always counts
        (60.0, 429, None, "dead after 5"),
    ],
)
def test_the_providers_own_refusals_are_waited_out_by_a_fan_out_page(
    runtime, settings, service_id, emulator, provider_wait_s, status, retry_after, outcome
):
    """A provider storm (5xx, FCM's quota with Retry-After) is nobody's device: a fan-out page keeps
    retrying, honouring Retry-After, without using the devices' attempts, for ``provider_wait_s`` of
    waiting in all; a single send counts them; the device's own 429 counts everywhere. (A fan-out
    page used to dead-letter a device after 5 storm answers: CI's 40 s storm did it to 12 devices.)"""
    from notee.usecases.deliver import DeliveryOptions, deliver

    make_service(runtime, service_id)
    bound = runtime.settings.fanout_max_attempts
    stormy, calm = random_token("storm"), random_token("calm")
    times = bound + 2 if outcome == "delivered" else 100  # more refusals than one device's attempts
    emulator.fault("fcm", status, match=stormy, times=times, retry_after=retry_after)
    slept: list[float] = []

    async def no_wait(seconds: float) -> None:
        slept.append(seconds)

    async def run() -> object:
        providers = ProviderSet(
            settings.model_copy(
                update={"emulator_url": emulator.url, "emulator_ca_file": emulator.ca_file, "emulator_standin": True}
            )
        )
        try:
            return await deliver(
                runtime,
                providers,
                service_id,
                [Message(stormy, "AOS", "a", "b"), Message(calm, "AOS", "a", "b")],
                DeliveryOptions(credentials=None, entire_send=False, sleep=no_wait, provider_wait_s=provider_wait_s),
            )
        finally:
            await providers.close()

    result = asyncio.run(run())
    with runtime.sessions() as s:
        letters = deadletter.list_for_service(s, service_id)
    attempts = emulator.deliveries(stormy)["attempts"]
    assert emulator.deliveries(calm)["fcm"] == 1
    if outcome == "delivered":
        assert (result.delivered, result.failed, letters) == (2, [], [])
        assert attempts == bound + 3 and emulator.deliveries(stormy)["fcm"] == 1
        if retry_after:
            assert len(slept) == bound + 2 and min(slept) >= retry_after  # Retry-After honoured every round
    else:
        expected = int(outcome.rsplit(" ", 1)[1])
        assert result.delivered == 1 and [t for t, _ in result.failed] == [stormy]
        assert [(x.device_token, x.attempts) for x in letters] == [(stormy, expected)]
        assert attempts == expected and emulator.deliveries(stormy)["fcm"] == 0


def test_without_credentials_there_is_no_route_and_no_log_provider(runtime, settings, service_id):
    """Live mode never falls back to the log provider (issue 13): no credentials, no provider."""
    from notee.usecases.deliver import DeliveryOptions, NoCredentials, deliver

    async def run():
        providers = ProviderSet(settings.model_copy(update={"emulator_url": None}))
        try:
            routes = providers.for_service(service_id, None)
            with pytest.raises(NoCredentials):
                await deliver(
                    runtime,
                    providers,
                    service_id,
                    [Message("t" * 20, "IOS", "a", "b")],
                    DeliveryOptions(credentials=None),
                )
            dry = await deliver(
                runtime, providers, service_id, [Message("t" * 20, "IOS", "a", "b")], DeliveryOptions(dry_run=True)
            )
            return routes, dry, providers.dry_run(service_id)
        finally:
            await providers.close()

    routes, dry, logger = asyncio.run(run())
    assert routes.fcm is None and routes.apns is None and not routes.any
    assert (dry.delivered, dry.dry_run) == (1, True) and logger.apns.sent[0].title == "a"


def test_dead_letter_retention(runtime, service_id):
    from notee.usecases.retention import prune_dead_letters
    from tests.support.registry import make_service

    make_service(runtime, service_id)
    # The real clock, not a future one: the prune is global, and a "now" years ahead would delete
    # the dead letters other tests running at the same time have just written and are reading.
    now = stored_now().replace(microsecond=0)
    letter = deadletter.DeadLetter(service_id, None, "tok", "AOS", "fcm", "r", 5, {"title": "t"})
    with runtime.sessions.begin() as s:
        deadletter.record(s, [letter], now=now - timedelta(days=runtime.settings.retention_days + 1))
        deadletter.record(s, [letter], now=now - timedelta(days=1))
    assert prune_dead_letters(runtime, now=now) >= 1
    with runtime.sessions() as s:
        left = s.execute(text("SELECT created_at FROM dead_letter WHERE service = :s"), {"s": service_id}).all()
    assert [r.created_at for r in left] == [now - timedelta(days=1)]
