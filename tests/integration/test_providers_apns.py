"""APNs: aioapns (the reference client) and our lean sender against the emulator, every outcome;
the JWT; table-driven classification.

The rules of this topic that need no server are in tests/unit/test_providers_apns.py."""

from __future__ import annotations

import asyncio
import secrets
import ssl
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notee.core.errors import ProviderConfigError
from notee.providers.apns import ApnsJwt, ApnsProvider
from notee.providers.base import Delivered, Failed, InvalidToken, Message, RetryAfter
from notee.providers.http2_pool import Pool, client_ssl_context
from tests.support.emulator import within_one_window
from tests.support.waiting import until

TOPIC, KEY_ID, TEAM_ID = "com.example.app", "TESTKEY123", "TEAMID1234"


def msg(token: str, **kw) -> Message:
    return Message(device_token=token, device_os="IOS", title="Hi", body="There", **kw)


def apns_url(emulator) -> str:
    """The realistic emulator's APNs port (its own h2 server: stream limits, GOAWAY)."""
    return emulator.apns_url or emulator.url


def ours_send(emulator, p8, messages, *, clock=time.time):
    async def run():
        provider = ApnsProvider(
            TOPIC,
            ApnsJwt(p8, KEY_ID, TEAM_ID, clock=clock),
            Pool(apns_url(emulator), client_ssl_context(emulator.ca_file)),
        )
        try:
            return await provider.send(messages)
        finally:
            await provider.close()

    return asyncio.run(run())


def aioapns_send(emulator, p8, token: str, payload: dict):
    from urllib.parse import urlsplit

    from aioapns import APNs, NotificationRequest
    from aioapns.connection import APNsProductionClientProtocol

    port = urlsplit(apns_url(emulator)).port

    class EmulatorProtocol(APNsProductionClientProtocol):
        APNS_SERVER, APNS_PORT = "localhost", port

    async def run():
        apns = APNs(
            key=p8,
            key_id=KEY_ID,
            team_id=TEAM_ID,
            topic=TOPIC,
            max_connection_attempts=1,
            ssl_context=ssl.create_default_context(cafile=emulator.ca_file),
            err_func=_quiet,
        )
        apns.pool.protocol_class = EmulatorProtocol
        try:
            return await asyncio.wait_for(apns.send_notification(NotificationRequest(token, payload)), 10)
        finally:
            apns.pool.close()

    return asyncio.run(run())


async def _quiet(request, result):
    pass


def _hex() -> str:
    return secrets.token_hex(32)


CASES = [
    # (how to set up the token, aioapns status, aioapns reason, our outcome)
    ("ok", "200", None, Delivered),
    ("unregistered", "410", "Unregistered", InvalidToken("Unregistered")),
    ("invalid", "400", "BadDeviceToken", InvalidToken("BadDeviceToken")),
    ("fault:413:PayloadTooLarge", "413", "PayloadTooLarge", Failed("413 PayloadTooLarge")),
    ("fault:429:TooManyRequests", "429", "TooManyRequests", RetryAfter("TooManyRequests", None)),
    (
        "fault:503:ServiceUnavailable",
        "503",
        "ServiceUnavailable",
        RetryAfter("ServiceUnavailable", None, provider_wide=True),
    ),
    (
        "fault:500:InternalServerError",
        "500",
        "InternalServerError",
        RetryAfter("InternalServerError", None, provider_wide=True),
    ),
]


@pytest.mark.parametrize("setup,status,reason,expected", CASES, ids=[c[0] for c in CASES])
def test_aioapns_and_ours_agree_on_every_outcome(emulator, p8, setup, status, reason, expected):
    token = _hex()
    if setup.startswith("fault:"):
        _, code, why = setup.split(":")
        emulator.http.post(
            "/_emu/faults", json={"api": "apns", "status": int(code), "reason": why, "match": token, "times": 2}
        ).raise_for_status()
    elif setup != "ok":
        emulator.apns_tokens(**{setup: [token]})

    result = aioapns_send(emulator, p8, token, {"aps": {"alert": "hi"}})
    assert result.status == status
    assert result.description == reason

    [outcome] = ours_send(emulator, p8, [msg(token)])
    if expected is Delivered:
        assert isinstance(outcome, Delivered) and outcome.message_id
        assert emulator.deliveries(token)["apns"] == 2
    else:
        assert outcome == expected


