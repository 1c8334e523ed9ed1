"""FCM: our lean sender and firebase-admin, driven against the same emulator, agree on the request
they send and on how each outcome is classified; plus table-driven classification.

The rules of this topic that need no server are in tests/unit/test_providers_fcm.py."""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest

from notee.core.errors import ProviderConfigError
from notee.providers.base import Delivered, Failed, InvalidToken, Message, RetryAfter
from notee.providers.fcm import FcmProvider, ServiceAccountTokens, StaticToken
from notee.providers.http2_pool import Pool, client_ssl_context
from tests.support.emulator import within_one_window
from tests.support.providers import sdk_message
from tests.support.waiting import until

PROJECT = "demo-test"


def service_account(emulator) -> dict:
    """A service account whose token_uri is the emulator's OAuth endpoint, as Notee builds it."""
    from notee.providers.fcm import emulator_service_account

    return {**emulator_service_account(PROJECT), "token_uri": emulator.url + "/token"}


def sa_tokens(emulator, **kw) -> ServiceAccountTokens:
    return ServiceAccountTokens(service_account(emulator), token_uri=emulator.url + "/token", **kw)


@pytest.fixture()
def sdk(emulator):
    """firebase-admin pointed at the emulator (docs/PROVIDERS.md recipe) with a service-account
    certificate whose access tokens come from the emulator's OAuth endpoint; urllib3 retries off so
    each call maps exactly one emulator response to the exception the SDK raises for it."""
    import firebase_admin
    import requests
    from firebase_admin import credentials, messaging

    saved = messaging._MessagingService.FCM_URL
    messaging._MessagingService.FCM_URL = emulator.url + "/v1/projects/{0}/messages:send"
    app = firebase_admin.initialize_app(
        credentials.Certificate(service_account(emulator)),
        {"projectId": PROJECT, "httpTimeout": 10},
        name="sdk-" + secrets.token_hex(4),
    )
    try:
        svc = messaging._get_messaging_service(app)
        svc._client.session.mount(emulator.url, requests.adapters.HTTPAdapter(max_retries=0))
        yield app
    finally:
        messaging._MessagingService.FCM_URL = saved
        firebase_admin.delete_app(app)


def ours_send(emulator, messages, tokens=None):
    async def run():
        provider = FcmProvider(
            PROJECT, tokens or sa_tokens(emulator), Pool(emulator.url, client_ssl_context(emulator.ca_file))
        )
        try:
            return await provider.send(messages)
        finally:
            await provider.close()

    return asyncio.run(run())


def msg(token: str, **kw) -> Message:
    return Message(device_token=token, device_os="AOS", title="Hi Ann", body="Your order shipped", **kw)


CASES = [
    # (errorCode, firebase-admin exception class name, our outcome)
    (None, None, Delivered),
    ("UNREGISTERED", "UnregisteredError", InvalidToken("UNREGISTERED")),
    ("INVALID_ARGUMENT", "InvalidArgumentError", InvalidToken("INVALID_ARGUMENT")),
    ("SENDER_ID_MISMATCH", "SenderIdMismatchError", InvalidToken("SENDER_ID_MISMATCH")),
    ("QUOTA_EXCEEDED", "QuotaExceededError", RetryAfter("QUOTA_EXCEEDED", 1.0, provider_wide=True)),
    ("UNAVAILABLE", "UnavailableError", RetryAfter("UNAVAILABLE", 1.0, provider_wide=True)),
    ("INTERNAL", "InternalError", RetryAfter("INTERNAL", 1.0, provider_wide=True)),
    ("THIRD_PARTY_AUTH_ERROR", "ThirdPartyAuthError", Failed("THIRD_PARTY_AUTH_ERROR")),
]


