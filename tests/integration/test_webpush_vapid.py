"""The emulator's push services refuse a bad VAPID header as each real one does (docs/WEB-PUSH.md "The
emulator's push services"), and Notee's provider reads each refusal as a credential error with the
service's reason; and a fan-out reuses one pool of HTTP/2 connections per push-service origin.

Real answers: Mozilla autopush maps every VAPID and JWT error to 401 with errno 109 (autopush-rs
``ApiErrorKind::VapidError | Jwt => UNAUTHORIZED``); Apple answers 403 ``{"reason": "BadJwtToken"}``
for a missing JWT, a wrong key, a bad ``sub``, a wrong ``aud`` or an ``exp`` more than a day ahead
(developer.apple.com, "Sending web push notifications in web apps and browsers"); FCM answers 401
(text) for a missing or malformed header and 403 (text) for a JWT or key it refuses."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notee.core import webpush_token
from notee.core.vocabulary import ProviderCredentials, WebPushCredentials
from notee.providers import webpush as web
from notee.providers.base import Failed, Message
from notee.providers.http2 import Response
from notee.providers.http2_pool import Pool, client_ssl_context
from notee.providers.routing import ProviderSet
from notee.providers.webpush_crypto import VapidSigner, b64url, encrypt
from notee.usecases.deliver import DeliveryOptions, deliver
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import make_service
from tests.support.tcp_switch import TcpSwitch
from tests.support.webpush import browser, token_of, vapid

FLAVORS = ("fcm", "mozilla", "apple")
SUBJECT = "mailto:ops@example.com"


class _Key:
    """A VAPID key pair: its PEM and its public key as a page's ``applicationServerKey``."""

    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.pem = self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        point = self.private.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        self.public = b64url(point)

    def header(self, claims: dict[str, Any], k: str | None = None) -> bytes:
        token = jwt.encode(claims, self.private, algorithm="ES256")
        return f"vapid t={token}, k={k or self.public}".encode()


def _claims(aud: str, **change: Any) -> dict[str, Any]:
    claims = {"aud": aud, "exp": int(time.time()) + 3600, "sub": SUBJECT} | change
    return {k: v for k, v in claims.items() if v is not None}


# Each bad header: (why, how it is made from (the subscription's key, another key, the origin)).
# "malformed" ones fail before any JWT is read (FCM: 401); the others are refused JWTs or keys.
BAD: dict[str, tuple[bool, Callable[[_Key, _Key, str], bytes]]] = {
    "wrong_aud": (False, lambda key, _o, aud: key.header(_claims("https://push.example.net"))),
    "aud_without_port": (False, lambda key, _o, aud: key.header(_claims(aud.rsplit(":", 1)[0]))),
    "exp_over_24_h_ahead": (False, lambda key, _o, aud: key.header(_claims(aud, exp=int(time.time()) + 25 * 3600))),
    "exp_past": (False, lambda key, _o, aud: key.header(_claims(aud, exp=int(time.time()) - 60))),
    "no_exp": (False, lambda key, _o, aud: key.header(_claims(aud, exp=None))),
    "no_sub": (False, lambda key, _o, aud: key.header(_claims(aud, sub=None))),
    "sub_not_mailto_or_https": (False, lambda key, _o, aud: key.header(_claims(aud, sub="ops@example.com"))),
    # signed by another key while naming the subscription's: the ES256 signature does not verify
    "signed_by_another_key": (False, lambda key, other, aud: other.header(_claims(aud), k=key.public)),
    # signed and named by another key: not the subscription's applicationServerKey
    "another_key": (False, lambda key, other, aud: other.header(_claims(aud))),
    "webpush_scheme": (True, lambda key, _o, aud: key.header(_claims(aud)).replace(b"vapid ", b"WebPush ", 1)),
    "no_k": (True, lambda key, _o, aud: key.header(_claims(aud)).split(b",")[0]),
    "no_authorization": (True, lambda key, _o, aud: b""),
}


