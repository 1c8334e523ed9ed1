"""Scheduler test helpers: CYCLE templates marked due at chosen local buckets (through the
subscription store's own ``mark_due``; the ``due`` fixture removes them when the test ends), a
scheduler with a private tick namespace, and the job and tick rows a tenant or namespace got. Every
test makes its own tenant and namespace, so tests share no tick or job rows; the due index itself is
shared (a scheduler runs a minute for every tenant), see docs/TESTING.md. Registered as a plugin
by tests/conftest.py."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from notee.core.vocabulary import CycleTarget
from notee.scheduler.runner import Scheduler
from notee.store.runtime import Runtime
from notee.usecases.cycle_fire import MinuteResult
from tests.support import registry


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


class DueIndex:
    """Marks templates due in cycle_due and removes exactly those rows when the test ends, so the
    shared test keyspace does not accumulate other tests' buckets."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.rows: list[tuple[CycleTarget, str]] = []

    def template(self, service: str, type_: str, buckets: list[CycleTarget], *, title: str = "Reminder") -> str:
        key = registry.make_template(self.runtime, service, "CYCLE", type_, title=title, body="Time to practise")
        self.mark(service, type_, key, buckets)
        return key

    def mark(self, service: str, type_: str, key: str, buckets: list[CycleTarget]) -> None:
        st = self.runtime.statements
        for b in buckets:
            st.run(
                st.mark_due(
                    service=service,
                    type_=type_,
                    notification_key=key,
                    timezone=b.timezone,
                    days=[b.day],
                    hour=b.hour,
                    minute=b.minute,
                )
            )
            self.rows.append((b, key))

    def cleanup(self) -> None:
        st = self.runtime.statements
        stamp = int(time.time() * 1_000_000) + 1
        for b, key in self.rows:
            st.delete_due(stamp, b.timezone, b.day, b.hour, b.minute, key)


@pytest.fixture()
def due(runtime: Runtime) -> Iterator[DueIndex]:
    """Due buckets the test marks, removed when it ends."""
    index = DueIndex(runtime)
    yield index
    index.cleanup()


def scheduler(runtime: Runtime, namespace: str | None = None, **kwargs: Any) -> Scheduler:
    return Scheduler(runtime, namespace=namespace or "test-" + secrets.token_hex(6), **kwargs)


def jobs_of(runtime: Runtime, service: str) -> list[tuple[str, dict[str, Any], str]]:
    """(notification_key, target, idempotency_key) of every job of a tenant."""
    with runtime.sessions() as s:
        rows = s.execute(
            text("SELECT notification_key, target, idempotency_key FROM fanout_job WHERE service = :s"), {"s": service}
        ).all()
    return [(k, json.loads(t) if isinstance(t, str) else t, i) for k, t, i in rows]


def job_ids_of(runtime: Runtime, service: str) -> set[str]:
    """The ids of every job of a tenant."""
    with runtime.sessions() as s:
        rows = s.execute(text("SELECT job_id FROM fanout_job WHERE service = :s"), {"s": service}).scalars()
        return {str(j) for j in rows}


def own_jobs(result: MinuteResult, ids: set[str]) -> list[str]:
    """The jobs of a minute's result that are among ``ids`` (a tenant's, from ``job_ids_of``): a
    minute runs every tenant's buckets due then, and the shared due index may hold other tests'
    (or earlier runs') templates in the same buckets, so a test counts its own jobs, not the minute's."""
    return [j for j in result.job_ids if j in ids]


def tick_states(runtime: Runtime, namespace: str) -> dict[datetime, str]:
    with runtime.sessions() as s:
        rows = s.execute(text("SELECT minute_utc, state FROM cycle_tick WHERE namespace = :n"), {"n": namespace}).all()
    return {m.replace(tzinfo=UTC): st for m, st in rows}
