"""The ``process_heartbeat`` table (schema/mysql/0036_process_heartbeat.sql): one row per running Notee
process, upserted by the process every few seconds, read by the health page and the admin API.

Functions take the caller's Session and never commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from notee.store.mysql import affected

KINDS = ("api", "worker", "scheduler", "webhooks")


@dataclass(frozen=True, slots=True)
class BeatRow:
    """A process's last beat; ``age_s``: seconds from it to the database clock's now."""

    process_id: str
    kind: str
    version: str
    started_at: datetime
    beat_at: datetime
    age_s: float
    interval_s: float
    breakers: dict[str, str] | None


@dataclass(frozen=True, slots=True)
class Beat:
    """What a process writes at each beat."""

    process_id: str
    kind: str
    version: str
    interval_s: float
    breakers: dict[str, str] | None


def beat(session: Session, one: Beat) -> None:
    """Insert or refresh this process's row (its start time kept from the first beat)."""
    kind = one.kind
    if kind not in KINDS:  # the CHECK says the same: checked here too (DATA-RULES "Enumerations")
        raise ValueError(f"unknown process kind {kind!r}")
    session.execute(
        text(
            "INSERT INTO process_heartbeat (process_id, kind, version, started_at, beat_at, interval_s, breakers)"
            " VALUES (:p, :k, :v, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), :i, :b)"
            " ON DUPLICATE KEY UPDATE beat_at = VALUES(beat_at), interval_s = VALUES(interval_s),"
            " breakers = VALUES(breakers), version = VALUES(version)"
        ),
        {
            "p": one.process_id[:150],
            "k": kind,
            "v": one.version[:40],
            "i": one.interval_s,
            "b": json.dumps(one.breakers) if one.breakers is not None else None,
        },
    )


def forget(session: Session, process_id: str) -> int:
    """Delete a process's row (it stopped gracefully)."""
    return affected(
        session.execute(text("DELETE FROM process_heartbeat WHERE process_id = :p"), {"p": process_id[:150]})
    )


def processes(session: Session, *, limit: int = 500) -> list[BeatRow]:
    """Every process's row, by kind and then the latest beat first (a small table: one row per process)."""
    rows = session.execute(
        text(
            "SELECT process_id, kind, version, started_at, beat_at, interval_s, breakers,"
            " TIMESTAMPDIFF(MICROSECOND, beat_at, UTC_TIMESTAMP(6)) / 1e6 AS age_s"
            " FROM process_heartbeat ORDER BY kind, beat_at DESC LIMIT :lim"
        ),
        {"lim": limit},
    )
    found = []
    for r in rows:
        breakers = json.loads(r.breakers) if isinstance(r.breakers, str | bytes) else r.breakers
        found.append(
            BeatRow(
                r.process_id,
                r.kind,
                r.version,
                r.started_at,
                r.beat_at,
                max(0.0, float(r.age_s)),
                float(r.interval_s),
                breakers,
            )
        )
    return found


def prune(session: Session, *, older_than: datetime, batch: int) -> int:
    """Delete up to ``batch`` rows whose last beat is before ``older_than`` (naive UTC)."""
    return affected(
        session.execute(
            text("DELETE FROM process_heartbeat WHERE beat_at < :cut LIMIT :b"), {"cut": older_than, "b": batch}
        )
    )
