"""Races on real MariaDB locks: run a step on a thread of its own, and see from PROCESSLIST that another
connection of ours is running (so, in these tests, waiting on) a given statement."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import text


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``work`` on a daemon thread; the list gets what it raised, for the test to report."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def running(runtime: Any, *likes: str, besides: int | None = None) -> int:
    """How many other connections of ours run a statement whose text matches every LIKE pattern of
    ``likes``; ``besides``: a connection id not to count either (the one holding the lock)."""
    where = " AND ".join(f"INFO LIKE :p{i}" for i in range(len(likes)))
    params: dict[str, Any] = {f"p{i}": like for i, like in enumerate(likes)} | {"me": besides or 0}
    with runtime.sessions() as s:
        sql = (
            f"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND ID <> :me AND {where}"
        )
        return int(s.execute(text(sql), params).scalar_one())