def test_real_oversized_payload_is_413(emulator, p8):
    [outcome] = ours_send(emulator, p8, [msg(_hex(), data={"blob": "x" * 5000})])
    assert outcome == Failed("413 PayloadTooLarge")


def test_expired_provider_token_with_aioapns(emulator, p8):
    token = _hex()
    emulator.http.post(
        "/_emu/faults", json={"api": "apns", "status": 403, "reason": "ExpiredProviderToken", "match": token}
    ).raise_for_status()
    result = aioapns_send(emulator, p8, token, {"aps": {"alert": "hi"}})
    assert (result.status, result.description) == ("403", "ExpiredProviderToken")


def test_expired_jwt_is_resigned_once_and_the_send_recovers(emulator, p8):
    times = iter([time.time() - 4000])  # first JWT is 66 minutes old, then the real clock

    outcomes = ours_send(emulator, p8, [msg(_hex()), msg(_hex())], clock=lambda: next(times, time.time()))
    assert all(isinstance(o, Delivered) for o in outcomes)


def test_a_clock_that_keeps_signing_expired_jwts_fails_loudly(emulator, p8):
    with pytest.raises(ProviderConfigError, match="expired right after re-signing"):
        ours_send(emulator, p8, [msg(_hex())], clock=lambda: time.time() - 4000)


def test_invalid_provider_token_fails_loudly_not_per_device(emulator, p8):
    bearer = ApnsJwt(p8, KEY_ID, TEAM_ID).bearer().decode()[7:]
    emulator.reject_bearer(bearer)

    async def run():
        jwt_ = ApnsJwt(p8, KEY_ID, TEAM_ID)
        jwt_._value, jwt_._issued = b"bearer " + bearer.encode(), time.time()
        provider = ApnsProvider(TOPIC, jwt_, Pool(apns_url(emulator), client_ssl_context(emulator.ca_file)))
        try:
            return await provider.send([msg(_hex()) for _ in range(3)])
        finally:
            await provider.close()

    with pytest.raises(ProviderConfigError, match="InvalidProviderToken"):
        asyncio.run(run())


def test_request_matches_what_apns_expects(emulator, p8):
    token = _hex()
    ours_send(emulator, p8, [msg(token, data={"k": "v"}, ttl_seconds=60, priority="normal", collapse_key="c")])
    seen = emulator.last_request(token)
    assert seen["path"] == f"/3/device/{token}"
    assert seen["body"] == {"aps": {"alert": {"title": "Hi", "body": "There"}, "sound": "default"}, "k": "v"}
    h = seen["headers"]
    assert (h["apns-topic"], h["apns-push-type"], h["apns-priority"], h["apns-collapse-id"]) == (
        TOPIC,
        "alert",
        "5",
        "c",
    )
    assert int(h["apns-expiration"]) >= int(time.time()) + 55
    assert "authorization" not in h  # the emulator never keeps credentials


def _peer(emulator) -> dict:
    return emulator.stats()["apns_peer"]


def ours_send_batches(emulator, p8, batches, *, between=None):
    """Several batches through one provider (one pool); ``between(i)`` runs after batch i."""

    async def run():
        provider = ApnsProvider(
            TOPIC, ApnsJwt(p8, KEY_ID, TEAM_ID), Pool(apns_url(emulator), client_ssl_context(emulator.ca_file))
        )
        out = []
        try:
            for i, batch in enumerate(batches):
                out.append(await provider.send(batch))
                if between:
                    await asyncio.to_thread(between, i)
            return out
        finally:
            await provider.close()

    return asyncio.run(run())


def test_one_stream_until_a_valid_token_then_the_limit(emulator, p8):
    """APNs allows one stream on a new connection until a request carries a valid provider token,
    then 1000: Notee opens one stream, then the rest, and the emulator never sees a stream too many."""
    [outcomes] = ours_send_batches(emulator, p8, [[msg(_hex()) for _ in range(300)]])
    assert all(isinstance(o, Delivered) for o in outcomes)
    peer = _peer(emulator)
    assert peer["protocol_errors"] == 0 and peer["connections"] == 1
    assert 1 < peer["max_open"] <= 100  # past the first request, up to Notee's own 100 streams


