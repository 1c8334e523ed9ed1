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


def race_claims(
    services: list[str],
    lanes: int,
    claim: Callable[[str], tuple[str, int] | None],
    queued: Callable[[str], int],
) -> tuple[list[tuple[str, int]], dict[str, list[int]]]:
    """``lanes`` threads per service claim at once (``claim(service)``: the (owner id, number) taken,
    None when told "nothing") until each is told "nothing"; then it counts what of its service is
    still queued (``queued(service)``). What every lane took, and per service the queued counts seen
    by the lanes told "nothing" (a claim test asserts each is below ``lanes``: the service's other
    lanes hold one each, and nothing waits for nobody)."""
    claimed: list[tuple[str, int]] = []
    early: dict[str, list[int]] = {service: [] for service in services}
    lock = threading.Lock()
    go = threading.Barrier(lanes * len(services))

    def lane(service: str) -> None:
        go.wait(30)
        while True:
            taken = claim(service)
            if taken is None:
                left = queued(service)
                with lock:
                    early[service].append(left)
                return
            with lock:
                claimed.append(taken)

    threads = [
        threading.Thread(target=lane, args=(service,), daemon=True) for service in services for _ in range(lanes)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a claiming lane did not finish in 120 s"
    return claimed, early
