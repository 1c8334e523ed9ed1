"""The API's connections, guarded before a request is read (docs/API.md "Limits at the edge"):

* **a cap per client address**: at most ``api_max_connections_per_address`` open connections from one
  address (an IPv6 client counts by its /64, the block one subscriber usually has), so one client
  cannot take the process's ``api_max_connections`` from everyone else. A trusted proxy
  (``api_trusted_proxies``) carries many clients and is exempt;
* **a deadline on every request head**: a head must be whole within ``api_head_timeout_s`` of the
  connection's accept (or of its first byte, on a kept-alive connection), so a client that sends a
  header line now and then never holds a connection for long (slowloris).

One ``ConnectionGuard`` per ``notee api`` process, shared by its listeners; the HTTP protocol
(``notee.api.http1``) tells it when a connection opens, when a head begins and ends, and when the
connection is lost. The deadlines are kept in one dict in the order the heads began (the deadline is
that time plus a constant, so the first entry is always the next to expire) and one timer sweeps
them about four times per deadline, so a request pays two dict operations, not a timer of its own.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
from dataclasses import dataclass
from typing import Protocol

from notee.core.settings import Settings

log = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOG_EVERY_S = 10.0  # refusals are counted and logged at most this often: a flood must not flood the log


class HeadWaiter(Protocol):
    """A connection whose request head is awaited (``notee.api.http1.HttpToolsProtocol``)."""

    def head_timed_out(self) -> None: ...


class TooManyConnections(Exception):
    """The client address already has its cap of open connections."""


@dataclass(frozen=True)
class ConnectionLimits:
    per_address: int  # 0: no cap
    head_timeout_s: float
    trusted: tuple[Network, ...]

    @classmethod
    def of(cls, settings: Settings) -> ConnectionLimits:
        trusted = tuple(ipaddress.ip_network(n) for n in settings.api_trusted_proxies)
        return cls(settings.api_max_connections_per_address, settings.api_head_timeout_s, trusted)


@functools.lru_cache(maxsize=4096)  # a flood comes from few addresses: parse each once
def address_key(host: str, trusted: tuple[Network, ...] = ()) -> str | None:
    """What a connection from ``host`` counts against: an IPv4 address (an IPv4-mapped IPv6 one too)
    whole, an IPv6 address by its /64, so an IPv6 client cannot get a fresh cap per address. None:
    not counted (a trusted proxy). A host that is not an IP (a Unix socket) counts as itself."""
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in trusted):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class ConnectionGuard:
    """See the module docstring. Lives on the event loop's thread: no lock."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[str, int] = {}  # address key -> open connections
        self.waiting: dict[HeadWaiter, float] = {}  # connection -> its head's deadline, in order
        self.refused = 0  # connections refused over an address's cap, since the process started
        self.timed_out = 0  # heads not whole in time
        self._sweep: asyncio.TimerHandle | None = None
        self._logged: tuple[float, int, int] = (float("-inf"), 0, 0)  # when, refused, timed_out then

    def admit(self, host: str | None) -> str | None:
        """Count a new connection from ``host``; the key to ``release`` it with (None: not counted).
        Raises TooManyConnections when the address is at its cap."""
        if host is None or self.limits.per_address == 0:
            return None
        key = address_key(host, self.limits.trusted)
        if key is None:
            return None
        count = self.open.get(key, 0)
        if count >= self.limits.per_address:
            self.refused += 1
            raise TooManyConnections(key)
        self.open[key] = count + 1
        return key

    def release(self, key: str | None) -> None:
        if key is None:
            return
        count = self.open.get(key, 0) - 1
        if count > 0:
            self.open[key] = count
        else:
            self.open.pop(key, None)

    def head_begins(self, conn: HeadWaiter, loop: asyncio.AbstractEventLoop) -> None:
        """Start ``conn``'s head deadline, unless it runs already (a head's first byte starts it once)."""
        if conn in self.waiting:
            return
        self.waiting[conn] = loop.time() + self.limits.head_timeout_s
        if self._sweep is None:
            self._sweep = loop.call_later(self._interval(), self._expire, loop)

    def head_ends(self, conn: HeadWaiter) -> None:
        self.waiting.pop(conn, None)

    def _interval(self) -> float:
        return min(1.0, self.limits.head_timeout_s / 4)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Time out every head past its deadline; again in a moment while any head is awaited."""
        now = loop.time()
        while self.waiting:
            conn, deadline = next(iter(self.waiting.items()))
            if deadline > now:
                break
            del self.waiting[conn]
            self.timed_out += 1
            conn.head_timed_out()
        self._report(now)
        self._sweep = loop.call_later(self._interval(), self._expire, loop) if self.waiting else None

    def _report(self, now: float) -> None:
        """One log line per LOG_EVERY_S at most, with what was refused or timed out since the last."""
        when, refused, timed_out = self._logged
        if now - when < LOG_EVERY_S or (self.refused, self.timed_out) == (refused, timed_out):
            return
        log.warning(
            "since the last report: %d connections refused over the per-address cap, %d request heads "
            "timed out; addresses at the cap: %s",
            self.refused - refused,
            self.timed_out - timed_out,
            ", ".join(k for k, n in self.open.items() if n >= self.limits.per_address > 0)[:200] or "none",
        )
        self._logged = (now, self.refused, self.timed_out)
