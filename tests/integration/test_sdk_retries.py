"""The SDK's retries (clients/python/notee_sdk/client.py), sync and async clients alike: 429 is
retried for every operation; 502, 503, 504, a dropped connection and a read timeout only for
repeatable ones (``Op.repeatable``), so that a retry never does the work twice; ``Retry-After`` is
honoured as seconds and as an HTTP date; no wait exceeds ``max_retry_wait``.

The failures a real API does not give on demand (a connection dropped mid-request, an answer that
never comes, a gateway's 502/504) come from ``Scripted``: a small HTTP/1.1 server on a real socket
that answers each request as its script says and counts them. 429 comes from the real API's rate
limiter."""

from __future__ import annotations

import asyncio
import email.utils
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from notee_sdk import AsyncClient, Client, RateLimited, ServerError, Unavailable
from notee_sdk._ops import Op

OK = ("answer", 200, {}, {"ok": True})


class Scripted:
    """One action per request, in order (the last repeats): ``("answer", status, headers, body)``,
    ``("drop",)`` (close after reading the request: no answer), ``("reset",)`` (the same with a TCP
    reset) or ``("hang", seconds)`` (answer nothing for that long). Every answer closes its connection."""

    def __init__(self, *script: tuple[Any, ...]) -> None:
        self.script = list(script)
        self.requests: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            while len(rest) < length:
                rest += conn.recv(65536)
            self.requests.append(head.split(b"\r\n")[0].decode())
            action = self.script[min(len(self.requests), len(self.script)) - 1]
            self._act(conn, action)

    @staticmethod
    def _act(conn: socket.socket, action: tuple[Any, ...]) -> None:
        if action[0] == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif action[0] == "hang":
            time.sleep(action[1])
        elif action[0] == "answer":
            _, status, headers, body = action
            payload = json.dumps(body).encode()
            lines = [f"HTTP/1.1 {status} X", "Content-Type: application/json", f"Content-Length: {len(payload)}"]
            lines += [f"{k}: {v}" for k, v in headers.items()] + ["Connection: close", "", ""]
            conn.sendall("\r\n".join(lines).encode() + payload)

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


@pytest.fixture()
def scripted() -> Iterator[Any]:
    made: list[Scripted] = []

    def make(*script: tuple[Any, ...]) -> Scripted:
        made.append(Scripted(*script))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _error(status: int, code: str = "unavailable", **headers: str) -> tuple[Any, ...]:
    return ("answer", status, headers, {"error": {"code": code, "message": "try later", "details": []}})


GET = Op("GET", "/v1/thing", parse=lambda body: body)
POST_ONCE = Op("POST", "/v1/thing", parse=lambda body: body, json={"a": 1}, repeatable=False)
POST_KEYED = Op("POST", "/v1/thing", parse=lambda body: body, json={"a": 1}, headers={"Idempotency-Key": "k1"})


def call(kind: str, url: str, op: Op[Any], **options: Any) -> Any:
    """``op`` through a sync or an async client of ``url``; options as the clients take them."""
    options = {"api_key": "nk_test", "backoff": 0.001} | options
    if kind == "sync":
        with Client(url, **options) as c:
            return c.call(op)

    async def run() -> Any:
        async with AsyncClient(url, **options) as c:
            return await c.call(op)

    return asyncio.run(run())


