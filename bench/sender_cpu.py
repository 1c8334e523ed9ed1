"""CPU per message of each push sender path, against Notee's emulator (docs/PROVIDERS.md).

Paths: Notee's FCM sender (lean h2), Notee's APNs sender (same transport), firebase-admin
``send_each`` (requests + thread pool) and ``send_each_async`` (httpx HTTP/2), and aioapns.
Each path runs in its own spawned process; CPU is that process's ``time.process_time()`` only
(the emulator's CPU is not counted), after a warm-up batch. 100 requests in flight for every path
(firebase-admin: batches of 100, its own concurrency inside a batch).

    .venv/bin/python -m bench.sender_cpu [messages-per-path]
"""

from __future__ import annotations

import asyncio
import multiprocessing
import secrets
import ssl
import sys
import time
import warnings

IN_FLIGHT = 100


def _p8() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    return (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )


def _messages(n: int, os_: str):
    from notee.providers.base import Message

    return [
        Message(
            secrets.token_hex(32) if os_ == "IOS" else "f" + secrets.token_urlsafe(120),
            os_,
            "Bench title",
            "A benchmark push body of realistic length.",
            {"kind": "bench", "ref": "12345"},
            3600,
            "high",
        )
        for _ in range(n)
    ]


def notee_fcm(url: str, ca: str, n: int) -> float:
    from notee.providers.fcm import FcmProvider, StaticToken
    from notee.providers.http2_pool import Pool, client_ssl_context

    async def run() -> float:
        p = FcmProvider("bench", StaticToken("x" * 257), Pool(url, client_ssl_context(ca), max_streams=IN_FLIGHT))
        await p.send(_messages(200, "AOS"))
        msgs = _messages(n, "AOS")
        t = time.process_time()
        for i in range(0, n, 1000):  # pages, as the fan-out sends them
            out = await p.send(msgs[i : i + 1000])
            assert all(type(o).__name__ == "Delivered" for o in out), out[:3]
        cpu = time.process_time() - t
        await p.close()
        return cpu

    return asyncio.run(run())


def notee_apns(url: str, ca: str, n: int) -> float:
    from notee.providers.apns import ApnsJwt, ApnsProvider
    from notee.providers.http2_pool import Pool, client_ssl_context

    async def run() -> float:
        p = ApnsProvider(
            "com.example.bench",
            ApnsJwt(_p8(), "KEYID12345", "TEAMID1234"),
            Pool(url, client_ssl_context(ca), max_streams=IN_FLIGHT),
        )
        await p.send(_messages(200, "IOS"))
        msgs = _messages(n, "IOS")
        t = time.process_time()
        for i in range(0, n, 1000):
            out = await p.send(msgs[i : i + 1000])
            assert all(type(o).__name__ == "Delivered" for o in out), out[:3]
        cpu = time.process_time() - t
        await p.close()
        return cpu

    return asyncio.run(run())


def _sdk_app(url: str):
    import firebase_admin
    import google.auth.credentials
    import requests
    from firebase_admin import _http_client, messaging

    class Static(google.auth.credentials.Credentials):
        def __init__(self):
            super().__init__()
            self.token = "x" * 257

        def refresh(self, request):
            pass

    messaging._MessagingService.FCM_URL = url + "/v1/projects/{0}/messages:send"
    app = firebase_admin.initialize_app(Static(), {"projectId": "bench"}, name="bench")
    svc = messaging._get_messaging_service(app)
    svc._client.session.mount(
        url,
        requests.adapters.HTTPAdapter(
            pool_connections=IN_FLIGHT, pool_maxsize=IN_FLIGHT, max_retries=_http_client.DEFAULT_RETRY_CONFIG
        ),
    )
    return app


def _sdk_messages(n: int):
    from firebase_admin import messaging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return [
            messaging.Message(
                token=m.device_token,
                notification=messaging.Notification(m.title, m.body),
                data=m.data,
                android=messaging.AndroidConfig(ttl=3600, priority="high"),
            )
            for m in _messages(n, "AOS")
        ]


