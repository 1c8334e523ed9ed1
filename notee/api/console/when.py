"""When a job sends, as the console shows it (pure, no I/O): a scheduled job's ``send_at`` in the
service's time zone and in UTC with the time left, and a local-time publish's window (its first and
last release, from the plan its target keeps: docs/FANOUT.md "Local-time publishes")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from notee.core import clock


@dataclass(frozen=True, slots=True)
class Moment:
    utc: str  # "2026-12-05 09:30 UTC"
    local: str  # "2026-12-05 10:30 CET (Europe/Paris)"
    epoch_s: int  # what the page's countdown counts to


@dataclass(frozen=True, slots=True)
class Timing:
    """What the jobs list and a job's page show of when a job sends."""

    send_at: Moment | None  # scheduled for then (None: sent when made)
    left: str | None  # "in 2 h 5 min" while send_at is ahead, else None
    local_time: str | None  # "09:00": each recipient at that time of its own clock
    window: tuple[Moment, Moment] | None  # a planned job's first and last release


def _parse(value: Any) -> datetime | None:
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return clock.aware_utc(moment) if moment.tzinfo is None else moment.astimezone(UTC)


def moment(at: datetime, zone_name: str) -> Moment:
    """``at`` in UTC and in ``zone_name`` (UTC only when this host does not know the zone)."""
    try:
        local = at.astimezone(clock.zone(zone_name))
        local_text = f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({zone_name})"
    except ValueError:
        local_text = f"{at:%Y-%m-%d %H:%M} UTC (time zone {zone_name} unknown here)"
    return Moment(utc=f"{at:%Y-%m-%d %H:%M:%S} UTC", local=local_text, epoch_s=int(at.timestamp()))


def time_left(seconds: float) -> str | None:
    """``in 1 d 2 h``, ``in 2 h 5 min``, ``in 4 min 10 s``, ``in 9 s``; None once it is due."""
    if seconds <= 0:
        return None
    s = int(seconds)
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"in {days} d {hours} h"
    if hours:
        return f"in {hours} h {minutes} min"
    if minutes:
        return f"in {minutes} min {secs} s"
    return f"in {secs} s"


def timing(send_at: Any, target: dict[str, Any], zone_name: str, now: datetime) -> Timing:
    """A job's timing from its ``send_at`` and its stored target (``local_time``, ``parts``)."""
    at = _parse(send_at)
    parts = [p for p in (_parse(part.get("at")) for part in target.get("parts") or []) if p is not None]
    window = (moment(min(parts), zone_name), moment(max(parts), zone_name)) if parts else None
    return Timing(
        send_at=moment(at, zone_name) if at is not None else None,
        left=time_left((at - now).total_seconds()) if at is not None else None,
        local_time=target.get("local_time"),
        window=window,
    )