KINDS = ["sync", "async"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("failure", [("drop",), ("reset",), ("hang", 2.0)], ids=lambda f: f[0])
def test_a_repeatable_operation_is_sent_again_after_a_dropped_connection_or_a_read_timeout(scripted, kind, failure):
    for op in (GET, POST_KEYED):
        server = scripted(failure, OK)
        assert call(kind, server.url, op, timeout=0.5) == {"ok": True}
        assert len(server.requests) == 2, server.requests


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("failure", "raised"),
    [(("drop",), httpx.RemoteProtocolError), (("reset",), httpx.TransportError), (("hang", 2.0), httpx.ReadTimeout)],
    ids=["drop", "reset", "hang"],
)
def test_an_operation_that_is_not_repeatable_is_sent_once(scripted, kind, failure, raised):
    """The server may have done the work before the connection went: sending again could do it twice."""
    server = scripted(failure, OK)
    with pytest.raises(raised):
        call(kind, server.url, POST_ONCE, timeout=0.5)
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [502, 503, 504])
def test_gateway_and_unavailable_answers_are_retried_for_repeatable_operations_only(scripted, kind, status):
    server = scripted(_error(status, **{"Retry-After": "0"}), OK)
    assert call(kind, server.url, GET) == {"ok": True}
    assert len(server.requests) == 2
    server = scripted(_error(status, **{"Retry-After": "0"}), OK)
    with pytest.raises(Unavailable if status == 503 else ServerError):
        call(kind, server.url, POST_ONCE)
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_retries_run_out_and_the_last_error_is_raised(scripted, kind):
    server = scripted(_error(504))
    with pytest.raises(ServerError) as raised:
        call(kind, server.url, GET, max_retries=2)
    assert raised.value.status == 504 and len(server.requests) == 3
    server = scripted(("drop",))
    with pytest.raises(httpx.RemoteProtocolError):
        call(kind, server.url, GET, max_retries=2)
    assert len(server.requests) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_429_is_retried_even_for_an_operation_that_is_not_repeatable(scripted, kind):
    server = scripted(_error(429, "rate_limited", **{"Retry-After": "0"}), OK)
    assert call(kind, server.url, POST_ONCE) == {"ok": True}
    assert len(server.requests) == 2


def _http_date(seconds_ahead: float) -> str:
    return email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=seconds_ahead), usegmt=True)


def _timed(kind: str, server: Scripted, **options: Any) -> float:
    started = time.monotonic()
    assert call(kind, server.url, GET, **options) == {"ok": True}
    assert len(server.requests) == 2
    return time.monotonic() - started


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured_as_seconds_and_as_an_http_date(scripted, kind, status):
    """The backoff alone would wait about a millisecond: a wait of a second is Retry-After's."""
    assert 0.95 <= _timed(kind, scripted(_error(status, **{"Retry-After": "1"}), OK)) < 3
    # An HTTP date has whole seconds: 2.5 s ahead is 1.5 to 2.5 s away.
    assert 1.2 <= _timed(kind, scripted(_error(status, **{"Retry-After": _http_date(2.5)}), OK)) < 4


@pytest.mark.parametrize("kind", KINDS)
def test_no_wait_exceeds_max_retry_wait(scripted, kind):
    for retry_after in ("30", _http_date(30)):
        assert _timed(kind, scripted(_error(503, **{"Retry-After": retry_after}), OK), max_retry_wait=0.2) < 1.5
    # The backoff is capped too (100 s doubled per attempt, without a Retry-After).
    assert _timed(kind, scripted(_error(502), OK), backoff=100, max_retry_wait=0.2) < 1.5


# --- against the real API: its rate limiter's 429 -----------------------------------------------------


@pytest.fixture()
def limited(api_process, settings, service_id):
    """A service whose reads are limited to one a second (burst 1), and its API key."""
    with Client(api_process.url, admin_token=settings.admin_token.get_secret_value(), max_retries=0) as admin:
        admin.create_service(service_id, f"Retries {service_id}")
        key = admin.create_api_key(service_id, label="retries").api_key
        admin.put_rate_limit(service_id, "read", rate=1.0, burst=1)
    return api_process.url, key


@pytest.mark.parametrize("kind", KINDS)
def test_the_real_rate_limiters_429_is_waited_out(limited, kind):
    url, key = limited
    with Client(url, api_key=key, max_retries=0) as c:
        c.list_users()  # the burst
        with pytest.raises(RateLimited) as raised:
            c.list_users()
        assert raised.value.retry_after is not None and 0 < raised.value.retry_after <= 2
    time.sleep(1.1)  # the bucket refills

    async def twice() -> None:
        async with AsyncClient(url, api_key=key, max_retries=3) as c:
            await c.list_users()
            await c.list_users()

    started = time.monotonic()
    if kind == "sync":
        with Client(url, api_key=key, max_retries=3) as c:
            c.list_users()
            c.list_users()  # 429, then Retry-After's wait, then answered
    else:
        asyncio.run(twice())
    assert time.monotonic() - started >= 0.5
