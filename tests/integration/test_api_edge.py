"""Limits at the edge (issue 15, item 1): body size, credentials before the body, JSON depth, URL and
header size, concurrency. In-process cases drive the ASGI app directly (so a test can see whether
the body was read at all); the memory test runs a real `notee api` process and measures its RSS.

The rules of this topic that need no server are in tests/unit/test_api_edge.py."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
from typing import Any

import httpx
import psutil
import pytest

from notee.api.app import create_app
from tests.support.registry import admin_headers
from tests.support.waiting import wait_for

MIB = 1024 * 1024

USER_DEVICES = "/v1/users/00000000-0000-0000-0000-000000000000/devices"

JSON = {"Content-Type": "application/json"}


class Asgi:
    """One request straight into the ASGI app; records how many body messages the app pulled."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def call(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        chunks: list[bytes] = (),
        chunked: bool = False,
        query: bytes = b"",
        raw_path: bytes | None = None,
    ) -> tuple[int, dict, int]:
        return asyncio.run(self._call(method, path, headers or {}, list(chunks), chunked, query, raw_path))

    async def _call(self, method, path, headers, chunks, chunked, query, raw_path, stall=False, stalled=None):
        """``stall``: the body never ends; ``stalled`` (an Event) is set once the app waits for more."""
        hdrs = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        if chunks and not chunked:
            hdrs.append((b"content-length", str(sum(map(len, chunks))).encode()))
        if chunked:
            hdrs.append((b"transfer-encoding", b"chunked"))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": raw_path or path.encode(),
            "query_string": query,
            "root_path": "",
            "headers": hdrs,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        pulled = 0
        pending = list(chunks)

        async def receive():
            nonlocal pulled
            if not pending:  # nothing more: a client that stopped sending
                if stalled is not None:
                    stalled.set()
                await asyncio.Event().wait()
            pulled += 1
            return {"type": "http.request", "body": pending.pop(0), "more_body": bool(pending) or stall}

        out: dict[str, Any] = {"body": b""}

        async def send(message):
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
                out["headers"] = dict(message["headers"])
            elif message["type"] == "http.response.body":
                out["body"] += message.get("body", b"")

        await asyncio.wait_for(self.app(scope, receive, send), 30)
        return out["status"], json.loads(out["body"]) if out["body"] else {}, pulled


@pytest.fixture(scope="module")
def asgi(client, app) -> Asgi:  # ``client`` ran the lifespan, so app.state.runtime exists
    return Asgi(app)


@pytest.fixture(scope="module")
def tenant(module_tenant) -> dict[str, str]:
    """The family's tenant of this module: its auth headers are what these tests send."""
    return module_tenant.headers


def _error(body: dict, code: str) -> None:
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert set(body["error"]) == {"code", "message", "details"}


def test_declared_content_length_over_the_limit_is_413_without_reading_the_body(asgi, tenant, settings):
    big = [b"x" * (settings.api_max_body_bytes + 1)]
    status, body, pulled = asgi.call("POST", USER_DEVICES, headers=tenant, chunks=big)
    assert status == 413 and pulled == 0
    _error(body, "request_too_large")


def test_chunked_body_is_cut_off_at_the_limit(asgi, tenant, settings):
    chunk = b" " * 65536
    n = settings.api_max_body_bytes // len(chunk) + 4
    status, body, pulled = asgi.call("POST", USER_DEVICES, headers=tenant, chunks=[chunk] * n, chunked=True)
    assert status == 413
    _error(body, "request_too_large")
    assert pulled == settings.api_max_body_bytes // len(chunk) + 1  # stopped at the first chunk past the limit


@pytest.mark.parametrize(
    "path,headers_of,status,code",
    [
        (USER_DEVICES, lambda s: {}, 401, "unauthorized"),
        (USER_DEVICES, lambda s: {"Authorization": "Bearer nk_0123456789abcdef_" + "A" * 43}, 401, "unauthorized"),
        ("/v1/admin/services", lambda s: {}, 401, "unauthorized"),
        ("/v1/admin/services", lambda s: {"Authorization": "Bearer not-the-token"}, 401, "unauthorized"),
    ],
)
def test_credentials_are_checked_before_the_body_is_read(asgi, settings, path, headers_of, status, code):
    got, body, pulled = asgi.call("POST", path, headers=headers_of(settings), chunks=[b'{"a": 1}'] * 3, chunked=True)
    assert (got, pulled) == (status, 0)
    _error(body, code)


def test_disabled_admin_api_is_403_before_the_body_is_read(runtime, settings):
    app = create_app(settings.model_copy(update={"admin_token": None}), runtime=runtime)
    app.state.runtime = runtime
    got, body, pulled = Asgi(app).call("POST", "/v1/admin/services", chunks=[b"{}"], chunked=True)
    assert (got, pulled) == (403, 0)
    _error(body, "forbidden")


def test_valid_credentials_get_the_body_read_and_parsed(asgi, tenant):
    got, body, pulled = asgi.call(
        "PUT", "/v1/users/edge-user", headers=tenant | JSON, chunks=[b'{"name": ', b'"x"}'], chunked=True
    )
    assert got == 201 and body["name"] == "x" and pulled == 2


def test_deeply_nested_json_is_422_before_parsing(asgi, tenant, settings):
    deep = b"[" * 10_000 + b"]" * 10_000
    got, body, _ = asgi.call("PUT", "/v1/users/edge-deep", headers=tenant, chunks=[b'{"name": ' + deep + b"}"])
    assert got == 422
    _error(body, "invalid_input")
    assert body["error"]["details"][0]["type"] == "json_depth"


