"""FCM: our lean sender and firebase-admin, driven against the same emulator, agree on the request
they send and on how each outcome is classified; plus table-driven classification."""

from __future__ import annotations

import asyncio
import secrets
import warnings

import pytest

from notee.errors import ProviderConfigError
from notee.providers.base import Delivered, Failed, InvalidToken, Message, RetryAfter
from notee.providers.fcm import AuthRejected, FcmProvider, StaticToken, classify_fcm, fcm_message
from notee.providers.http2 import Pool, client_ssl_context
from tests.emulator_fixture import emulator, emulator_process  # noqa: F401

PROJECT = "demo-test"


@pytest.fixture()
def sdk(emulator):
    """firebase-admin pointed at the emulator (docs/PROVIDERS.md recipe); urllib3 retries off so each
    call maps exactly one emulator response to the exception the SDK raises for it."""
    import firebase_admin
    import google.auth.credentials
    import requests
    from firebase_admin import messaging

    class StaticCredentials(google.auth.credentials.Credentials):
        def __init__(self):
            super().__init__()
            self.token = "sdk-test-token"

        def refresh(self, request):
            pass

    saved = messaging._MessagingService.FCM_URL
    messaging._MessagingService.FCM_URL = emulator.url + "/v1/projects/{0}/messages:send"
    app = firebase_admin.initialize_app(StaticCredentials(), {"projectId": PROJECT, "httpTimeout": 10},
                                        name="sdk-" + secrets.token_hex(4))
    try:
        svc = messaging._get_messaging_service(app)
        svc._client.session.mount(emulator.url, requests.adapters.HTTPAdapter(max_retries=0))
        yield app
    finally:
        messaging._MessagingService.FCM_URL = saved
        firebase_admin.delete_app(app)


def sdk_message(m: Message, *, now: float):
    from firebase_admin import messaging

    headers = {"apns-priority": "10" if m.priority == "high" else "5"}
    if m.ttl_seconds is not None:
        headers["apns-expiration"] = str(int(now) + m.ttl_seconds)
    if m.collapse_key:
        headers["apns-collapse-id"] = m.collapse_key
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # token= is deprecated in 7.7 in favour of fid=
        return messaging.Message(
            token=m.device_token, notification=messaging.Notification(title=m.title, body=m.body),
            data=dict(m.data) or None,
            android=messaging.AndroidConfig(priority=m.priority, ttl=m.ttl_seconds, collapse_key=m.collapse_key),
            apns=messaging.APNSConfig(headers=headers))


def ours_send(emulator, messages, tokens=None):
    async def run():
        provider = FcmProvider(PROJECT, tokens or StaticToken("ours-token"),
                               Pool(emulator.url, client_ssl_context(emulator.ca_file)))
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
    ("QUOTA_EXCEEDED", "QuotaExceededError", RetryAfter("QUOTA_EXCEEDED", 1.0)),
    ("UNAVAILABLE", "UnavailableError", RetryAfter("UNAVAILABLE", 1.0)),
    ("INTERNAL", "InternalError", RetryAfter("INTERNAL", 1.0)),
    ("THIRD_PARTY_AUTH_ERROR", "ThirdPartyAuthError", Failed("THIRD_PARTY_AUTH_ERROR")),
]


@pytest.mark.parametrize("code,sdk_error,expected", CASES, ids=[c[0] or "success" for c in CASES])
def test_sdk_and_ours_agree_on_every_outcome(emulator, sdk, code, sdk_error, expected):
    from firebase_admin import exceptions, messaging

    token = "tok-" + secrets.token_hex(8)
    if code in ("QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL"):
        emulator.fault("fcm", {"QUOTA_EXCEEDED": 429, "UNAVAILABLE": 503, "INTERNAL": 500}[code],
                       code=code, match=token, times=2, retry_after=1)
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


def test_encoder_matches_the_sdk_encoder_with_ttl():
    from firebase_admin import messaging

    m = msg("t", data={"a": "1"}, ttl_seconds=3600, priority="high", collapse_key="c")
    assert fcm_message(m, now=1000) == messaging._MessagingService.encode_message(sdk_message(m, now=1000))
    bare = msg("t")
    assert fcm_message(bare, now=0) == messaging._MessagingService.encode_message(sdk_message(bare, now=0))


def test_our_rejected_credentials_fail_loudly_once_not_per_device(emulator):
    emulator.reject_bearer("revoked")

    class Revoked:
        refreshed = 0

        async def token(self, *, force=False):
            self.refreshed += force
            return "revoked"

    tokens = Revoked()
    with pytest.raises(ProviderConfigError, match="rejected the credentials"):
        ours_send(emulator, [msg(f"d{i}") for i in range(5)], tokens=tokens)
    assert tokens.refreshed == 1  # one refresh for the whole batch, then a loud failure


