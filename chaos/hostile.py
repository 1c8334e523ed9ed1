"""The hostile-client phase: simple attackers against one API process while the tenants work.

Each attacker connects from a loopback address of its own (127.0.0.0/8 is all local on Linux), so
the API's per-address connection cap (``api_max_connections_per_address``) meets each one apart and
never the tenants' workload, which stays on 127.0.0.1:

- slow headers (``SOURCES["slow"]``): connections that send a header line every 2 s and never finish
  the request (408 at the head deadline; beyond the cap 429 at once);
- a connection flood (``SOURCES["flood"]``): many connections held open at once, then one request on
  each (beyond the cap 429 ``too_many_connections``: the cap is proved to bite);
- body probes (``SOURCES["body"]``, fewer connections than the cap): a declared Content-Length far
  over the limit, broken JSON, wrong types, deep nesting, bad bytes, bad framing, a garbage request
  line, a URL of 10,000 query parameters; each has its documented answer (``PROBES``).
Each probe writes a ``hostile`` line: what it sent, from where, the statuses it got (0: no answer or
closed) and the answers it expects. The ledger (``chaos.ledger_edge.check_hostile``) holds them to it.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

from chaos.record import Recorder

SOURCES = {"slow": "127.0.0.66", "flood": "127.0.0.67", "body": "127.0.0.68"}
# the flood's documented answers: served, 408 at the head deadline, 429 over the per-address connection
# cap, 503 `overloaded` over the per-address requests in progress (api_max_concurrency_per_address, 50)
FLOOD_ANSWERS = [200, 408, 429, 503]
PUBLISH = "/v1/topics/news/all/publish"  # a real route: the probes must reach the body checks


def _status(sock: socket.socket) -> int:
    """The status code of the answer on ``sock``, 0 if it closed or said nothing in time."""
    try:
        head = sock.recv(64)
    except OSError:
        return 0
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _connect(host: str, port: int, source: str) -> socket.socket | None:
    # an attached run's API on another host is reached from this host's own address (one for all)
    bind = (source, 0) if host.startswith("127.") or host == "localhost" else None
    try:
        s = socket.create_connection((host, port), timeout=5, source_address=bind)
    except OSError:
        return None
    s.settimeout(10)
    return s


def _answered(socks: list[socket.socket], statuses: Counter[int]) -> list[socket.socket]:
    """Read the answer of every socket that has one waiting (and close it); the others, still open.
    An answered socket gets no more bytes: its server closed it, and more would make the kernel
    reset the connection and drop the answer unread."""
    waiting = set(select.select(socks, [], [], 0)[0]) if socks else set()
    for s in waiting:
        statuses[_status(s)] += 1
        s.close()
    return [s for s in socks if s not in waiting]


def slow_headers(host: str, port: int, n: int, seconds: float, statuses: Counter[int]) -> int:
    """``n`` connections that send a header line every 2 s for ``seconds``: those over the address's
    cap are answered 429 at the accept, the others 408 at the head deadline (a connection still
    open without an answer at the end is counted 0: no deadline held it)."""
    socks = [s for s in (_connect(host, port, SOURCES["slow"]) for _ in range(n)) if s is not None]
    if len(socks) < n:
        statuses[0] += n - len(socks)  # never connected
    time.sleep(1.0)  # the server's accept loop answers the ones over the cap
    socks = _answered(socks, statuses)
    for s in socks:
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(2)
        socks = _answered(socks, statuses)
        for s in socks:
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                pass
    socks = _answered(socks, statuses)
    if socks:
        statuses[0] += len(socks)  # still open, unanswered: no deadline held them
    for s in socks:
        s.close()
    return n


def flood(host: str, port: int, n: int) -> Counter[int]:
    """``n`` connections held open at once, then one request on each: those over the address's cap
    were answered 429 at the accept (read before anything is sent), the others answer the request:
    200, or 503 ``overloaded`` beyond the address's requests in progress (or 408, had the machine been
    too slow to send it within the head deadline)."""
    statuses: Counter[int] = Counter()
    socks = [s for s in (_connect(host, port, SOURCES["flood"]) for _ in range(n)) if s is not None]
    if len(socks) < n:
        statuses[0] += n - len(socks)  # never connected
    time.sleep(1.0)  # the server's accept loop answers the ones over the cap
    held = _answered(socks, statuses)
    for s in held:  # every request sent before any answer is read: none waits out the head deadline
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        except OSError:
            pass  # the answer may still be waiting
    for s in held:
        statuses[_status(s)] += 1
        s.close()
    return statuses


def _send_until_answered(s: socket.socket, raw: bytes) -> None:
    """``raw`` in 4 KiB pieces, stopping once an answer is waiting: a server that answers early (414
    on a long URL) and closes must not see more bytes, which would make its kernel reset the
    connection and drop the answer before it is read."""
    for i in range(0, len(raw), 4096):
        if select.select([s], [], [], 0)[0]:
            return
        s.sendall(raw[i : i + 4096])


def _one(host: str, port: int, raw: bytes, statuses: Counter[int], lock: threading.Lock) -> None:
    s = _connect(host, port, SOURCES["body"])
    code = 0
    if s is not None:
        try:
            _send_until_answered(s, raw)
        except OSError:
            pass  # the answer may still be waiting
        code = _status(s)
        s.close()
    with lock:
        statuses[code] += 1


def burst(host: str, port: int, raws: list[bytes]) -> Counter[int]:
    """Each request on its own connection (from the body probes' address), all at once."""
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


def probes(key: str) -> list[tuple[str, bytes, int]]:
    """(name, request, its documented answer: docs/API.md's edge limits), sent with a valid key so
    that each reaches the check it probes."""
    query = "&".join(f"p{i}=1" for i in range(10_000))
    return [
        ("oversized body", _post(PUBLISH, b"", key, declared=60 * 2**20), 413),  # refused on the head alone
        ("broken json", _post(PUBLISH, b"{not json", key), 422),
        ("wrong types", _post(PUBLISH, b'{"variables": [], "send_at": 12}', key), 422),
        ("deep nesting", _post(PUBLISH, b"[" * 5000 + b"]" * 5000, key), 422),
        ("not utf-8", _post(PUBLISH, b"\xff\xfe\x00garbage", key), 422),
        (
            "chunked and length",
            f"POST {PUBLISH} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nzz\r\n".encode(),
            400,
        ),
        ("garbage request line", b"GARBAGE\r\n\r\n", 400),
        ("10,000 query parameters", f"GET /v1/users?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), 414),
    ]


def run(api_url: str, key: str, seconds: float, rec: Recorder, *, slow: int = 200, conns: int = 300) -> None:
    """The phase, for about ``seconds``, with a tenant's API ``key`` where a probe needs to get past
    the credentials check; its lines go to ``rec``."""
    u = urlsplit(api_url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    slow_statuses: Counter[int] = Counter()
    t_slow = threading.Thread(target=slow_headers, args=(host, port, slow, seconds, slow_statuses))
    t_slow.start()
    got = flood(host, port, conns)
    line = {"api": api_url, "source": SOURCES["flood"], "sent": conns}
    rec.write("hostile", probe="connection flood", statuses=dict(got), expect=FLOOD_ANSWERS, **line)
    for name, raw, expect in probes(key):
        got = burst(host, port, [raw] * 5)
        line = {"api": api_url, "source": SOURCES["body"], "sent": 5}
        rec.write("hostile", probe=name, statuses=dict(got), expect=[expect], **line)
    t_slow.join(seconds + 60)
    line = {"api": api_url, "source": SOURCES["slow"], "sent": slow}
    rec.write("hostile", probe="slow headers", statuses=dict(slow_statuses), expect=[408, 429], **line)