def test_long_url_is_414(asgi, tenant, settings):
    path = "/v1/users/" + "u" * settings.api_max_url_bytes
    got, body, _ = asgi.call("GET", path, headers=tenant)
    assert got == 414
    _error(body, "uri_too_long")


def test_concurrency_limit_answers_503_in_the_error_format(runtime, settings, tenant):
    app = create_app(settings.model_copy(update={"api_max_concurrency": 1}), runtime=runtime)
    app.state.runtime = runtime
    asgi = Asgi(app)

    async def both():
        # The first request's body never finishes: it holds the only slot while the second arrives.
        stalled = asyncio.Event()
        first = asyncio.create_task(
            asgi._call("PUT", "/v1/users/edge-slow", tenant, [b'{"name": '], True, b"", None, True, stalled)
        )
        await asyncio.wait_for(stalled.wait(), 30)  # the app waits for the rest of the body, in the slot
        second = await asgi._call("GET", "/healthz", {}, [], False, b"", None)
        first.cancel()
        return second

    got, body, _ = asyncio.run(both())
    assert got == 503
    _error(body, "overloaded")


def test_twenty_concurrent_50mb_uploads_leave_memory_flat_and_health_answering(processes, client, settings):
    """Issue 15: before the edge guard one unauthenticated 30 MB body took the API from 103 MB to
    887 MB (and two 50 MB bodies to 2,651 MB); now the bodies are refused unread."""
    api = processes.api()
    proc = psutil.Process(api.pid)
    key = new_service_over_http(api.url, settings)
    before = proc.memory_info().rss
    peak, health, stop = [before], [], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            try:
                health.append(httpx.get(api.url + "/healthz", timeout=10).status_code)
            except httpx.HTTPError as exc:
                health.append(type(exc).__name__)
            stop.wait(0.05)

    results: list[tuple[str, int]] = []

    def one(i: int):
        kind = ("content-length, no credentials", "chunked, no credentials", "chunked, valid key")[i % 3]
        headers = {"Authorization": f"Bearer {key}"} if i % 3 == 2 else {}
        results.append((kind, upload(api.port, USER_DEVICES, 50 * MIB, chunked=i % 3 != 0, headers=headers)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    checked = len(health)  # memory and health once the uploads are over, too
    wait_for(lambda: len(health) >= checked + 3, timeout=60, interval=0.05, what="three health checks more")
    stop.set()
    watcher.join()
    after = proc.memory_info().rss
    print(
        f"\nedge: 20 x 50 MB uploads: API RSS {before / MIB:.0f} MB before, peak {peak[0] / MIB:.0f} MB, "
        f"after {after / MIB:.0f} MB; {len(health)} health checks"
    )
    assert len(results) == 20
    expected = {"content-length, no credentials": 413, "chunked, no credentials": 401, "chunked, valid key": 413}
    assert all(status == expected[kind] for kind, status in results), results
    assert peak[0] - before < 50 * MIB, (before, peak[0])
    assert health and all(s == 200 for s in health), health


def test_oversized_headers_are_431(asgi, settings):
    got, body, _ = asgi.call("GET", "/healthz", headers={"X-Pad": "p" * settings.api_max_header_bytes})
    assert got == 431
    _error(body, "headers_too_large")


def test_oversized_headers_are_refused_by_the_server_process(processes):
    api = processes.api()
    ok = httpx.get(api.url + "/healthz", headers={"X-Pad": "p" * 1000}, timeout=10)
    assert ok.status_code == 200
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
        # Sent in small pieces: the server must stop buffering the head at the limit (h11: 400).
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(64):
                sock.sendall(b"X-Pad: " + b"p" * 1000 + b"\r\n")
                if select.select([sock], [], [], 0.01)[0]:  # the server answered (or closed): stop
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:100]
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
        # Arrived whole: measured by the edge guard (431 in the error format).
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 20_000 + b"\r\n\r\n")
        answer = sock.recv(4096)
    assert answer.split(b"\r\n")[0] in (b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 431 Request Header Fields Too Large")
    assert httpx.get(api.url + "/healthz", timeout=10).status_code == 200


def new_service_over_http(url: str, settings) -> str:
    service = "EDGE" + __import__("secrets").token_hex(4).upper()
    r = httpx.post(
        url + "/v1/admin/services",
        json={"service": service, "display_name": "edge"},
        headers=admin_headers(settings),
        timeout=30,
    )
    assert r.status_code == 201, r.text
    r = httpx.post(url + f"/v1/admin/services/{service}/api-keys", json={}, headers=admin_headers(settings), timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["api_key"]


def upload(
    port: int,
    path: str,
    size: int,
    *,
    chunked: bool,
    headers: dict[str, str] | None = None,
    chunk: int = 64 * 1024,
    timeout: float = 120.0,
) -> int:
    """POST ``size`` bytes of JSON-looking body, streamed; stop sending as soon as the server answers
    (a real client does the same). Returns the status code of the answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        # A valid JSON document that is costly to parse: one long array of empty objects, "[{},{},...,{}]".
        size = 4 + 3 * ((size - 4) // 3)
        head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        filler = b"{}," * (chunk // 3)
        sent = 0
        while sent < size:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered before the body was complete
            if sent == 0:
                part = b"["
            elif size - sent == 3:
                part = b"{}]"
            else:
                part = filler[: min(len(filler), size - sent - 3)]
            try:
                sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n" if chunked else part)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(part)
        else:
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            got = sock.recv(4096)
            if not got:
                raise ConnectionError(f"connection closed without an answer after {sent} bytes")
            data += got
        return int(data.split(b" ", 2)[1])
    finally:
        sock.close()
