"""A real HTTPS webhook receiver for tests: a threaded ``http.server`` on 127.0.0.1 with a certificate
signed by its own test CA (the dispatcher is told to trust that CA through NOTEE_WEBHOOK_CA_FILE,
like the emulator's). It records every request (headers and raw body), checks each signature with
the endpoint's secret once the test gives it, and answers 500 while ``failing`` is set (or for the
first ``fail_first`` requests). Its URL's path is its own (random): the shared outbox may hold
earlier tests' or earlier runs' deliveries to a 127.0.0.1 port this receiver now has, and those are
answered 404 and not recorded."""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from notee.core.settings import Settings
from notee.domain.webhooks import SIGNATURE_HEADER, signature
from notee.emulator.tls import ensure_tls
from notee.store.runtime import Runtime
from notee.webhooks.dispatcher import Dispatcher


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered
    signature_ok: bool | None  # None: no secret known yet when it arrived

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


@dataclass
class Receiver:
    ca_file: Path
    port: int = 0
    secret: str | None = None
    failing: bool = False
    fail_first: int = 0
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    path: str = field(default_factory=lambda: f"/hooks/{secrets.token_hex(8)}")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{self.path}"

    def events(self, type_: str | None = None, *, answered: int | None = 200) -> list[dict[str, Any]]:
        """Bodies answered with ``answered`` (None: all), optionally of one type."""
        with self.lock:
            rows = list(self.received)
        return [
            r.event
            for r in rows
            if (answered is None or r.status == answered) and (type_ is None or r.event["type"] == type_)
        ]

    def check(self, headers: dict[str, str], body: bytes) -> bool | None:
        """Verify ``Notee-Signature: t=...,v1=...`` as a receiver would (constant-time compare)."""
        if self.secret is None:
            return None
        parts = dict(p.split("=", 1) for p in headers.get(SIGNATURE_HEADER, "").split(",") if "=" in p)
        if "t" not in parts or "v1" not in parts:
            return False
        return hmac.compare_digest(signature(self.secret, int(parts["t"]), body), f"t={parts['t']},v1={parts['v1']}")


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if not self.path.startswith(receiver.path):  # not this receiver's endpoint: another run's port
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            headers = {k: v for k, v in self.headers.items()}
            with receiver.lock:
                fail = receiver.failing or len(receiver.received) < receiver.fail_first
                status = 500 if fail else 200
                receiver.received.append(Received(headers, body, status, receiver.check(headers, body)))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


def start_receiver(state_dir: Path) -> Iterator[Receiver]:
    tls = ensure_tls(state_dir)
    receiver = Receiver(ca_file=tls.ca_cert)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.server_cert, tls.server_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def dispatch_until_idle(settings: Settings) -> Dispatcher:
    """Run a webhook dispatcher with ``settings`` until nothing is due, then close it; the stopped
    dispatcher is returned for its counts."""

    async def go() -> Dispatcher:
        runtime = Runtime(settings)
        dispatcher = Dispatcher(runtime)
        try:
            await dispatcher.run(until_idle=True)
        finally:
            await dispatcher.close()
            runtime.close()
        return dispatcher

    return asyncio.run(go())
