"""What the emulator remembers, in its one granian worker's memory: tokens with canned answers,
faults, counts, deliveries, the last request per token, realism switches and their rate windows;
and, in realistic mode, the APNs port's HTTP/2 server. Read and changed by the personas
(``notee.emulator.fcm``, ``notee.emulator.apns``) and the control API (``notee.emulator.control_api``).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from typing import Any

from notee.emulator.peer import PeerServer
from notee.emulator.rules import fcm_device_view

# (status, headers, body): what every handler of the emulator answers.
Response = tuple[int, list[tuple[bytes, bytes]], bytes]
# ASGI, as granian calls the app.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

LAST_REQUESTS_MAX = 10_000  # tokens whose last request is kept (``GET /_emu/requests/last``)
LAUNCH_REALISTIC: bool = os.environ.get("NOTEE_EMULATOR_REALISTIC") == "1"  # `notee emulator --realistic`
# A file the emulator appends one JSON line to per delivered push (time, api, token, data): the
# record an independent checker (the chaos run's ledger, chaos/) compares with what was asked for.
JOURNAL_PATH: str | None = os.environ.get("NOTEE_EMULATOR_JOURNAL") or None


def _open_journal() -> Any:
    # line-buffered: a line is on disk as soon as the push is answered, whatever happens to the process
    return open(JOURNAL_PATH, "a", buffering=1, encoding="utf-8") if JOURNAL_PATH else None


def header_map(scope: Scope) -> dict[bytes, bytes]:
    """A request's headers as a dict (the last of a repeated name): the own HTTP/2 server's scope
    carries one built with it (shared by every request with the same header block), the ASGI
    app's does not."""
    built: dict[bytes, bytes] | None = scope.get("header_map")
    return built if built is not None else dict(scope["headers"])


@dataclass
class Fault:
    api: str  # "fcm" | "apns" | "webpush"
    match: str  # a token, or "*"
    status: int
    code: str  # FCM errorCode or APNs reason
    retry_after: str | None
    remaining: int


@dataclass
class Realism:
    """How closely the emulator behaves like FCM and APNs (``notee emulator --realistic``; every
    switch can be changed through ``POST /_emu/realistic``). Off: any bearer is accepted and
    there are no rate limits, so wire-format tests stay simple."""

    enabled: bool = False
    fcm_auth: bool = True  # FCM accepts only access tokens issued by POST /token, until they expire
    fcm_token_lifetime_s: float = 3600.0
    fcm_quota_per_minute: int = 600_000  # per project (FCM's default quota)
    device_per_minute: int = 240  # per device token and API (FCM: 240 a minute to one device)
    minute_s: float = 60.0  # the length of an emulated "minute", to scale the limits for tests
    apns_token_update_min_s: float = 1200.0  # a connection may change its provider token this often
    # a provider JWT older than this is 403 ExpiredProviderToken (Apple: one hour); the chaos run's
    # APNs token-expiry spell shortens it, so provider tokens expire while they are in use
    apns_jwt_max_age_s: float = 3600.0

    def update(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if key not in self.__dataclass_fields__:
                raise KeyError(key)
            setattr(self, key, type(getattr(self, key))(value))


@dataclass
class State:
    fcm_tokens: dict[str, str] = field(default_factory=dict)  # token -> FCM errorCode
    apns_tokens: dict[str, tuple[int, str]] = field(default_factory=dict)  # token -> (status, reason)
    faults: list[Fault] = field(default_factory=list)
    latency_s: float = 0.0
    rejected_bearers: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)
    delivered: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))  # api -> token -> n
    delivered_total: Counter[str] = field(default_factory=Counter)  # api -> n: the sums of ``delivered``
    attempts: Counter[str] = field(default_factory=Counter)  # token -> requests received
    last: dict[str, dict[str, Any]] = field(default_factory=dict)  # token -> last request seen
    jwt_iat: dict[bytes, int | None] = field(default_factory=dict)
    seq: int = 0
    realism: Realism = field(default_factory=lambda: Realism(enabled=LAUNCH_REALISTIC))
    issued: dict[str, float] = field(default_factory=dict)  # FCM access token -> expiry (epoch s)
    windows: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # key -> (minute, count)
    conn_tokens: dict[Any, tuple[bytes, float]] = field(default_factory=dict)  # connection -> (JWT, since)
    journal: Any = field(default_factory=_open_journal)  # NOTEE_EMULATOR_JOURNAL's file, or None
    web_subs: dict[str, Any] = field(default_factory=dict)  # web push subscription id -> webpush.WebSub
    web_pushes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # id -> what it received
    web_answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # id -> {"at", "status"} of each request

    def last_view(self, token: str) -> dict[str, Any] | None:
        """The last request of ``token`` as ``GET /_emu/requests/last`` shows it. What the personas
        keep per request is raw (the header list, the accepted FCM message); the views are built
        here, when a test asks, not on every request (issue 35)."""
        kept = self.last.get(token)
        if kept is None:
            return None
        view = dict(kept)
        view["headers"] = {k.decode(): v.decode() for k, v in kept["headers"] if k != b"authorization"}
        if "device" in view:
            view["device"] = fcm_device_view(kept["device"])
        return view

    def deliver(self, api: str, token: str) -> None:
        """One push delivered to ``token``: its count, and the api's total (``GET /_emu/stats``
        reads that, not a sum over every token, many times a second during a bench's publish)."""
        delivered = self.delivered[api]
        # get + 1, not Counter's += 1: a token seen for the first time (every push of a fan-out)
        # would call Counter.__missing__, a Python method, per push
        delivered[token] = delivered.get(token, 0) + 1
        self.delivered_total[api] += 1

    def record(self, api: str, token: str, data: Any) -> None:
        """One delivered push, in the delivery journal when there is one."""
        if self.journal is not None:
            line = {"t": round(time.time(), 4), "api": api, "token": token, "data": data}
            self.journal.write(json.dumps(line, separators=(",", ":"), sort_keys=True) + "\n")

    def over_limit(self, key: tuple[str, str], limit: int, now: float) -> float | None:
        """Count one request against ``limit`` per emulated minute; seconds until the window ends
        when the limit is exceeded, else None."""
        minute_s = self.realism.minute_s
        window = int(now // minute_s)
        current, count = self.windows.get(key, (window, 0))
        if current != window:
            count = 0
        if count >= limit:
            self.windows[key] = (window, count)
            return (window + 1) * minute_s - now
        self.windows[key] = (window, count + 1)
        return None

    def reset(self) -> None:
        """Back to a fresh state, in place: the app and the HTTP/2 servers hold this object."""
        journal, self.journal = self.journal, None
        fresh = State(journal=journal)  # one journal for the emulator's life: a reset keeps appending
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def take_fault(self, api: str, token: str) -> Fault | None:
        for fault in self.faults:
            if fault.api == api and fault.match in ("*", token) and fault.remaining > 0:
                fault.remaining -= 1
                return fault
        return None


@dataclass
class Emulator:
    """The worker's emulator: its state, and in realistic mode the APNs port's HTTP/2 server
    (``notee.emulator.peer``), which the control API reads and re-rules."""

    state: State
    peer: PeerServer | None = None
    front: PeerServer | None = None  # the public port's HTTP/2 (notee.emulator.front)
