"""The hostile-client phase: simple attackers against one API process while the tenants work.

- slow headers: connections that send a header line every 2 s and never finish the request;
- a connection flood: many connections opened at once, each sending one request;
- oversized bodies: a declared Content-Length far over the limit, then a trickle;
- malformed bodies: broken JSON, wrong types, deep nesting, bad framing.
Each probe writes a ``hostile`` line: what it sent and the statuses it got (0: no answer / closed).
The invariants of the run must hold meanwhile; a 5xx other than 503 is a violation.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

from chaos.record import Recorder


def _status(sock: socket.socket) -> int:
    """The status code of the answer on ``sock``, 0 if it closed or said nothing in time."""
    try:
        head = sock.recv(64)
    except OSError:
        return 0
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _connect(host: str, port: int) -> socket.socket | None:
    try:
        s = socket.create_connection((host, port), timeout=5)
    except OSError:
        return None
    s.settimeout(10)
    return s


def slow_headers(host: str, port: int, n: int, seconds: float, statuses: Counter[int]) -> int:
    socks = [s for s in (_connect(host, port) for _ in range(n)) if s is not None]
    for s in socks:
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(2)
        for s in socks:
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                pass
    for s in socks:
        s.settimeout(0.2)
        statuses[_status(s)] += 1
        s.close()
    return len(socks)


def _one(host: str, port: int, raw: bytes, statuses: Counter[int], lock: threading.Lock) -> None:
    s = _connect(host, port)
    code = 0
    if s is not None:
        try:
            s.sendall(raw)
            code = _status(s)
        except OSError:
            code = 0
        finally:
            s.close()
    with lock:
        statuses[code] += 1


def burst(host: str, port: int, raws: list[bytes]) -> Counter[int]:
    """Each request on its own connection, all at once."""
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    threads = [threading.Thread(target=_one, args=(host, port, raw, statuses, lock)) for raw in raws]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return statuses


def _post(path: str, body: bytes, key: str, *, declared: int | None = None) -> bytes:
    length = len(body) if declared is None else declared
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )
    return head.encode() + body


def malformed(key: str) -> list[bytes]:
    """Bodies a parser must refuse with 4xx, sent with a valid key so that they reach it."""
    return [
        _post("/v1/publish/news", b"{not json", key),
        _post("/v1/publish/news", b'{"topic": 12, "variables": []}', key),
        _post("/v1/publish/news", b"[" * 5000 + b"]" * 5000, key),
        _post("/v1/publish/news", b"\xff\xfe\x00garbage", key),
        b"POST /v1/publish/news HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nzz\r\n",
        b"GARBAGE\r\n\r\n",
    ]


def run(api_url: str, key: str, seconds: float, rec: Recorder, *, slow: int = 200, flood: int = 300) -> None:
    """The phase, for about ``seconds``, with a tenant's API ``key`` where a probe needs to get past
    the credentials check; its lines go to ``rec``."""
    u = urlsplit(api_url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    slow_statuses: Counter[int] = Counter()
    t_slow = threading.Thread(target=slow_headers, args=(host, port, slow, seconds, slow_statuses))
    t_slow.start()
    flood_statuses = burst(host, port, [b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"] * flood)
    rec.write("hostile", probe="connection flood", sent=flood, statuses=dict(flood_statuses))
    big = burst(host, port, [_post("/v1/publish/news", b"{" * 65536, key, declared=60 * 2**20)] * 10)
    rec.write("hostile", probe="oversized body", sent=10, statuses=dict(big))
    bad = burst(host, port, malformed(key) * 5)
    rec.write("hostile", probe="malformed body", sent=len(malformed(key)) * 5, statuses=dict(bad))
    t_slow.join(seconds + 60)
    rec.write("hostile", probe="slow headers", sent=slow, statuses=dict(slow_statuses))
