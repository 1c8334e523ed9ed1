"""webpush_cpu_us: CPU per encrypted Web Push message in the worker (docs/WEB-PUSH.md, issue 32),
side by side in one run with a plain loop calling ``pywebpush`` for the same messages.

* Notee's side is the worker's path for a page: ``notee.usecases.deliver.deliver`` with the service's
  VAPID key (routing, ``WebPushProvider``: the subscription decoded from the token, RFC 8291
  encryption per device, the VAPID header cached per audience, Notee's HTTP/2 pool, classification),
  pages of ``PAGE`` messages.
* The baseline is the usual Python sender: ``pywebpush.webpush(...)`` once per message, with one
  ``requests`` session (keep-alive) and a ``Vapid`` object built once, so neither side pays a TLS
  handshake or a key parse per message; pywebpush signs a VAPID JWT per call, as it does.
* Both send to the emulator's push service (which checks the VAPID JWT and decrypts every message:
  its CPU is not counted), to ``SUBSCRIPTIONS`` subscriptions in turn (each its own keys), the same
  plaintext. Each side runs in its own freshly spawned process; CPU is that process's
  ``time.process_time()`` after a warm-up. Sides alternate, ``repeats`` times; medians are reported.

Where the time goes (``extra``): in Notee's process, per message, the P-256 key pair generation, the
ECDH + HKDF + AES-GCM of ``http_ece.encrypt`` (without the key generation), and the rest (the
token decoded, headers, HTTP/2, classification, delivery bookkeeping); in pywebpush's, its
``curl=True`` mode (everything but the HTTP request: encryption, JWT) against a real send.

    .venv/bin/python -m bench.webpush_cpu [messages]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.report import Measure, figure
from bench.workload import in_child

PAGE = 500
SUBSCRIPTIONS = 200
SUBJECT = "mailto:bench@example.com"
TITLE, BODY, DATA = "Bench title", "A benchmark push body of realistic length.", {"kind": "bench", "ref": "12345"}


def _pem() -> str:
    from notee.providers.webpush_crypto import generate_vapid_key

    return generate_vapid_key()


def _tokens(subs: list[dict[str, Any]]) -> list[str]:
    from notee.core import webpush_token

    return [
        webpush_token.encode(webpush_token.check_subscription(s["endpoint"], s["keys"]["p256dh"], s["keys"]["auth"]))
        for s in subs
    ]


def _messages(tokens: list[str], n: int, start: int = 0) -> list[Any]:
    from notee.providers.base import Message

    return [Message(tokens[(start + i) % len(tokens)], "WEB", TITLE, BODY, DATA, 3600, "high") for i in range(n)]


async def _notee(subs: list[dict[str, Any]], pem: str, n: int) -> dict[str, Any]:
    from notee.core.settings import Settings
    from notee.core.vocabulary import ProviderCredentials, WebPushCredentials
    from notee.providers.routing import ProviderSet
    from notee.store.runtime import Runtime
    from notee.usecases.deliver import DeliveryOptions, deliver

    settings = Settings()
    runtime = Runtime(settings)  # lazy: nothing connects unless a token is pruned or dead-lettered
    providers = ProviderSet(settings)
    options = DeliveryOptions(credentials=ProviderCredentials(webpush=WebPushCredentials(pem, SUBJECT)))
    tokens = _tokens(subs)
    await deliver(runtime, providers, "BENCHWEB", _messages(tokens, 100), options)  # warm-up: JWT, connection
    pages = [_messages(tokens, min(PAGE, n - i), i) for i in range(0, n, PAGE)]
    delivered = 0
    cpu = time.process_time()
    for page in pages:
        delivered += (await deliver(runtime, providers, "BENCHWEB", page, options)).delivered
    cpu = time.process_time() - cpu
    await providers.close()
    runtime.close()
    if delivered != n:
        raise AssertionError(f"notee delivered {delivered} of {n}")
    return {"n": n, "cpu_s": cpu, **_where_notee(subs, min(n, 2000))}


def _where_notee(subs: list[dict[str, Any]], n: int) -> dict[str, float]:
    """CPU per message of the key pair alone and of the whole encryption (same process, no I/O)."""
    import http_ece
    from cryptography.hazmat.primitives.asymmetric import ec

    from notee.core import webpush_token
    from notee.providers.webpush import plaintext

    decoded = [webpush_token.decode(t) for t in _tokens(subs)]
    text = plaintext(TITLE, BODY, DATA)
    t = time.process_time()
    for _ in range(n):
        ec.generate_private_key(ec.SECP256R1())
    keygen = (time.process_time() - t) / n
    t = time.process_time()
    for i in range(n):
        sub = decoded[i % len(decoded)]
        sender = ec.generate_private_key(ec.SECP256R1())
        http_ece.encrypt(text, private_key=sender, dh=sub.p256dh, auth_secret=sub.auth, version="aes128gcm")
    encrypt = (time.process_time() - t) / n
    return {"keygen_s": keygen, "encrypt_s": encrypt}


def notee_side(subs: list[dict[str, Any]], pem: str, n: int) -> dict[str, Any]:
    return asyncio.run(_notee(subs, pem, n))


def pywebpush_side(subs: list[dict[str, Any]], pem: str, n: int, ca_file: str) -> dict[str, Any]:
    import requests
    from pywebpush import Vapid, webpush

    from notee.providers.webpush import plaintext

    vapid = Vapid.from_pem(pem.encode())
    session = requests.Session()
    session.verify = ca_file
    data = plaintext(TITLE, BODY, DATA).decode()
    infos = [{"endpoint": s["endpoint"], "keys": s["keys"]} for s in subs]

    def one(i: int, curl: bool = False) -> Any:
        return webpush(
            infos[i % len(infos)],
            data,
            vapid_private_key=vapid,
            vapid_claims={"sub": SUBJECT},
            ttl=3600,
            headers={"Urgency": "high"},
            requests_session=session,
            curl=curl,
        )

    for i in range(100):  # warm-up: the connection
        one(i)
    cpu = time.process_time()
    for i in range(n):
        r = one(i)
        if r.status_code != 201:
            raise AssertionError(f"pywebpush got {r.status_code}: {r.text[:200]}")
    cpu = time.process_time() - cpu
    m = min(n, 2000)
    # curl=True writes the encrypted body to ./encrypted.data: keep it out of the checkout
    os.chdir(tempfile.mkdtemp(prefix="notee-bench-pywebpush-"))
    t = time.process_time()
    for i in range(m):
        one(i, curl=True)  # everything but the request
    prepare = (time.process_time() - t) / m
    session.close()
    return {"n": n, "cpu_s": cpu, "prepare_s": prepare}


def run(emulator: Any, *, n: int = 5000, repeats: int = 3) -> dict[str, Any]:
    subs = [emulator.web_subscribe("fcm") for _ in range(SUBSCRIPTIONS)]
    pem = _pem()
    notee_runs, py_runs = [], []
    for _ in range(repeats):
        notee_runs.append(in_child(notee_side, subs, pem, n))
        py_runs.append(in_child(pywebpush_side, subs, pem, n, emulator.ca_file))
    notee_us = statistics.median(r["cpu_s"] / r["n"] for r in notee_runs) * 1e6
    py_us = statistics.median(r["cpu_s"] / r["n"] for r in py_runs) * 1e6
    keygen_us = statistics.median(r["keygen_s"] for r in notee_runs) * 1e6
    encrypt_us = statistics.median(r["encrypt_s"] for r in notee_runs) * 1e6
    prepare_us = statistics.median(r["prepare_s"] for r in py_runs) * 1e6
    return figure(
        "webpush_cpu_us",
        Measure("notee_webpush_cpu_us_per_msg", notee_us, "µs"),
        Measure("pywebpush_cpu_us_per_msg", py_us, "µs"),
        {"messages": n, "repeats": repeats, "subscriptions": SUBSCRIPTIONS, "page": PAGE},
        extra={
            "notee_keygen_us": keygen_us,
            "notee_ece_without_keygen_us": encrypt_us - keygen_us,
            "notee_rest_us": notee_us - encrypt_us,
            "pywebpush_prepare_us": prepare_us,
            "pywebpush_request_us": py_us - prepare_us,
        },
    )


def main(argv: list[str]) -> int:
    """Run alone against a local emulator: ``python -m bench.webpush_cpu [messages]``."""
    from bench import env

    n = int(argv[0]) if argv else 5000
    with env.emulator() as emulator:
        print(json.dumps(run(emulator, n=n, repeats=3), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