def test_aioapns_against_the_stream_limits(emulator, p8):
    """The reference client against the same server. aioapns assumes 1000 streams until the server's
    SETTINGS arrive (connection.py ``ChannelPool(1000)``), so concurrent sends on a brand-new
    connection can overshoot the first limit of 1 and lose the connection (seen here: it then
    reconnects, sometimes beyond its attempts). Once one notification has gone through, the limit is
    1000 and 20 concurrent sends all succeed on the same connection. The emulator holds each answer
    20 ms, so the 20 sends are in flight together however busy the machine is."""
    from urllib.parse import urlsplit

    from aioapns import APNs, NotificationRequest
    from aioapns.connection import APNsProductionClientProtocol

    class EmulatorProtocol(APNsProductionClientProtocol):
        APNS_SERVER, APNS_PORT = "localhost", urlsplit(apns_url(emulator)).port

    async def run():
        apns = APNs(
            key=p8,
            key_id=KEY_ID,
            team_id=TEAM_ID,
            topic=TOPIC,
            max_connections=1,
            max_connection_attempts=2,
            ssl_context=ssl.create_default_context(cafile=emulator.ca_file),
            err_func=_quiet,
        )
        apns.pool.protocol_class = EmulatorProtocol

        def send():
            return apns.send_notification(NotificationRequest(_hex(), {"aps": {"alert": "hi"}}))

        try:
            first = await asyncio.wait_for(send(), 10)
            rest = await asyncio.wait_for(asyncio.gather(*(send() for _ in range(20))), 20)
            return [first, *rest]
        finally:
            apns.pool.close()

    emulator.realistic(apns_answer_delay_ms=20)
    results = asyncio.run(run())
    assert [r.status for r in results] == ["200"] * 21
    peer = _peer(emulator)
    assert peer["protocol_errors"] == 0 and peer["connections"] == 1 and peer["max_open"] > 1


def test_a_limit_lowered_on_demand_is_obeyed(emulator, p8):
    def lower(i):
        if i == 0:
            emulator.realistic(apns_max_streams=3)

    first, second = ours_send_batches(
        emulator, p8, [[msg(_hex()) for _ in range(100)], [msg(_hex()) for _ in range(100)]], between=lower
    )
    assert all(isinstance(o, Delivered) for o in first + second)
    peer = _peer(emulator)
    assert peer["protocol_errors"] == 0 and peer["connections"] == 1 and peer["rules"]["max_streams"] == 3


def test_goaway_after_n_requests_resends_only_what_was_not_processed(emulator, p8):
    emulator.realistic(apns_goaway_after=7)
    tokens = [_hex() for _ in range(60)]
    [outcomes] = ours_send_batches(emulator, p8, [[msg(t) for t in tokens]])
    assert all(isinstance(o, Delivered) for o in outcomes)
    assert all(emulator.deliveries(t)["apns"] == 1 for t in tokens)  # none twice, none lost
    peer = _peer(emulator)
    assert peer["goaways"] >= 8 and peer["protocol_errors"] == 0


def test_goaway_on_demand_between_batches(emulator, p8):
    def goaway(i):
        assert emulator.apns_goaway() == 1

    first, second = ours_send_batches(
        emulator, p8, [[msg(_hex()) for _ in range(30)], [msg(_hex()) for _ in range(30)]], between=goaway
    )
    assert all(isinstance(o, Delivered) for o in first + second)
    assert _peer(emulator)["connections"] == 2