def _expected(flavor: str, malformed: bool) -> int:
    if flavor == "mozilla":
        return 401
    if flavor == "apple":
        return 403
    return 401 if malformed else 403


def _reason_in(flavor: str, r: Response) -> str:
    """The body's shape as that push service writes it, and the reason Notee should quote from it."""
    if flavor == "mozilla":
        body = json.loads(r.body)
        assert set(body) == {"code", "errno", "error", "message", "more_info"} and body["code"] == r.status, body
        assert (body["errno"], body["error"]) == (109, "Unauthorized"), body  # autopush's "invalid authentication"
        return str(body["message"])
    if flavor == "apple":
        assert json.loads(r.body) == {"reason": "BadJwtToken"}, r.body
        return "BadJwtToken"
    assert r.headers[b"content-type"].startswith(b"text/plain"), r.headers
    return r.body.decode()


class _Crafted(VapidSigner):
    """A signer whose every header is the one the test made (a real key underneath)."""

    def __init__(self, pem: str, header: bytes) -> None:
        super().__init__(pem, SUBJECT)
        self.crafted = header

    def header(self, audience: str) -> bytes:
        return self.crafted


def _push(sub: dict[str, Any], authorization: bytes) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
    parsed = webpush_token.decode(token_of(sub))
    headers = [(b"content-encoding", b"aes128gcm"), (b"ttl", b"60")]
    if authorization:
        headers.insert(0, (b"authorization", authorization))
    body = encrypt(b'{"title":"t","body":"b"}', parsed.p256dh, parsed.auth)
    return parsed.endpoint[len(parsed.origin) :].encode(), headers, body


def test_each_push_service_refuses_a_bad_vapid_header_as_the_real_one_does(emulator):
    key, other = _Key(), _Key()
    origin = emulator.url.rstrip("/")
    subs = {flavor: emulator.web_subscribe(flavor, key.public) for flavor in FLAVORS}
    pool = Pool(origin, client_ssl_context(emulator.ca_file), provider="webpush")
    cases = [(flavor, why) for flavor in FLAVORS for why in BAD]

    async def go() -> tuple[list[Any], list[Any], list[Any]]:
        try:
            good = await pool.request_batch([_push(subs[f], key.header(_claims(origin))) for f in FLAVORS])
            items = [_push(subs[f], BAD[why][1](key, other, origin)) for f, why in cases]
            raw = await pool.request_batch(items)
            outcomes = []
            for (flavor, _why), item in zip(cases, items, strict=True):
                auth = dict(item[1]).get(b"authorization", b"")
                provider = web.WebPushProvider(_Crafted(key.pem, auth), lambda _origin: pool)
                outcomes += await provider.send([Message(token_of(subs[flavor]), "WEB", "t", "b")])
            return good, raw, outcomes
        finally:
            await pool.close()

    good, raw, outcomes = asyncio.run(go())
    # the same request with a right header is taken: each refusal below is the header's alone
    assert [r.status for r in good] == [201, 201, 201], good
    for (flavor, why), r, outcome in zip(cases, raw, outcomes, strict=True):
        status = _expected(flavor, BAD[why][0])
        assert r.status == status, (flavor, why, r.status, r.body)
        reason = _reason_in(flavor, r)
        assert reason, (flavor, why)
        # Notee's reading: a credential error naming the status and the service's own reason
        assert isinstance(outcome, Failed), (flavor, why, outcome)
        assert outcome.reason.startswith(f"vapid_rejected: {status} "), (flavor, why, outcome)
        assert reason[:100] in outcome.reason, (flavor, why, outcome, reason)
    for flavor in FLAVORS:  # nothing refused was decrypted or recorded as received
        assert len(emulator.web_pushes(subs[flavor]["id"])) == 1
        statuses = [a["status"] for a in emulator.web_answers(subs[flavor]["id"])]
        assert statuses.count(201) == 1 and len(statuses) == 1 + 2 * len(BAD), statuses


