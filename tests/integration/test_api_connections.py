"""Hostile clients against a real `notee api` over real sockets (issue 31, docs/API.md "Limits at the
edge"): the head-read deadline, the per-address connection cap, keep-alive limits, a URL too long
to finish. Loopback addresses 127.0.0.2, 127.0.0.3 ... all reach the server bound on 127.0.0.1 and
are distinct clients to it.

The rules that need no server are in tests/unit/test_api_connections.py; the slow clients are
bench/hostile.py's (the bystander figure: docs/API.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import time
from collections.abc import Iterator

import pytest

from bench.hostile import SlowHeaders, Target
from tests.support.processes import NoteeProcess, Processes, read_all
from tests.support.waiting import wait_for

HEAD_TIMEOUT_S = 1.5
PER_ADDRESS = 5
MAX_REQUESTS = 50  # the keep-alive test asks again every poll while it waits
IN_PROGRESS_PER_ADDRESS = 2
BODY_IDLE_S = 5.0
KEEPALIVE_S = 2  # NOTEE_API_KEEPALIVE_TIMEOUT_S (default 5): whole seconds


@pytest.fixture(scope="module")
def api(migrated: None) -> Iterator[NoteeProcess]:
    with Processes() as procs:
        yield procs.api(
            NOTEE_API_HEAD_TIMEOUT_S=str(HEAD_TIMEOUT_S),
            NOTEE_API_MAX_CONNECTIONS_PER_ADDRESS=str(PER_ADDRESS),
            NOTEE_API_KEEPALIVE_MAX_REQUESTS=str(MAX_REQUESTS),
            NOTEE_API_MAX_CONCURRENCY_PER_ADDRESS=str(IN_PROGRESS_PER_ADDRESS),
            NOTEE_API_BODY_IDLE_TIMEOUT_S=str(BODY_IDLE_S),
            NOTEE_API_KEEPALIVE_TIMEOUT_S=str(KEEPALIVE_S),
        )


def _connect(api: NoteeProcess, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", api.port), timeout=10, source_address=(source, 0))


def _answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _get(api: NoteeProcess, source: str) -> int:
    return _get_answer(api, source)[0]


def _get_answer(api: NoteeProcess, source: str) -> tuple[int, dict[str, str], bytes]:
    with _connect(api, source) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return _answer(read_all(sock))


def test_a_head_sent_a_line_at_a_time_is_answered_408_and_closed_at_the_deadline(api):
    """Slowloris: a header line every 0.3 s keeps the head unfinished; the server answers 408 once
    the deadline from the accept has passed, and closes the connection."""
    with _connect(api, "127.0.0.4") as sock:
        began = time.monotonic()
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(0.3)
        raw, i = b"", 0
        while time.monotonic() - began < HEAD_TIMEOUT_S + 10:  # without a deadline: open all along
            try:
                raw = sock.recv(65536)
                break
            except TimeoutError:
                sock.sendall(b"X-Slow-%d: x\r\n" % i)
                i += 1
        closed_after = time.monotonic() - began
        sock.settimeout(5)
        raw += read_all(sock)
    assert raw, f"the server kept a head unfinished for {closed_after:.1f} s"
    status, headers, body = _answer(raw)
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "request_timeout"
    # a sweep runs 4 times per deadline (and at most every second): closed within a quarter of it after
    assert HEAD_TIMEOUT_S <= closed_after < HEAD_TIMEOUT_S * 1.25 + 2.0, closed_after


def test_a_connection_that_never_sends_a_byte_is_closed_at_the_deadline(api):
    with _connect(api, "127.0.0.4") as sock:
        began = time.monotonic()
        raw = read_all(sock)  # the socket's 10 s timeout: an empty read if the server never closes
        closed_after = time.monotonic() - began
    assert raw, f"an idle new connection was kept {closed_after:.1f} s"
    assert _answer(raw)[0] == 408 and closed_after < HEAD_TIMEOUT_S * 1.25 + 2.0


def test_a_kept_alive_connection_is_closed_after_its_last_allowed_request(api):
    with _connect(api, "127.0.0.4") as sock:
        request = b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(request * MAX_REQUESTS)  # pipelined: the last one's answer says close
        raw = read_all(sock)
    assert raw.count(b"HTTP/1.1 200 ") == MAX_REQUESTS
    assert raw.lower().count(b"connection: close") == 1


def _one_answer(sock: socket.socket) -> tuple[int, dict[str, str]]:
    """Read exactly one answer (head and its Content-Length body) off a kept-alive connection."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        data = sock.recv(65536)
        assert data, f"closed before an answer: {raw!r}"
        raw += data
    status, headers, body = _answer(raw)
    while len(body) < int(headers.get("content-length", "0")):
        body += sock.recv(65536)
    return status, headers