def test_a_connection_reset_mid_stream_is_a_transport_retry_that_loses_and_doubles_nothing(emulator, p8):
    """A TCP reset (RST, no GOAWAY) while 30 streams wait for their answers (the emulator holds them
    2 s, so none was handled): each is a transport retry, never the device's failure, and the retry
    (on a new connection) delivers each push exactly once. The chaos run injects the same reset
    (``reset`` in chaos/plan.py)."""
    tokens = [_hex() for _ in range(30)]

    async def run():
        provider = ApnsProvider(
            TOPIC, ApnsJwt(p8, KEY_ID, TEAM_ID), Pool(apns_url(emulator), client_ssl_context(emulator.ca_file))
        )
        try:
            assert isinstance((await provider.send([msg(_hex())]))[0], Delivered)  # the connection, past 1 stream
            await asyncio.to_thread(emulator.realistic, apns_answer_delay_ms=2000)
            sending = asyncio.create_task(provider.send([msg(t) for t in tokens]))
            await until(lambda: _peer(emulator)["max_open"] >= 30, timeout=30, interval=0.05, what="30 open streams")
            assert await asyncio.to_thread(emulator.apns_reset) == 1
            await asyncio.to_thread(emulator.realistic, apns_answer_delay_ms=0)
            return await sending, await provider.send([msg(t) for t in tokens])
        finally:
            await provider.close()

    cut, again = asyncio.run(run())
    assert all(isinstance(o, RetryAfter) and o.transport and not o.provider_wide for o in cut), cut
    assert all(isinstance(o, Delivered) for o in again), again
    assert all(emulator.deliveries(t)["apns"] == 1 for t in tokens)  # none lost, none twice
    peer = _peer(emulator)
    assert peer["resets"] == 1 and peer["connections"] == 2


def test_token_updates_on_one_connection_are_limited_so_each_key_has_its_own_pool(emulator, p8):
    """APNs refuses a connection that changes provider token more often than every 20 minutes
    (TooManyProviderTokenUpdates). Two signing keys on one connection trip it; Notee's ProviderSet
    gives each (team_id, key_id) its own pool and JWT, so two services with different keys never do."""
    from notee.core.settings import Settings
    from notee.providers.routing import ProviderSet

    other = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )

    async def shared_connection():
        pool = Pool(apns_url(emulator), client_ssl_context(emulator.ca_file))
        a = ApnsProvider(TOPIC, ApnsJwt(p8, KEY_ID, TEAM_ID), pool)
        b = ApnsProvider(TOPIC, ApnsJwt(other, "OTHERKEY99", TEAM_ID), pool)
        try:
            return await a.send([msg(_hex())]) + await b.send([msg(_hex())])
        finally:
            await pool.close()

    first, second = asyncio.run(shared_connection())
    assert isinstance(first, Delivered) and second == RetryAfter("TooManyProviderTokenUpdates", None)

    from notee.core.vocabulary import ApnsCredentials, ProviderCredentials

    def Both(key, key_id):
        return ProviderCredentials(apns=ApnsCredentials(key_id, TEAM_ID, TOPIC, key, True))

    async def per_key_pools():
        settings = Settings(
            emulator_url=emulator.url, emulator_apns_url=apns_url(emulator), emulator_ca_file=emulator.ca_file
        )
        providers = ProviderSet(settings)
        try:
            a = providers.for_service("SVCA", Both(p8, KEY_ID)).apns
            b = providers.for_service("SVCB", Both(other, "OTHERKEY99")).apns
            c = providers.for_service("SVCC", Both(p8, KEY_ID)).apns  # same key as A: same pool, same JWT
            out = []
            for _ in range(3):
                for provider in (a, b, c):
                    out += await provider.send([msg(_hex()) for _ in range(5)])
            return out, a._pool is c._pool and a._pool is not b._pool, a._jwt is c._jwt
        finally:
            await providers.close()

    outcomes, pools_by_key, shared_jwt = asyncio.run(per_key_pools())
    assert all(isinstance(o, Delivered) for o in outcomes)
    assert pools_by_key and shared_jwt


def test_apns_per_device_rate_limit(emulator, p8):
    emulator.realistic(device_per_minute=2, minute_s=30)
    within_one_window(30)  # every request of the test counted in one window
    busy = _hex()
    [outcomes] = ours_send_batches(emulator, p8, [[msg(busy), msg(busy), msg(busy)]])
    assert sorted(type(o).__name__ for o in outcomes) == ["Delivered", "Delivered", "RetryAfter"]
    assert next(o for o in outcomes if isinstance(o, RetryAfter)).reason == "TooManyRequests"