@pytest.mark.parametrize("code,sdk_error,expected", CASES, ids=[c[0] or "success" for c in CASES])
def test_sdk_and_ours_agree_on_every_outcome(emulator, sdk, code, sdk_error, expected):
    from firebase_admin import exceptions, messaging

    token = "tok-" + secrets.token_hex(8)
    if code in ("QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL"):
        emulator.fault(
            "fcm",
            {"QUOTA_EXCEEDED": 429, "UNAVAILABLE": 503, "INTERNAL": 500}[code],
            code=code,
            match=token,
            times=2,
            retry_after=1,
        )
    elif code:
        emulator.fcm_tokens(**{code: [token]})

    m = msg(token)
    if sdk_error is None:
        name = messaging.send(sdk_message(m, now=0), app=sdk)
        assert name.startswith(f"projects/{PROJECT}/messages/")
    else:
        with pytest.raises(exceptions.FirebaseError) as err:
            messaging.send(sdk_message(m, now=0), app=sdk)
        assert type(err.value).__name__ == sdk_error
        if code in ("QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL"):
            assert err.value.http_response.headers["Retry-After"] == "1"

    [outcome] = ours_send(emulator, [m])
    if expected is Delivered:
        assert isinstance(outcome, Delivered) and outcome.message_id.startswith(f"projects/{PROJECT}/messages/")
        assert emulator.deliveries(token)["fcm"] == 2  # one from the SDK, one from us
    else:
        assert outcome == expected
        assert emulator.deliveries(token)["fcm"] == 0


def test_request_body_and_headers_match_the_sdk(emulator, sdk):
    from firebase_admin import messaging

    sdk_token, our_token = "sdk-" + secrets.token_hex(6), "our-" + secrets.token_hex(6)
    shape = dict(data={"order": "42", "kind": "ship"}, ttl_seconds=None, priority="normal", collapse_key="orders")
    messaging.send(sdk_message(msg(sdk_token, **shape), now=0), app=sdk)
    assert isinstance(ours_send(emulator, [msg(our_token, **shape)])[0], Delivered)

    theirs, ours = emulator.last_request(sdk_token), emulator.last_request(our_token)
    assert theirs["path"] == ours["path"] == f"/v1/projects/{PROJECT}/messages:send"
    theirs["body"]["token"] = ours["body"]["token"] = "T"
    assert ours["body"] == theirs["body"]
    assert theirs["validate_only"] is ours["validate_only"] is False
    for header in ("content-type", "x-goog-api-format-version"):
        assert ours["headers"][header].split(";")[0] == theirs["headers"][header].split(";")[0]


def test_our_rejected_credentials_fail_loudly_once_not_per_device(emulator):
    emulator.reject_bearer("*")  # every access token of the project refused (account disabled)
    tokens = sa_tokens(emulator)
    with pytest.raises(ProviderConfigError, match="rejected the credentials"):
        ours_send(emulator, [msg(f"d{i}") for i in range(5)], tokens=tokens)
    assert tokens.fetched == 2  # one refresh for the whole batch, then a loud failure
    assert emulator.stats()["counts"]["fcm.unauthenticated"] == 10


def test_a_refreshed_token_recovers_a_revoked_one(emulator):
    async def run():
        tokens = sa_tokens(emulator)
        emulator.reject_bearer(await tokens.token())  # revoked before it expired
        provider = FcmProvider(PROJECT, tokens, Pool(emulator.url, client_ssl_context(emulator.ca_file)))
        try:
            return await provider.send([msg("r1"), msg("r2")]), tokens.fetched
        finally:
            await provider.close()

    outcomes, fetched = asyncio.run(run())
    assert all(isinstance(o, Delivered) for o in outcomes)
    assert fetched == 2  # refreshed once for the batch, not per message


