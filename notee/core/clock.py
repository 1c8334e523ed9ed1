"""Time, in one home below every layer that needs it (pure: no I/O; ``now_utc`` is the one reading of
the host's clock, the database's is ``notee.store.mysql.db_now``).

Instants: Notee computes with aware UTC datetimes and MySQL keeps naive UTC (DATA-RULES.md);
``aware_utc`` and ``naive_utc`` convert at the store's edge, ``stored_now`` is the host's now as a
column holds it.

Wall-clock maths of cycles, local-time publishes and quiet hours:

A cycle subscription is "these days, at HH:MM local time in this IANA timezone". The scheduler
ticks once per UTC minute and, for each timezone in use, asks :func:`due_buckets` which local
(day, hour, minute) buckets fall due at that UTC minute. The rule, which keeps every local minute
firing exactly once per day whatever the offset does:

* Normally a UTC minute maps to exactly one local minute, and that bucket is due.
* Spring forward (a gap, e.g. New York 2026-03-08 02:00 -> 03:00): the local minutes inside the
  gap never exist. They fire once, at the first valid minute after the gap, so the UTC minute that
  reads 03:00 local makes 02:00 .. 02:59 *and* 03:00 due.
* Fall back (a repeat, e.g. New York 2026-11-01 02:00 -> 01:00): 01:00 .. 01:59 happen twice.
  They fire only on their first occurrence (``fold=0``); during the second pass nothing is due.

Python's ``zoneinfo`` gives the offsets (PEP 495 ``fold`` semantics); the IANA database that
``zoneinfo`` reads (system tzdata, or the ``tzdata`` package) is the source of truth for rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from notee.core.vocabulary import DAYS, CycleTarget

MINUTE = timedelta(minutes=1)


def now_utc() -> datetime:
    """The host's clock, aware UTC."""
    return datetime.now(UTC)


def aware_utc(moment: datetime) -> datetime:
    """Aware UTC; a naive time is taken as UTC, as the stores keep it."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def naive_utc(moment: datetime) -> datetime:
    """The naive UTC instant a MySQL DATETIME column keeps; a naive time is taken as UTC already."""
    return moment if moment.tzinfo is None else moment.astimezone(UTC).replace(tzinfo=None)


def stored_now() -> datetime:
    """The host's now as a MySQL DATETIME column keeps it (naive UTC)."""
    return datetime.now(UTC).replace(tzinfo=None)


# Longest forward jump any zone has made (Samoa skipped a whole day in 2011); a wider "gap" means
# the input is broken, not the zone, so we refuse instead of firing a day of buckets.
_MAX_GAP = timedelta(hours=25)


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    """The ``ZoneInfo`` for an IANA name; raises ``ValueError`` for an unknown name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown IANA timezone {name!r}") from exc


def floor_minute(moment: datetime) -> datetime:
    """The UTC minute containing ``moment`` (aware, UTC, seconds zeroed). Naive input means UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def minutes(start: datetime, end: datetime) -> Iterator[datetime]:
    """UTC minutes ``start <= m < end`` (both floored)."""
    m, end = floor_minute(start), floor_minute(end)
    while m < end:
        yield m
        m += MINUTE


def _wall(moment_utc: datetime, tz: ZoneInfo) -> datetime:
    """Local wall-clock time as a *naive* datetime (naive arithmetic = wall-clock arithmetic)."""
    return moment_utc.astimezone(tz).replace(tzinfo=None)


