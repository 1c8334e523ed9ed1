"""The API's connection guard (notee/api/connections.py) and what the HTTP protocol does with it
(notee/api/http1.py): the per-address cap, the head deadline, a URL too long to finish.

Here, the rules that need no server; tests/integration/test_api_connections.py has the rest."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from notee.api import http1
from notee.api.connections import ConnectionGuard, ConnectionLimits, TooManyConnections, address_key
from notee.core.settings import Settings
from tests.unit.test_uvicorn_pins import _ok, _serve, _Transport


class _Clock:
    """A loop's ``time`` and ``call_later``, moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Any, tuple[Any, ...]]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, fn: Any, *args: Any) -> Any:
        self.timers.append((self.now + delay, fn, args))
        return object()

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self.timers and min(t[0] for t in self.timers) <= end:
            self.timers.sort(key=lambda t: t[0])
            at, fn, args = self.timers.pop(0)
            self.now = at
            fn(*args)
        self.now = end


class _Conn:
    def __init__(self) -> None:
        self.timed_out = False

    def head_timed_out(self) -> None:
        self.timed_out = True


def _guard(per_address: int = 2, timeout: float = 10.0, trusted: tuple[str, ...] = ()) -> ConnectionGuard:
    return ConnectionGuard(ConnectionLimits(per_address, timeout, tuple(ipaddress.ip_network(t) for t in trusted)))


@pytest.mark.parametrize(
    "host,key",
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),  # a dual-stack socket's IPv4 client is that IPv4 address
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),  # an IPv6 client counts by its /64
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("/run/notee.sock", "/run/notee.sock"),
    ],
)
def test_what_a_connection_counts_against(host, key):
    assert address_key(host) == key


def test_a_trusted_proxy_is_not_counted():
    trusted = (ipaddress.ip_network("10.0.0.0/8"),)
    assert address_key("10.1.2.3", trusted) is None and address_key("11.1.2.3", trusted) == "11.1.2.3"


def test_an_address_over_its_cap_is_refused_and_let_in_again_once_one_closes():
    guard = _guard(per_address=2)
    keys = [guard.admit("198.51.100.1"), guard.admit("198.51.100.1")]
    with pytest.raises(TooManyConnections):
        guard.admit("198.51.100.1")
    assert guard.admit("198.51.100.2") == "198.51.100.2"  # another address: its own cap
    guard.release(keys[0])
    assert guard.admit("198.51.100.1") == "198.51.100.1"
    assert guard.refused == 1 and guard.open == {"198.51.100.1": 2, "198.51.100.2": 1}


def test_no_cap_and_trusted_proxies_count_nothing():
    assert _guard(per_address=0).admit("198.51.100.1") is None
    guard = _guard(per_address=1, trusted=("127.0.0.1/32",))
    for _ in range(3):
        assert guard.admit("127.0.0.1") is None
    assert guard.open == {}


def test_heads_time_out_at_their_deadline_in_the_order_they_began():
    clock = _Clock()
    guard = _guard(timeout=10.0)
    first, second, done = _Conn(), _Conn(), _Conn()
    guard.head_begins(first, clock)  # type: ignore[arg-type]
    clock.advance(3)
    guard.head_begins(second, clock)  # type: ignore[arg-type]
    guard.head_begins(done, clock)  # type: ignore[arg-type]
    guard.head_begins(first, clock)  # type: ignore[arg-type]  # already running: keeps its start
    guard.head_ends(done)
    clock.advance(6.9)  # t = 9.9
    assert not first.timed_out
    clock.advance(1.1)  # t = 11: the sweep runs every second
    assert first.timed_out and not second.timed_out
    clock.advance(3)  # t = 14
    assert second.timed_out and not done.timed_out and guard.timed_out == 2
    assert guard.waiting == {} and clock.timers == []  # nothing awaited: no sweep left


def _protocol(**limits: Any) -> type[http1.HttpToolsProtocol]:
    return http1.HttpToolsProtocol.with_head_limit(16384, **limits)


def test_a_url_of_ten_thousand_parameters_is_414_however_it_arrives():
    query = "&".join(f"p{i}=1" for i in range(10_000))
    request = f"GET /v1/users?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    for size in (1000, 65536, len(request)):  # in pieces, or whole (httptools cannot parse it: > 64 KiB)
        transport = _serve(_protocol(), [request[i : i + size] for i in range(0, len(request), size)])
        head, _, body = b"".join(transport.writes).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 414 ") and transport.closed, (size, head)
        assert json.loads(body)["error"]["code"] == "uri_too_long"


class _Peer(_Transport):
    """The pins' fake transport, with a client address."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("192.0.2.1", 5000) if name == "peername" else default


def test_a_connection_over_its_address_cap_is_answered_429_and_closed_before_reading():
    config = uvicorn.Config(_ok, http=_protocol(guard=_guard(per_address=1)), lifespan="off", log_level="error")
    config.load()
    state = ServerState()

    async def scenario() -> list[tuple[_Peer, int]]:
        out = []
        for _ in range(2):
            transport = _Peer()
            loop = asyncio.get_running_loop()
            config.http_protocol_class(config=config, server_state=state, app_state={}, _loop=loop).connection_made(
                transport
            )
            await asyncio.sleep(0)  # the coalesced write
            out.append((transport, len(state.connections)))
        return out

    (first, open_first), (second, open_second) = asyncio.run(scenario())
    assert not first.closed and first.writes == [] and open_first == 1
    head, _, body = b"".join(second.writes).partition(b"\r\n\r\n")
    assert second.closed and head.startswith(b"HTTP/1.1 429 ") and b"retry-after: 1" in head
    assert json.loads(body)["error"]["code"] == "too_many_connections"
    assert open_second == 1  # the refused one never counted against api_max_connections


def test_the_limits_come_from_the_settings():
    s = Settings(api_max_connections_per_address=7, api_head_timeout_s=2.5, api_trusted_proxies="10.0.0.0/8")
    assert ConnectionLimits.of(s) == ConnectionLimits(7, 2.5, (ipaddress.ip_network("10.0.0.0/8"),))
    with pytest.raises(ValueError):
        Settings(api_trusted_proxies="not-an-address")