def test_access_token_is_cached_until_shortly_before_expiry(emulator):
    """firebase-admin's Certificate fetches a token on every get_access_token(); Notee asks once and
    reuses it for every message until 5 minutes (or a tenth of its lifetime) before it expires."""
    now = [time.time()]

    async def run():
        tokens = sa_tokens(emulator, clock=lambda: now[0])
        provider = FcmProvider(PROJECT, tokens, Pool(emulator.url, client_ssl_context(emulator.ca_file)))
        try:
            for _ in range(3):
                assert all(isinstance(o, Delivered) for o in await provider.send([msg(_tok()) for _ in range(20)]))
            first = await tokens.token()
            now[0] += 3600 - 301  # still more than 5 minutes left: the same token
            assert await tokens.token() == first and tokens.fetched == 1
            now[0] += 2  # under 5 minutes left: replaced before it expires
            assert await tokens.token() != first and tokens.fetched == 2
        finally:
            await provider.close()

    asyncio.run(run())
    assert emulator.stats()["counts"]["oauth.token_issued"] == 2


def test_an_expired_access_token_gets_401_and_is_refreshed_once(emulator, sdk):
    """Realistic FCM: a token past its expiry is refused with 401 UNAUTHENTICATED. Notee's clock here
    believes the token is still fresh (a suspended VM), so only the 401 can tell it; it refreshes once.
    firebase-admin, the reference client, sees the same 401 for an expired token."""
    from firebase_admin import exceptions, messaging

    emulator.realistic(fcm_token_lifetime_s=1)
    frozen = time.time()

    async def run():
        tokens = sa_tokens(emulator, clock=lambda: frozen)
        provider = FcmProvider(PROJECT, tokens, Pool(emulator.url, client_ssl_context(emulator.ca_file)))
        try:
            await tokens.token()
            issued_by = time.time()  # the emulator issued it before this: it expires by issued_by + 1 s
            await until(lambda: time.time() > issued_by + 1, timeout=10, what="the emulator's token expired")
            return await provider.send([msg("e1"), msg("e2")]), tokens.fetched
        finally:
            await provider.close()

    outcomes, fetched = asyncio.run(run())
    assert all(isinstance(o, Delivered) for o in outcomes) and fetched == 2
    assert emulator.stats()["counts"]["fcm.unauthenticated"] == 2

    emulator.realistic(fcm_token_lifetime_s=3600)
    assert messaging.send(sdk_message(msg("sdk-1"), now=0), app=sdk)
    emulator.reject_bearer("*")
    with pytest.raises(exceptions.UnauthenticatedError):
        messaging.send(sdk_message(msg("sdk-2"), now=0), app=sdk)


def test_project_quota_answers_429_with_retry_after(emulator, sdk):
    from firebase_admin import messaging

    emulator.realistic(fcm_quota_per_minute=5, minute_s=30)
    within_one_window(30)  # every request of the test counted in one window
    outcomes = ours_send(emulator, [msg(_tok()) for _ in range(8)])
    assert sum(isinstance(o, Delivered) for o in outcomes) == 5
    limited = [o for o in outcomes if not isinstance(o, Delivered)]
    assert len(limited) == 3 and all(o.reason == "QUOTA_EXCEEDED" and 0 < o.seconds <= 30 for o in limited)
    with pytest.raises(messaging.QuotaExceededError) as err:
        messaging.send(sdk_message(msg(_tok()), now=0), app=sdk)
    assert 0 < int(err.value.http_response.headers["Retry-After"]) <= 30


def test_per_device_rate_limit(emulator, sdk):
    from firebase_admin import messaging

    emulator.realistic(device_per_minute=2, minute_s=30)
    within_one_window(30)  # every request of the test counted in one window
    busy = _tok()
    outcomes = ours_send(emulator, [msg(busy) for _ in range(3)] + [msg(_tok())])
    # The page's requests share one connection as concurrent streams, so which of the busy token's
    # three the emulator judges third is theirs to race: two delivered and one refused, in any order.
    busy_kinds = sorted(type(o).__name__ for o in outcomes[:3])
    assert busy_kinds == ["Delivered", "Delivered", "RetryAfter"] and isinstance(outcomes[3], Delivered)
    [refused] = [o for o in outcomes[:3] if isinstance(o, RetryAfter)]
    assert refused.reason == "QUOTA_EXCEEDED" and refused.seconds is None
    with pytest.raises(messaging.QuotaExceededError):
        messaging.send(sdk_message(msg(busy), now=0), app=sdk)


