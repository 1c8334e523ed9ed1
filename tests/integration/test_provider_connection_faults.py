"""The connection-level faults the chaos run injects (chaos/plan.py: ``goaway``, ``reset``,
``token_expiry``) on the provider it did not reach before: GOAWAY and TCP resets on the FCM port
(the emulator's front, ``notee.emulator.front``), and an APNs provider-token expiry spell (its
JWTs expire after seconds, ``apns_jwt_max_age_s``). Each is played here deterministically against
the realistic emulator with Notee's own senders; the APNs port's GOAWAY and resets and FCM's
expiring access tokens are in test_providers_apns.py and test_providers_fcm.py."""

from __future__ import annotations

import asyncio
import secrets
import time

import jwt

from notee.providers.apns import ApnsJwt, ApnsProvider
from notee.providers.base import Delivered, Message, RetryAfter
from notee.providers.fcm import FcmProvider, ServiceAccountTokens, emulator_service_account
from notee.providers.http2_pool import Pool, client_ssl_context
from tests.support.waiting import until

PROJECT = "demo-test"
TOPIC, KEY_ID, TEAM_ID = "com.example.app", "TESTKEY123", "TEAMID1234"


def _fcm(emulator) -> FcmProvider:
    account = {**emulator_service_account(PROJECT), "token_uri": emulator.url + "/token"}
    tokens = ServiceAccountTokens(account, token_uri=emulator.url + "/token")
    return FcmProvider(PROJECT, tokens, Pool(emulator.url, client_ssl_context(emulator.ca_file)))


def _fcm_msg(token: str) -> Message:
    return Message(device_token=token, device_os="AOS", title="Hi", body="There")


def _front(emulator) -> dict:
    return emulator.stats()["front"]


def test_goaway_on_the_fcm_port_resends_only_what_was_not_processed(emulator):
    """The FCM port sends GOAWAY after every 7 requests of a connection: the streams above its
    last_stream_id are never answered and must go out again on a new connection, the ones at or
    below it are answered. Every push arrives exactly once, none is reported failed."""
    emulator.realistic(fcm_goaway_after=7)
    tokens = [f"goaway-{secrets.token_hex(8)}" for _ in range(60)]

    async def run():
        provider = _fcm(emulator)
        try:
            return await provider.send([_fcm_msg(t) for t in tokens])
        finally:
            await provider.close()

    outcomes = asyncio.run(run())
    assert all(isinstance(o, Delivered) for o in outcomes), outcomes
    assert all(emulator.deliveries(t)["fcm"] == 1 for t in tokens)  # none twice, none lost
    front = _front(emulator)
    assert front["goaways"] >= 8 and front["protocol_errors"] == 0, front


def test_goaway_on_demand_on_the_fcm_port_between_pages(emulator):
    """``POST /_emu/fcm/goaway`` (the chaos run's ``goaway`` on FCM) drains the open connection; the
    next page opens a new one and is delivered whole."""

    async def run():
        provider = _fcm(emulator)
        try:
            first = await provider.send([_fcm_msg(f"g1-{secrets.token_hex(6)}") for _ in range(20)])
            drained = await asyncio.to_thread(emulator.fcm_goaway)
            second = await provider.send([_fcm_msg(f"g2-{secrets.token_hex(6)}") for _ in range(20)])
            return first, drained, second
        finally:
            await provider.close()

    first, drained, second = asyncio.run(run())
    assert all(isinstance(o, Delivered) for o in first + second)
    assert drained >= 1
    front = _front(emulator)
    assert front["goaways"] >= 1 and front["connections"] >= 2, front


def test_a_reset_of_the_fcm_port_mid_stream_is_a_transport_retry_that_loses_and_doubles_nothing(emulator):
    """A TCP reset (RST, no GOAWAY) of the FCM connection while 30 streams wait for their answers
    (the emulator holds each 2 s, so none was handled): each is a transport retry, never the
    device's failure, and the retry on a new connection delivers each push exactly once."""
    tokens = [f"reset-{secrets.token_hex(8)}" for _ in range(30)]

    async def run():
        provider = _fcm(emulator)
        try:
            assert isinstance((await provider.send([_fcm_msg("warm-" + secrets.token_hex(6))]))[0], Delivered)
            await asyncio.to_thread(emulator.latency, 2000)
            sending = asyncio.create_task(provider.send([_fcm_msg(t) for t in tokens]))
            await until(lambda: _front(emulator)["max_open"] >= 30, timeout=30, interval=0.05, what="30 open streams")
            cut = await asyncio.to_thread(emulator.fcm_reset)
            await asyncio.to_thread(emulator.latency, 0)
            return cut, await sending, await provider.send([_fcm_msg(t) for t in tokens])
        finally:
            await provider.close()

    cut, first, again = asyncio.run(run())
    assert cut >= 1
    assert all(isinstance(o, RetryAfter) and o.transport and not o.provider_wide for o in first), first
    assert all(isinstance(o, Delivered) for o in again), again
    assert all(emulator.deliveries(t)["fcm"] == 1 for t in tokens)  # none lost, none twice
    assert _front(emulator)["resets"] >= 1


def _apns_msg() -> Message:
    return Message(device_token=secrets.token_hex(32), device_os="IOS", title="Hi", body="There")


def test_an_apns_token_expiry_spell_is_renewed_once_for_pages_sent_side_by_side(emulator, p8):
    """APNs' provider tokens expire after 3 s (the chaos run's APNs ``token_expiry`` spell): two
    pages sent together with the expired JWT both hear 403 ExpiredProviderToken; Notee re-signs one
    new JWT for both and resends on the same connection. Every push is delivered, and APNs never
    sees a second new token on the connection (TooManyProviderTokenUpdates: it would be refused
    for 20 minutes, which two re-signings side by side would cause)."""
    emulator.realistic(apns_jwt_max_age_s=3)
    url = emulator.apns_url or emulator.url

    async def run():
        signer = ApnsJwt(p8, KEY_ID, TEAM_ID)
        provider = ApnsProvider(TOPIC, signer, Pool(url, client_ssl_context(emulator.ca_file)))
        try:
            warm = await provider.send([_apns_msg()])  # the connection, past its first stream
            iat = jwt.decode(signer.bearer()[7:], options={"verify_signature": False})["iat"]
            await until(lambda: time.time() > iat + 3.5, timeout=10, what="the provider token expired")
            pages = await asyncio.gather(*(provider.send([_apns_msg() for _ in range(15)]) for _ in range(2)))
            return warm, [o for page in pages for o in page]
        finally:
            await provider.close()

    warm, outcomes = asyncio.run(run())
    assert all(isinstance(o, Delivered) for o in warm + outcomes), outcomes
    counts = emulator.stats()["counts"]
    assert counts["apns.expired_provider_token"] >= 2, counts  # both pages were refused first
    assert counts.get("apns.token_updates_refused", 0) == 0, counts
