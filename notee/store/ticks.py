"""SQL of the scheduler's minute ledger, ``cycle_tick`` (schema/mysql/0005_cycle_ticks.sql).

A minute is claimed by inserting its row: the primary key (namespace, minute_utc) makes the insert
succeed for exactly one scheduler replica; the others get a duplicate-key error, which here means
"someone else has it", not a failure. Each function takes the caller's connection/session and
runs one statement; the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    delete,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from notee.core.clock import naive_utc
from notee.store.mysql import AnyRow, affected

_metadata = MetaData()
cycle_tick = Table(
    "cycle_tick",
    _metadata,
    Column("namespace", String(64), primary_key=True),
    Column("minute_utc", DateTime, primary_key=True),
    Column("state", String(7), nullable=False),
    Column("owner", String(100), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("jobs", Integer, nullable=False),
    Column("claimed_at", DateTime, nullable=False),
    Column("finished_at", DateTime),
)

_DB_NOW = func.utc_timestamp(6)  # leases use the database clock, not the replicas' clocks
_MYSQL_DUPLICATE_KEY = 1062


def _is_duplicate(exc: IntegrityError) -> bool:
    args: tuple[object, ...] = getattr(exc.orig, "args", ())
    return bool(args) and args[0] == _MYSQL_DUPLICATE_KEY


def claim(session: Session, *, namespace: str, minute_utc: datetime, owner: str, lease_s: int) -> bool:
    """Claim a minute for ``owner``. True: it is ours to run now. False: another replica has it
    (running under a live lease) or it is already finished.

    A row still 'running' whose claim is older than ``lease_s`` belonged to a replica that died
    mid-minute; it is taken over with a conditional UPDATE (only one replica's UPDATE matches).
    """
    minute = naive_utc(minute_utc)
    try:
        with session.begin_nested():
            session.execute(
                insert(cycle_tick).values(
                    namespace=namespace,
                    minute_utc=minute,
                    state="running",
                    owner=owner[:100],
                    attempts=1,
                    jobs=0,
                    claimed_at=_DB_NOW,
                )
            )
        return True
    except IntegrityError as exc:
        if not _is_duplicate(exc):
            raise
    taken = session.execute(
        update(cycle_tick)
        .where(
            cycle_tick.c.namespace == namespace,
            cycle_tick.c.minute_utc == minute,
            cycle_tick.c.state == "running",
            cycle_tick.c.claimed_at < func.timestampadd(literal_column("SECOND"), -lease_s, _DB_NOW),
        )
        .values(owner=owner[:100], attempts=cycle_tick.c.attempts + 1, claimed_at=_DB_NOW)
    )
    return affected(taken) == 1


def finish(session: Session, *, namespace: str, minute_utc: datetime, owner: str, state: str, jobs: int) -> bool:
    """Record the outcome of a minute we own. False if our claim was taken over meanwhile."""
    if state not in ("done", "late"):
        raise ValueError(f"not a finishing state: {state}")
    result = session.execute(
        update(cycle_tick)
        .where(
            cycle_tick.c.namespace == namespace,
            cycle_tick.c.minute_utc == naive_utc(minute_utc),
            cycle_tick.c.owner == owner[:100],
            cycle_tick.c.state == "running",
        )
        .values(state=state, jobs=jobs, finished_at=_DB_NOW)
    )
    return affected(result) == 1


def record_skipped(
    session: Session, *, namespace: str, minutes: Iterable[datetime], owner: str, before: datetime
) -> int:
    """Record missed minutes as skipped (never sent). Minutes that already have a row keep it, and
    minutes at or after ``before`` (the caller's now − grace) are never recorded: those may still
    run, so marking them would suppress them."""
    limit = naive_utc(before)
    rows = [
        {
            "namespace": namespace,
            "minute_utc": naive_utc(m),
            "state": "skipped",
            "owner": owner[:100],
            "attempts": 0,
            "jobs": 0,
        }
        for m in minutes
        if naive_utc(m) < limit
    ]
    if not rows:
        return 0
    stmt = insert(cycle_tick).prefix_with("IGNORE").values(claimed_at=_DB_NOW, finished_at=_DB_NOW)
    return affected(session.execute(stmt, rows))


def last_recorded_before(session: Session, *, namespace: str, before: datetime) -> datetime | None:
    """The latest minute with a row strictly before ``before`` (one index probe), naive UTC."""
    latest: datetime | None = session.scalar(
        select(func.max(cycle_tick.c.minute_utc)).where(
            cycle_tick.c.namespace == namespace, cycle_tick.c.minute_utc < naive_utc(before)
        )
    )
    return latest


def get(session: Session, *, namespace: str, minute_utc: datetime) -> AnyRow | None:
    """The row of one minute (a ``Row`` with the table's columns), or None."""
    return session.execute(
        select(cycle_tick).where(cycle_tick.c.namespace == namespace, cycle_tick.c.minute_utc == naive_utc(minute_utc))
    ).one_or_none()


def states(session: Session, *, namespace: str, start: datetime, end: datetime) -> dict[datetime, str]:
    """minute (naive UTC) -> state for ``start <= minute < end``."""
    rows = session.execute(
        select(cycle_tick.c.minute_utc, cycle_tick.c.state).where(
            cycle_tick.c.namespace == namespace,
            cycle_tick.c.minute_utc >= naive_utc(start),
            cycle_tick.c.minute_utc < naive_utc(end),
        )
    )
    return {m: s for m, s in rows}


def prune_ticks(session: Session, *, older_than: datetime, batch: int = 5000) -> int:
    """Delete up to ``batch`` rows (every namespace) of minutes before ``older_than``; returns how
    many. Call until it returns less than ``batch``: small batches keep locks short."""
    result = session.execute(
        delete(cycle_tick)
        .where(cycle_tick.c.minute_utc < naive_utc(older_than))
        .with_dialect_options(mysql_limit=batch)
    )
    return affected(result)


def retention_cutoff(now_utc: datetime, retention_days: int) -> datetime:
    return naive_utc(now_utc) - timedelta(days=retention_days)


def recent_minutes(session: Session, limit: int = 5) -> list[AnyRow]:
    """The latest claimed minutes of every namespace, newest first (the web console's health page)."""
    return list(
        session.execute(
            select(
                cycle_tick.c.namespace,
                cycle_tick.c.minute_utc,
                cycle_tick.c.state,
                cycle_tick.c.owner,
                cycle_tick.c.jobs,
                cycle_tick.c.finished_at,
            )
            .order_by(cycle_tick.c.minute_utc.desc())
            .limit(limit)
        ).all()
    )