def _first_occurrence_utc(wall: datetime, tz: ZoneInfo) -> datetime | None:
    """The UTC instant a local wall time first happens, or None if it never exists (in a gap)."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if _wall(first, tz) != wall:  # fold=0 of a nonexistent time round-trips to another time
        return None
    return first


def bucket(wall: datetime, tz_name: str) -> CycleTarget:
    return CycleTarget(timezone=tz_name, day=DAYS[wall.weekday()], hour=wall.hour, minute=wall.minute)


def due_walls(minute_utc: datetime, tz_name: str) -> list[datetime]:
    """The local wall-clock minutes (naive) due at ``minute_utc`` in ``tz_name``; see module doc."""
    tz = zone(tz_name)
    now = floor_minute(minute_utc)
    wall = _wall(now, tz)
    if _first_occurrence_utc(wall, tz) != now:
        return []  # the second pass of a repeated (fall-back) local time: it already fired
    previous = _wall(now - MINUTE, tz)
    jump = wall - previous
    if jump <= MINUTE:
        return [wall]
    if jump > _MAX_GAP:
        raise ValueError(f"{tz_name} jumps {jump} at {now.isoformat()}")
    # Spring forward: every local minute skipped between `previous` and `wall` fires now, once.
    due = []
    skipped = previous + MINUTE
    while skipped < wall:
        if _first_occurrence_utc(skipped, tz) is None:
            due.append(skipped)
        skipped += MINUTE
    due.append(wall)
    return due


def due_buckets(minute_utc: datetime, tz_name: str) -> list[CycleTarget]:
    """The cycle buckets of ``tz_name`` due at the UTC minute ``minute_utc`` (usually one)."""
    return [bucket(w, tz_name) for w in due_walls(minute_utc, tz_name)]


def idempotency_key(notification_key: str, target: CycleTarget, minute_utc: datetime) -> str:
    """The job key of one (template, bucket, UTC minute): created once, however often it is asked.

    Example: ``cycle:<uuid>:America/New_York:SUN0230:2026-03-08T07:00Z``.
    """
    m = floor_minute(minute_utc)
    return (
        f"cycle:{notification_key}:{target.timezone}:{target.day}{target.hour:02d}{target.minute:02d}:"
        f"{m.strftime('%Y-%m-%dT%H:%MZ')}"
    )


def local_release(after_utc: datetime, hour: int, minute: int, tz_name: str) -> datetime:
    """The UTC minute at which the wall clock of ``tz_name`` next shows ``hour:minute``, counting the
    minute containing ``after_utc`` (a local-time publish: "at 09:00 in each recipient's zone").

    It is the minute the cycle scheduler fires that wall time (``due_walls``), so the DST rules are
    the same: a time inside a spring-forward gap is reached at the first minute after the gap (02:30
    on a New York spring-forward day -> 03:00 EDT), a time repeated by a fall-back at its first
    occurrence (01:30 EDT, not 01:30 EST). The result is at most one local day (24 hours, 25 on a
    day that falls back) after ``after_utc``."""
    tz = zone(tz_name)
    start = floor_minute(after_utc)
    today = _wall(start, tz).replace(hour=hour, minute=minute)
    for wall in (today, today + timedelta(days=1), today + timedelta(days=2)):
        fires = _fires_at(wall, tz, tz_name)
        if fires >= start:
            return fires
    raise ValueError(f"{tz_name}: {hour:02d}:{minute:02d} not reached within two days of {start.isoformat()}")


def _fires_at(wall: datetime, tz: ZoneInfo, tz_name: str) -> datetime:
    """The UTC minute whose ``due_walls`` include the naive local ``wall``."""
    first = _first_occurrence_utc(wall, tz)
    if first is not None:
        return first
    # In a gap: due at the first minute after it, which lies between the wall read with the
    # offset after the transition (fold=1, earlier) and with the one before it (fold=0, later).
    m = floor_minute(wall.replace(tzinfo=tz, fold=1).astimezone(UTC))
    last = floor_minute(wall.replace(tzinfo=tz, fold=0).astimezone(UTC)) + _MAX_GAP
    while m <= last:
        if wall in due_walls(m, tz_name):
            return m
        m += MINUTE
    raise ValueError(f"{tz_name}: {wall.isoformat()} is never due")


def in_window(moment_utc: datetime, tz_name: str, start: int, end: int) -> bool:
    """Does the wall clock of ``tz_name`` at ``moment_utc`` show a minute of the daily window
    [start, end) (minutes of the day; start > end crosses midnight: 22:00-07:00)?"""
    wall = _wall(floor_minute(moment_utc), zone(tz_name))
    m = wall.hour * 60 + wall.minute
    return start <= m < end if start < end else (m >= start or m < end)


def window_end(moment_utc: datetime, tz_name: str, start: int, end: int) -> datetime:
    """The first UTC minute at or after ``moment_utc`` at which the wall clock of ``tz_name`` shows a
    minute outside the window [start, end): when quiet hours end. Walks wall-clock minutes, so a DST
    change is whatever the clock shows: an end inside a spring-forward gap is reached at the first
    minute after the gap; in a repeated (fall-back) hour the window is quiet each time the clock
    shows its minutes."""
    m = floor_minute(moment_utc)
    tz = zone(tz_name)
    for _ in range(2 * 24 * 60):
        wall = _wall(m, tz)
        w = wall.hour * 60 + wall.minute
        if not (start <= w < end if start < end else (w >= start or w < end)):
            return m
        m += MINUTE
    raise ValueError(f"{tz_name}: window {start}-{end} never ends")