def sdk_send_each(url: str, ca: str, n: int) -> float:
    from firebase_admin import messaging

    app = _sdk_app(url)
    messaging.send_each(_sdk_messages(IN_FLIGHT), app=app)
    msgs = _sdk_messages(n)
    t = time.process_time()
    for i in range(0, n, IN_FLIGHT):
        assert messaging.send_each(msgs[i : i + IN_FLIGHT], app=app).failure_count == 0
    return time.process_time() - t


def sdk_send_each_async(url: str, ca: str, n: int) -> float:
    from firebase_admin import messaging

    app = _sdk_app(url)

    async def run() -> float:
        await messaging.send_each_async(_sdk_messages(IN_FLIGHT), app=app)
        msgs = _sdk_messages(n)
        t = time.process_time()
        for i in range(0, n, IN_FLIGHT):
            assert (await messaging.send_each_async(msgs[i : i + IN_FLIGHT], app=app)).failure_count == 0
        return time.process_time() - t

    return asyncio.run(run())


def aioapns_path(url: str, ca: str, n: int) -> float:
    from urllib.parse import urlsplit

    from aioapns import APNs, NotificationRequest
    from aioapns.connection import APNsProductionClientProtocol

    class Emu(APNsProductionClientProtocol):
        APNS_SERVER, APNS_PORT = "localhost", urlsplit(url).port

    async def run() -> float:
        apns = APNs(
            key=_p8(),
            key_id="KEYID12345",
            team_id="TEAMID1234",
            topic="com.example.bench",
            ssl_context=ssl.create_default_context(cafile=ca),
        )
        apns.pool.protocol_class = Emu
        sem = asyncio.Semaphore(IN_FLIGHT)

        async def one(m):
            async with sem:
                r = await apns.send_notification(
                    NotificationRequest(
                        m.device_token, {"aps": {"alert": {"title": m.title, "body": m.body}}, **m.data}
                    )
                )
                assert r.is_successful, r.description

        await asyncio.gather(*(one(m) for m in _messages(200, "IOS")))
        msgs = _messages(n, "IOS")
        t = time.process_time()
        await asyncio.gather(*(one(m) for m in msgs))
        cpu = time.process_time() - t
        apns.pool.close()
        return cpu

    return asyncio.run(run())


PATHS = {
    "notee FCM sender (h2, lean)": notee_fcm,
    "notee APNs sender (h2, lean)": notee_apns,
    "firebase-admin send_each (requests, threads)": sdk_send_each,
    "firebase-admin send_each_async (httpx HTTP/2)": sdk_send_each_async,
    "aioapns 4.0": aioapns_path,
}


def _child(name, url, ca, n, q):
    import logging

    logging.disable(logging.ERROR)  # aioapns/urllib3 chatter is not part of the measurement
    q.put(PATHS[name](url, ca, n))


def main() -> None:
    from bench.env import emulator

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    ctx = multiprocessing.get_context("spawn")
    with emulator() as emu:
        import psutil

        server = psutil.Process(emu.pid)
        print(
            f"{'path':48} {'µs CPU/msg':>11} {'msgs/CPU-s':>11} {'emulator µs/req':>16}"
            f"   ({n} messages, {IN_FLIGHT} in flight)"
        )
        for name in PATHS:
            q = ctx.Queue()
            p = ctx.Process(target=_child, args=(name, emu.url, emu.ca_file, n, q))
            before = sum(
                c.user + c.system for c in [server.cpu_times()] + [ch.cpu_times() for ch in server.children(True)]
            )
            p.start()
            cpu = q.get(timeout=600)
            p.join()
            after = sum(
                c.user + c.system for c in [server.cpu_times()] + [ch.cpu_times() for ch in server.children(True)]
            )
            # the emulator figure includes the warm-up requests (n + 200 or so)
            print(f"{name:48} {cpu / n * 1e6:11.0f} {n / cpu:11.0f} {(after - before) / n * 1e6:16.0f}", flush=True)


if __name__ == "__main__":
    main()
