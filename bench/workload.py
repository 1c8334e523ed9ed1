"""What the sender benchmarks send and Notee's side of them: the bench tenant's messages (FCM and
APNs), its APNs credentials, Notee's ``deliver()`` over pages as the fan-out worker calls it
(``notee_side``), and ``in_child`` (each side in a freshly spawned process). Shared by
bench/send_cpu.py, bench/engines.py and bench/gorush.py, which import it and never each other's
internals.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from typing import Any

PROJECT = "notee-bench"
SERVICE = "BENCH"
APNS_TOPIC = "com.example.bench"
IN_FLIGHT = 100  # Notee's pool: one connection, max_streams=100 (providers/routing.py)


def fcm_messages(n: int, offset: int = 0):
    from bench.seed import fcm_like_token
    from notee.providers.base import Message

    return [
        Message(
            fcm_like_token(offset + i),
            "AOS",
            "Bench title",
            "A benchmark push body of realistic length.",
            {"kind": "bench", "ref": "12345"},
            3600,
            "high",
        )
        for i in range(n)
    ]


def apns_messages(n: int, offset: int = 0):
    from notee.providers.base import Message

    return [
        Message(
            f"{offset + i:064x}",
            "IOS",
            "Bench title",
            "A benchmark push body of realistic length.",
            {"kind": "bench", "ref": "12345"},
            3600,
            "high",
        )
        for i in range(n)
    ]


def apns_credentials():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from notee.core.vocabulary import ApnsCredentials, ProviderCredentials

    key = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    return ProviderCredentials(apns=ApnsCredentials("BENCHKEY01", "BENCHTEAM1", APNS_TOPIC, key, True))


async def _notee(n: int, page: int, api: str = "fcm") -> dict[str, Any]:
    from bench.tenant import bench_service_account
    from notee.core.settings import Settings
    from notee.core.vocabulary import FcmCredentials, ProviderCredentials
    from notee.providers.routing import ProviderSet
    from notee.store.runtime import Runtime
    from notee.usecases.deliver import DeliveryOptions, deliver

    settings = Settings()
    if not settings.emulator_url:
        raise RuntimeError("NOTEE_EMULATOR_URL is not set")
    runtime = Runtime(settings)  # lazy: nothing connects unless a token is pruned or dead-lettered
    providers = ProviderSet(settings)
    build = apns_messages if api == "apns" else fcm_messages
    # credentials for every device's platform (a device without them would not be sent)
    credentials = (
        apns_credentials() if api == "apns" else ProviderCredentials(fcm=FcmCredentials(bench_service_account()))
    )
    pages = [build(min(page, n - i), i) for i in range(0, n, page)]
    options = DeliveryOptions(credentials=credentials)
    # warm-up outside the measurement: the FCM access token / the APNs JWT and first connection
    await deliver(runtime, providers, SERVICE, build(1, n), options)
    delivered = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for msgs in pages:
        result = await deliver(runtime, providers, SERVICE, msgs, options)
        delivered += result.delivered
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await providers.close()
    runtime.close()
    if delivered != n:
        raise AssertionError(f"notee sender delivered {delivered} of {n}")
    return {"n": n, "cpu_s": cpu, "wall_s": wall}


def notee_side(n: int, page: int, api: str = "fcm") -> dict[str, Any]:
    return asyncio.run(_notee(n, page, api))


def in_child(fn, *args):
    """Run ``fn(*args)`` in a freshly spawned process (clean CPU accounting, no shared threads)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)