def _closed(sock: socket.socket) -> bool:
    """Whether the server has closed the connection (read without waiting: nothing else is owed)."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_a_kept_alive_connection_idle_past_its_timeout_is_closed_and_one_in_use_is_not(api):
    """NOTEE_API_KEEPALIVE_TIMEOUT_S: after an answer, a connection that sends nothing for that long
    is closed by the server; one whose next request comes sooner is served on, however long it
    lives. Both are answered once, then the busy one asks again at every poll while the idle one
    is awaited: it must close after the timeout (not before), the busy one outlive it."""
    request = b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(api, "127.0.0.10") as idle, _connect(api, "127.0.0.11") as busy:
        for sock in (idle, busy):
            sock.sendall(request)
            status, headers = _one_answer(sock)
            assert status == 200 and headers.get("connection", "").lower() != "close"
        answered = time.monotonic()

        def idle_closed() -> bool:
            busy.sendall(request)
            assert _one_answer(busy)[0] == 200 and not _closed(busy)
            return _closed(idle)

        wait_for(idle_closed, timeout=KEEPALIVE_S + 10, interval=0.3, what="the idle connection closed")
        closed_after = time.monotonic() - answered
        busy.sendall(request)
        assert _one_answer(busy)[0] == 200  # still open: its own idle time never reached the timeout
    assert KEEPALIVE_S - 0.1 <= closed_after < KEEPALIVE_S + 3, closed_after


def test_another_address_is_served_while_one_address_is_at_its_cap(api):
    held = [_connect(api, "127.0.0.2") for _ in range(PER_ADDRESS)]
    try:
        for sock in held:
            sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")  # a head never finished

        def refused() -> tuple[int, dict[str, str], bytes] | None:
            with _connect(api, "127.0.0.2") as extra:  # the server may not have counted them all yet
                with contextlib.suppress(OSError):  # refused before the request was written
                    extra.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                answer = _answer(read_all(extra))
            return answer if answer[0] == 429 else None

        _, headers, body = wait_for(refused, timeout=HEAD_TIMEOUT_S - 0.5, what="a 429 over the cap")
        assert headers["connection"] == "close" and headers["retry-after"] == "1"
        assert json.loads(body)["error"]["code"] == "too_many_connections"
        assert _get(api, "127.0.0.3") == 200  # another address: served meanwhile
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: _get(api, "127.0.0.2") == 200, timeout=10, what="the address served again once it let go")


def test_two_hundred_slow_connections_from_one_address_leave_another_served(api):
    """bench/hostile.py's slow client (the one a chaos run's hostile phase uses): one address holds
    200 slow-header connections; another address's requests are all answered 200 meanwhile."""

    async def scenario() -> tuple[list[int], dict[str, int]]:
        slow = SlowHeaders(Target("127.0.0.1", api.port, "127.0.0.5"), 200, interval_s=0.5)
        stop = asyncio.Event()
        attack = asyncio.create_task(slow.run(stop))
        try:
            while sum(slow.stats.ended.values()) < 100:  # the cap refused most of them at least once
                await asyncio.sleep(0.05)
            statuses = [await asyncio.to_thread(_get, api, "127.0.0.6") for _ in range(20)]
        finally:
            stop.set()
            await attack
        return statuses, dict(slow.stats.ended)

    statuses, ended = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert statuses == [200] * 20
    assert ended.get("429", 0) >= 100 and set(ended) <= {"429", "408"}, ended


def test_a_url_of_ten_thousand_query_parameters_is_414(api, settings):
    query = "&".join(f"p{i}=1" for i in range(10_000))
    with _connect(api, "127.0.0.4") as sock:
        try:
            sock.sendall(f"GET /v1/users?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before the whole URL was sent
        raw = read_all(sock)
    status, headers, body = _answer(raw)
    assert status == 414 and headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["code"] == "uri_too_long" and str(settings.api_max_url_bytes) in error["message"]


def test_bodies_sent_slowly_from_one_address_hold_only_its_share_of_the_requests_in_progress(api):
    """A body that never finishes keeps its request in progress (the edge reads it): one address may
    hold NOTEE_API_MAX_CONCURRENCY_PER_ADDRESS of them, not every slot of the process."""
    held = [_connect(api, "127.0.0.7") for _ in range(IN_PROGRESS_PER_ADDRESS)]
    try:
        for sock in held:  # no credentials needed off /v1: a console form
            sock.sendall(
                b"POST /console/sign-in HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nsecret="
            )
        _, _, body = wait_for(
            lambda: (a := _get_answer(api, "127.0.0.7"))[0] == 503 and a,
            timeout=BODY_IDLE_S - 1,  # before the bodies' idle timeout frees the slots
            what="the address's next request refused",
        )
        assert json.loads(body)["error"]["code"] == "overloaded"
        assert _get(api, "127.0.0.8") == 200  # another address: served
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: _get(api, "127.0.0.7") == 200, timeout=10, what="the address served again once it let go")


def test_a_body_that_stops_arriving_is_answered_408_and_its_slot_freed(api):
    with _connect(api, "127.0.0.9") as sock:
        began = time.monotonic()
        sock.sendall(
            b"POST /console/sign-in HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nsecret="
        )
        sock.settimeout(BODY_IDLE_S + 10)
        raw = read_all(sock)
        closed_after = time.monotonic() - began
    assert raw, f"a body silent for {closed_after:.1f} s kept its request in progress"
    status, headers, body = _answer(raw)
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert BODY_IDLE_S <= closed_after < BODY_IDLE_S + 3, closed_after
