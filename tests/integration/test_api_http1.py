"""The API's HTTP/1.1 protocol (notee/api/http1.py): httptools with Notee's bound on the request head,
and a response written in one piece. The limits of the edge itself are in tests/integration/test_api_edge.py.

The rules of this topic that need no server are in tests/unit/test_api_http1.py."""

from __future__ import annotations

import json
import select
import socket
import time

import pytest

from tests.support.processes import Processes, read_all


def _answers(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Split HTTP/1.1 responses with Content-Length bodies."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        size = int(headers["content-length"])
        out.append((int(lines[0].split()[1]), headers, rest[:size]))
        raw = rest[size:]
    return out


@pytest.fixture(scope="module")
def api_port():
    with Processes() as procs:
        yield procs.api().port


def test_a_header_value_that_never_ends_is_refused_at_the_limit(api_port, settings):
    """httptools would grow one header value without bound; the protocol answers 400 in the error
    format once the unfinished head passes api_max_header_bytes, and closes the connection."""
    sent = 0
    with socket.create_connection(("127.0.0.1", api_port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        try:
            for _ in range(1024):  # up to 1 MiB, no line end, a KiB at a time
                sock.sendall(b"p" * 1024)
                sent += 1024
                if select.select([sock], [], [], 0.002)[0]:  # the server answered (or closed): stop
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        raw = read_all(sock)
    ((status, headers, body),) = _answers(raw)
    assert status == 400 and headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["code"] == "headers_too_large" and str(settings.api_max_header_bytes) in error["message"]
    assert sent < 1024 * 1024, "the server read the whole megabyte instead of stopping at the limit"


def test_a_head_just_under_the_limit_is_served(api_port, settings):
    pad = settings.api_max_header_bytes - 200
    with socket.create_connection(("127.0.0.1", api_port), timeout=10) as sock:
        for piece in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: ", b"p" * pad, b"\r\n\r\n"):
            sock.sendall(piece)
            # The subject: a head that reaches the server in pieces. Nothing the client can see marks a
            # piece read, so a pause between them stays (0.15 s in all).
            time.sleep(0.05)
        ((status, _, _),) = _answers(read_all(sock))
    assert status in (200, 503)  # /healthz: 503 only while a store is down


def test_pipelined_requests_are_each_answered_in_order(api_port):
    """Two requests in one segment: two whole answers, each with its own request id."""
    with socket.create_connection(("127.0.0.1", api_port), timeout=10) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-ID: first\r\n\r\n"
            b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\nX-Request-ID: second\r\nConnection: close\r\n\r\n"
        )
        answers = _answers(read_all(sock))
    assert [(a[1]["x-request-id"]) for a in answers] == ["first", "second"]
    assert answers[0][0] in (200, 503) and answers[1][0] == 401  # /v1 without a key: refused by the edge
    assert json.loads(answers[1][2])["error"]["code"] == "unauthorized"


def test_a_malformed_request_is_400_in_the_error_format(api_port):
    with socket.create_connection(("127.0.0.1", api_port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        ((status, headers, body),) = _answers(read_all(sock))
    assert status == 400 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "invalid_request"