def test_a_refreshed_token_recovers_a_revoked_one(emulator):
    emulator.reject_bearer("old")

    class Rotating:
        async def token(self, *, force=False):
            return "new" if force else "old"

    outcomes = ours_send(emulator, [msg("r1"), msg("r2")], tokens=Rotating())
    assert all(isinstance(o, Delivered) for o in outcomes)


def test_transport_failure_is_retryable():
    async def run():
        provider = FcmProvider(PROJECT, StaticToken(), Pool("https://127.0.0.1:9", client_ssl_context()))
        try:
            return await provider.send([msg("x")])
        finally:
            await provider.close()

    [outcome] = asyncio.run(run())
    assert isinstance(outcome, RetryAfter) and outcome.seconds is None and "transport" in outcome.reason


def _err(status, rpc, message="m", code=None):
    import json

    error = {"code": status, "status": rpc, "message": message}
    if code:
        error["details"] = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]
    return json.dumps({"error": error}).encode()


@pytest.mark.parametrize("status,body,retry_after,expected", [
    (200, b'{"name":"projects/p/messages/1"}', None, Delivered("projects/p/messages/1")),
    (404, _err(404, "NOT_FOUND", code="UNREGISTERED"), None, InvalidToken("UNREGISTERED")),
    (400, _err(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token",
               "INVALID_ARGUMENT"), None, InvalidToken("INVALID_ARGUMENT")),
    (400, _err(400, "INVALID_ARGUMENT", "Message is too big", "INVALID_ARGUMENT"), None,
     Failed("INVALID_ARGUMENT: Message is too big")),
    (403, _err(403, "PERMISSION_DENIED", code="SENDER_ID_MISMATCH"), None, InvalidToken("SENDER_ID_MISMATCH")),
    (429, _err(429, "RESOURCE_EXHAUSTED", code="QUOTA_EXCEEDED"), b"30", RetryAfter("QUOTA_EXCEEDED", 30.0)),
    (503, _err(503, "UNAVAILABLE", code="UNAVAILABLE"), None, RetryAfter("UNAVAILABLE", None)),
    (500, _err(500, "INTERNAL", code="INTERNAL"), b"2", RetryAfter("INTERNAL", 2.0)),
    (502, b"<html>bad gateway</html>", None, RetryAfter("HTTP 502", None)),
    (401, _err(401, "UNAUTHENTICATED", code="THIRD_PARTY_AUTH_ERROR"), None, Failed("THIRD_PARTY_AUTH_ERROR")),
    (401, _err(401, "UNAUTHENTICATED"), None, AuthRejected),
    (403, _err(403, "PERMISSION_DENIED"), None, ProviderConfigError),
    (404, _err(404, "NOT_FOUND", "Requested entity was not found."), None, ProviderConfigError),
])
def test_classify_fcm(status, body, retry_after, expected):
    if isinstance(expected, type) and issubclass(expected, Exception):
        with pytest.raises(expected):
            classify_fcm(status, body, retry_after)
    else:
        assert classify_fcm(status, body, retry_after) == expected


def test_pool_reopens_a_dropped_connection_and_flow_control_handles_large_bodies(emulator):
    async def run():
        pool = Pool(emulator.url, client_ssl_context(emulator.ca_file))
        provider = FcmProvider(PROJECT, StaticToken(), pool)
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
        provider = FcmProvider(PROJECT, StaticToken(), Pool(emulator.url, client_ssl_context(emulator.ca_file)),
                               timeout=0.1)
        try:
            return await provider.send([msg("slow1"), msg("slow2")])
        finally:
            await provider.close()

    outcomes = asyncio.run(run())
    assert all(isinstance(o, RetryAfter) and "no response" in o.reason for o in outcomes)


def test_spliced_page_bodies_equal_the_full_encoding():
    from notee.providers.fcm import _BodyCache, _encode

    data = {"k": "v", "quote": 'he said "hi"'}
    page = [Message(t, "AOS", "Héllo \"you\"", "line1\nline2", data, 3600, "normal", "c1")
            for t in ("tok-1", 'tok"2', "tok-ü3", "x" * 300)]
    other = [Message("tok-9", "AOS", "Other", "Body"), Message("tok-10", "AOS", "Other", "Body", {"a": "b"})]
    cache = _BodyCache()
    for m in page + other + page[:1]:
        assert cache.body(m) == _encode(m)


def test_a_batch_larger_than_the_stream_limit_and_a_dropped_connection(emulator):
    async def run():
        pool = Pool(emulator.url, client_ssl_context(emulator.ca_file), max_streams=10)
        provider = FcmProvider(PROJECT, StaticToken(), pool)
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