def test_payload_over_4096_bytes_is_refused_with_fcms_error_body(emulator, sdk):
    from firebase_admin import exceptions, messaging

    big = msg(_tok(), data={"blob": "x" * 4100})
    [outcome] = ours_send(emulator, [big])
    assert outcome == Failed("INVALID_ARGUMENT: Request contains an invalid argument.")
    with pytest.raises(exceptions.InvalidArgumentError) as err:
        messaging.send(sdk_message(big, now=0), app=sdk)
    details = err.value.http_response.json()["error"]["details"]
    assert {"field": "message", "description": "Message is too big"} in details[1]["fieldViolations"]
    fits = msg(_tok(), data={"blob": "x" * 3900})
    assert isinstance(ours_send(emulator, [fits])[0], Delivered)


def _tok() -> str:
    return "tok-" + secrets.token_hex(8)


def test_transport_failure_is_retryable():
    async def run():
        provider = FcmProvider(PROJECT, StaticToken(), Pool("https://127.0.0.1:9", client_ssl_context()))
        try:
            return await provider.send([msg("x")])
        finally:
            await provider.close()

    [outcome] = asyncio.run(run())
    assert isinstance(outcome, RetryAfter) and outcome.seconds is None and "transport" in outcome.reason


def test_pool_reopens_a_dropped_connection_and_flow_control_handles_large_bodies(emulator):
    async def run():
        pool = Pool(emulator.url, client_ssl_context(emulator.ca_file))
        provider = FcmProvider(PROJECT, sa_tokens(emulator), pool)
        try:
            first = await provider.send([msg("p1")])
            await pool._conns[0].close()  # as if the server had sent GOAWAY and closed
            second = await provider.send([msg("p2"), msg("p3")])
            # 300 concurrent ~3 KB bodies exceed the 64 KB initial connection window
            third = await provider.send([msg(f"big{i}", data={"blob": "x" * 3000}) for i in range(300)])
            return first, second, third
        finally:
            await provider.close()

    first, second, third = asyncio.run(run())
    assert all(isinstance(o, Delivered) for o in first + second + third)
    assert emulator.stats()["counts"]["fcm.ok"] == 303


def test_a_slow_provider_times_out_as_retryable(emulator):
    emulator.latency(500)

    async def run():
        provider = FcmProvider(
            PROJECT, sa_tokens(emulator), Pool(emulator.url, client_ssl_context(emulator.ca_file)), timeout=0.1
        )
        try:
            return await provider.send([msg("slow1"), msg("slow2")])
        finally:
            await provider.close()

    outcomes = asyncio.run(run())
    assert all(isinstance(o, RetryAfter) and "no response" in o.reason for o in outcomes)


def test_a_batch_larger_than_the_stream_limit_and_a_dropped_connection(emulator):
    async def run():
        pool = Pool(emulator.url, client_ssl_context(emulator.ca_file), max_streams=10)
        provider = FcmProvider(PROJECT, sa_tokens(emulator), pool)
        try:
            many = await provider.send([msg(f"many{i}") for i in range(250)])  # 25 rounds of 10 streams
            conn = pool._conns[0]
            pending = asyncio.ensure_future(provider.send([msg(f"cut{i}") for i in range(200)]))
            await asyncio.sleep(0)  # let the batch open its first streams
            await conn.close()  # the connection drops under it
            cut = await pending
            return many, cut
        finally:
            await provider.close()

    many, cut = asyncio.run(run())
    assert all(isinstance(o, Delivered) for o in many)
    # every message of the cut batch has an outcome: delivered, or retryable (never lost, never hung)
    assert len(cut) == 200 and all(isinstance(o, (Delivered, RetryAfter)) for o in cut)
    assert any(isinstance(o, RetryAfter) for o in cut)
