"""SQL of the per-tenant rate limits (schema/mysql/0010_rate_limits.sql): the admin's limits in
``rate_limit`` (InnoDB) and the shared GCRA buckets in ``rate_bucket`` (MEMORY).

``take`` is the hot path: one UPDATE that admits ``n`` requests and advances the bucket's theoretical
arrival time, only if they fit in the burst. Its matched-row count is the verdict (SQLAlchemy's MySQL
dialects count matched rows), so admitted requests cost one statement. Every function takes the
caller's session; the caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import CursorResult, Result
from sqlalchemy.orm import Session

# The database clock is the only clock, so API hosts need not agree. SYSDATE, not NOW: NOW is fixed
# when the statement starts, and a statement that waited for the table lock would judge by a stale time.
_NOW = "UNIX_TIMESTAMP(SYSDATE(6))"
_RATE = "COALESCE(l.rate, :rate)"
_BURST = "COALESCE(l.burst, :burst)"
# One assignment only: multi-table UPDATEs do not promise an order of assignments. ``n`` requests
# fit when the bucket's time after them, less now, is within the burst's time (+ float slack).
_TAKE_N = (
    "UPDATE rate_bucket b LEFT JOIN rate_limit l ON l.service = b.service AND l.class = b.class "
    f"SET b.tat = GREATEST(b.tat, {_NOW}) + :n / {_RATE} "
    f"WHERE b.service = :service AND b.class = :class "
    f"AND GREATEST(b.tat, {_NOW}) + :n / {_RATE} - {_NOW} <= {_BURST} / {_RATE} + 1e-6"
)
_TAKE = text(_TAKE_N)
# Several tokens at once for one process's next requests, only as many as the bucket refills in
# ``hold`` seconds and an eighth of its burst: what a process holds is a small part of the limit, so
# another process is never starved by it (notee.domain.ratelimit.Allowance).
_TAKE_AHEAD = text(f"{_TAKE_N} AND :n <= LEAST({_RATE} * :hold, {_BURST} / 8)")

_CREATE = text("INSERT IGNORE INTO rate_bucket (service, class, tat) VALUES (:service, :class, 0)")

# Seconds until the next request would fit: when max(tat, now) + 1/rate - now drops to burst/rate.
_WAIT = text(
    f"SELECT {_RATE} AS rate, {_BURST} AS burst, "
    f"GREATEST(b.tat, {_NOW}) + 1 / {_RATE} - {_NOW} - {_BURST} / {_RATE} AS wait "
    "FROM rate_bucket b LEFT JOIN rate_limit l ON l.service = b.service AND l.class = b.class "
    "WHERE b.service = :service AND b.class = :class"
)

_SET = text(
    "INSERT INTO rate_limit (service, class, rate, burst, updated_at) "
    "VALUES (:service, :class, :rate, :burst, UTC_TIMESTAMP(6)) "
    "ON DUPLICATE KEY UPDATE rate = VALUES(rate), burst = VALUES(burst), updated_at = VALUES(updated_at)"
)

_RESET = text("DELETE FROM rate_limit WHERE service = :service AND class = :class")

_ALL = text("SELECT class, rate, burst FROM rate_limit WHERE service = :service")


@dataclass(frozen=True)
class Refusal:
    rate: float
    burst: float
    wait_s: float  # until one request fits again


def take_ahead(session: Session, service: str, klass: str, *, n: int, hold_s: float, rate: float, burst: float) -> bool:
    """Take ``n`` tokens at once, if they fit and are at most what the limit refills in ``hold_s`` and
    an eighth of its burst; False: nothing taken (take one at a time). False too without a bucket."""
    params = {"service": service, "class": klass, "n": n, "hold": hold_s, "rate": rate, "burst": burst}
    return _matched(session.execute(_TAKE_AHEAD, params)) == 1


def take(session: Session, service: str, klass: str, *, rate: float, burst: float) -> bool | None:
    """Admit one request: True; refused: False; no bucket yet: None (``rate``/``burst``: the defaults,
    used where the admin set none)."""
    params = {"service": service, "class": klass, "n": 1, "rate": rate, "burst": burst}
    if _matched(session.execute(_TAKE, params)) == 1:
        return True
    exists = session.execute(
        text("SELECT 1 FROM rate_bucket WHERE service = :service AND class = :class"),
        {"service": service, "class": klass},
    ).first()
    if exists is None:
        return None
    # The bucket exists now, but a concurrent first request may have created it after our UPDATE
    # looked for it (this refused the very first requests of a new bucket at 1e6/s, burst 1e7):
    # only an UPDATE that finds the bucket and still matches nothing is a refusal.
    return _matched(session.execute(_TAKE, params)) == 1


def _matched(result: Result[Any]) -> int:
    assert isinstance(result, CursorResult)
    return result.rowcount


def create(session: Session, service: str, klass: str) -> None:
    """A full bucket (a no-op when another process made it first)."""
    session.execute(_CREATE, {"service": service, "class": klass})


def refusal(session: Session, service: str, klass: str, *, rate: float, burst: float) -> Refusal:
    row = session.execute(_WAIT, {"service": service, "class": klass, "rate": rate, "burst": burst}).one()
    return Refusal(float(row.rate), float(row.burst), max(0.0, float(row.wait)))


_EMPTY = text("DELETE FROM rate_bucket WHERE service = :service AND class = :class")


def set_limit(session: Session, service: str, klass: str, *, rate: float, burst: int) -> None:
    """Store the admin's limit; the bucket starts over, full (its tat was counted in the old rate)."""
    session.execute(_SET, {"service": service, "class": klass, "rate": rate, "burst": burst})
    session.execute(_EMPTY, {"service": service, "class": klass})


def reset_limit(session: Session, service: str, klass: str) -> None:
    session.execute(_RESET, {"service": service, "class": klass})
    session.execute(_EMPTY, {"service": service, "class": klass})


def custom_limits(session: Session, service: str) -> dict[str, tuple[float, int]]:
    """(rate, burst) of each class the admin set for ``service``."""
    rows = session.execute(_ALL, {"service": service}).all()
    return {str(r[0]): (float(r[1]), int(r[2])) for r in rows}