@pytest.mark.parametrize(("concurrency", "connections"), [(100, 1), (200, 2)])
def test_a_fan_out_reuses_one_pool_of_connections_per_push_service_origin(
    runtime, service_id, emulator, concurrency, connections
):
    """Two pages of 30 browsers on each of two origins (two TCP forwarders in front of the emulator):
    each origin gets its pool's connections (NOTEE_FANOUT_SEND_CONCURRENCY / 100 of them, each
    carrying up to 100 streams) and no more, whatever the number of browsers and pages."""
    make_service(runtime, service_id)
    key = _Key()
    creds = ProviderCredentials(webpush=WebPushCredentials(key.pem, SUBJECT))
    port = int(emulator.url.rsplit(":", 1)[1])
    settings = runtime.settings.model_copy(
        update={
            "emulator_url": emulator.url,
            "emulator_ca_file": emulator.ca_file,
            "fanout_send_concurrency": concurrency,
        }
    )
    with TcpSwitch("127.0.0.1", port) as a, TcpSwitch("127.0.0.1", port) as b:
        subs = [
            emulator.web_subscribe(flavor, key.public, f"https://localhost:{switch.port}")
            for switch, flavor in ((a, "fcm"), (b, "mozilla"))
            for _ in range(30)
        ]
        messages = [Message(token_of(s), "WEB", "t", "b") for s in subs]
        pages = [messages[0::2], messages[1::2]]  # each page reaches both origins

        async def go() -> list[int]:
            providers = ProviderSet(settings)
            options = DeliveryOptions(credentials=creds, job_id=f"j-conn-{service_id}", entire_send=False)
            try:
                return [(await deliver(runtime, providers, service_id, page, options)).delivered for page in pages]
            finally:
                await providers.close()

        delivered = asyncio.run(go())
        opened = (a.connections, b.connections)
    assert delivered == [30, 30]
    for sub in subs:
        assert len(emulator.web_pushes(sub["id"])) == 1
    assert opened == (connections, connections)


@pytest.mark.tenant(credentials=False)
def test_a_topic_publish_pages_share_each_origins_connections(client, settings, tenant, emulator, emu_runtime):
    """End to end: a topic publish to 15 browsers on each of two origins, read 10 recipients a page
    by one worker: every page's pushes to an origin go over that origin's pool, never more connections
    than the pool holds, however many pages."""
    service, headers = tenant
    public = vapid(client, settings, service)
    pool_size = -(-emu_runtime.settings.fanout_send_concurrency // 100)
    port = int(emulator.url.rsplit(":", 1)[1])
    with TcpSwitch("127.0.0.1", port) as a, TcpSwitch("127.0.0.1", port) as b:
        subs = []
        r = client.put("/v1/templates/TOPIC/news", json={"title": "News", "body": "Today"}, headers=headers)
        assert r.status_code in (200, 201), r.text
        for i in range(30):
            user = client.put(f"/v1/users/conn-{i}", json={"name": f"u{i}"}, headers=headers).json()["user_id"]
            switch, flavor = (a, "fcm") if i % 2 else (b, "apple")
            subs.append(browser(client, headers, emulator, user, flavor, public, f"https://localhost:{switch.port}")[0])
            r = client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers)
            assert r.status_code in (200, 201), r.text
        r = client.post("/v1/topics/news/all/publish", headers=headers)
        assert r.status_code == 202, r.text
        run_worker_until_idle(emu_runtime, [service], fetch_size=10)
        opened = (a.connections, b.connections)
    job = client.get(f"/v1/jobs/{r.json()['job_id']}", headers=headers).json()
    assert (job["state"], job["sent"], job["failed"]) == ("done", 30, 0), job
    for sub in subs:
        assert len(emulator.web_pushes(sub["id"])) == 1
    assert all(1 <= n <= pool_size for n in opened), (opened, pool_size)
