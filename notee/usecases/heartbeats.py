"""Every process's heartbeat in MySQL (``process_heartbeat``), the one home of that code: ``notee api``,
``notee worker``, ``notee scheduler`` and ``notee webhooks`` each run one ``ProcessHeartbeat`` (the
asyncio ones with ``beat_until``, the scheduler with ``beat_in_thread``), and the console's health page
and ``GET /v1/admin/processes`` read them with ``process_health``.

Beside it, ``notee.core.heartbeat`` (a file, for a container's ``notee healthcheck``) stays: that one
says "this process" to its own orchestrator; this one says "every process" to an operator. A worker's
beat carries its circuit breaker per provider (``CircuitBreaker.states``, the same source as the
``notee_circuit_breaker_state`` metric), so the breakers are visible without scraping each worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from notee.core.version import VERSION
from notee.store import heartbeat_sql
from notee.store.runtime import Runtime

log = logging.getLogger(__name__)

# The providers a worker's breaker guards, shown for every worker (one it never used is closed).
PROVIDERS = ("fcm", "apns", "webpush")
STALE_BEATS = 3  # a process is stale after this many missed beats ...
STALE_SLACK_S = 5.0  # ... and this long (a loaded machine's late beat is not a dead process)


def process_id() -> str:
    """host:pid:random, unique per process start (the worker uses the same form for its leases)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class ProcessHeartbeat:
    """One process's beats: ``beat()`` every ``interval_s``; ``forget()`` at a graceful stop.
    ``breakers``: the worker's breaker states (None for the other kinds)."""

    def __init__(
        self,
        runtime: Runtime,
        kind: str,
        *,
        breakers: Callable[[], dict[str, str]] | None = None,
        ident: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.kind = kind
        self.breakers = breakers
        self.process_id = ident or process_id()
        self.interval_s = runtime.settings.process_heartbeat_s
        self.failing = False

    def _breaker_states(self) -> dict[str, str] | None:
        if self.breakers is None:
            return None
        return {name: "closed" for name in PROVIDERS} | self.breakers()

    def beat(self) -> bool:
        """Write this process's row now. Never raises: a store outage must not stop the work the
        heartbeat reports on (it shows as a stale row instead); logged once per outage."""
        one = heartbeat_sql.Beat(self.process_id, self.kind, VERSION, self.interval_s, self._breaker_states())
        try:
            with self.runtime.sessions.begin() as session:
                heartbeat_sql.beat(session, one)
        except Exception as exc:
            if not self.failing:
                log.warning("%s %s: heartbeat not written (%s); retrying every beat", self.kind, self.process_id, exc)
            self.failing = True
            return False
        if self.failing:
            log.info("%s %s: heartbeat written again", self.kind, self.process_id)
        self.failing = False
        return True

    def forget(self) -> None:
        """Delete this process's row (a graceful stop: it is gone, not stale). Never raises."""
        try:
            with self.runtime.sessions.begin() as session:
                heartbeat_sql.forget(session, self.process_id)
        except Exception as exc:  # the row turns stale and the retention run deletes it
            log.warning("%s %s: heartbeat row not deleted at stop (%s)", self.kind, self.process_id, exc)


async def beat_until(heartbeat: ProcessHeartbeat, stop: asyncio.Event) -> None:
    """Beat from the event loop until ``stop`` is set (a blocked loop stops the beats), then forget."""
    while not stop.is_set():
        await asyncio.to_thread(heartbeat.beat)
        try:
            await asyncio.wait_for(stop.wait(), heartbeat.interval_s)
        except TimeoutError:
            pass
    await asyncio.to_thread(heartbeat.forget)


def beat_in_thread(heartbeat: ProcessHeartbeat, stop: threading.Event) -> threading.Thread:
    """Beat from a daemon thread until ``stop`` is set, then forget (the scheduler: no event loop)."""

    def run() -> None:
        while not stop.is_set():
            heartbeat.beat()
            stop.wait(heartbeat.interval_s)
        heartbeat.forget()

    thread = threading.Thread(target=run, name=f"heartbeat-{heartbeat.kind}", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True, slots=True)
class ProcessView:
    """A process as the health page shows it; ``stale``: it missed its beats (killed, hung, cut off)."""

    kind: str
    process_id: str
    version: str
    started_at: datetime
    beat_at: datetime
    age_s: float
    stale: bool
    breakers: dict[str, str] | None


def process_health(session: Session) -> list[ProcessView]:
    """Every process's last beat, by kind, stale ones marked."""
    return [
        ProcessView(
            row.kind,
            row.process_id,
            row.version,
            row.started_at,
            row.beat_at,
            row.age_s,
            row.age_s > STALE_BEATS * row.interval_s + STALE_SLACK_S,
            row.breakers,
        )
        for row in heartbeat_sql.processes(session)
    ]


@dataclass(frozen=True, slots=True)
class KindSummary:
    """One kind of process, as a tenant's health page shows it (no process ids: they name hosts).
    ``breakers``: provider -> state -> how many live workers are in it (workers only)."""

    kind: str
    live: int
    stale: int
    newest_age_s: float | None
    breakers: dict[str, dict[str, int]]


def by_kind(views: list[ProcessView]) -> list[KindSummary]:
    """Every kind (those with no process too: "none running" is news), live and stale counted apart."""
    summaries = []
    for kind in heartbeat_sql.KINDS:
        mine = [v for v in views if v.kind == kind]
        live = [v for v in mine if not v.stale]
        breakers: dict[str, dict[str, int]] = {}
        if kind == "worker":
            for provider in PROVIDERS:
                counts: dict[str, int] = {}
                for v in live:
                    state = (v.breakers or {}).get(provider, "closed")
                    counts[state] = counts.get(state, 0) + 1
                breakers[provider] = counts
        newest = min((v.age_s for v in mine), default=None)
        summaries.append(KindSummary(kind, len(live), len(mine) - len(live), newest, breakers))
    return summaries
