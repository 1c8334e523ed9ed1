"""Table-driven tests of the scheduler's pure wall-clock maths (notee/core/clock.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from notee.core import clock
from notee.core.vocabulary import CycleTarget
from notee.domain.rules import is_portable_timezone

NY = "America/New_York"
SEOUL = "Asia/Seoul"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def b(tz: str, day: str, hour: int, minute: int) -> CycleTarget:
    return CycleTarget(timezone=tz, day=day, hour=hour, minute=minute)


@pytest.mark.parametrize(
    ("minute_utc", "tz", "expected"),
    [
        # Seoul: UTC+9 all year, no DST.
        (utc(2026, 3, 8, 13, 0), SEOUL, [b(SEOUL, "SUN", 22, 0)]),
        (utc(2026, 3, 8, 15, 0), SEOUL, [b(SEOUL, "MON", 0, 0)]),  # crosses local midnight
        (utc(2026, 12, 31, 14, 59), SEOUL, [b(SEOUL, "THU", 23, 59)]),
        # New York, an ordinary winter and summer minute.
        (utc(2026, 1, 5, 3, 0), NY, [b(NY, "SUN", 22, 0)]),  # EST = UTC-5
        (utc(2026, 7, 6, 2, 0), NY, [b(NY, "SUN", 22, 0)]),  # EDT = UTC-4
        # Spring forward 2026-03-08: 01:59 EST (06:59Z) is followed by 03:00 EDT (07:00Z).
        (utc(2026, 3, 8, 6, 59), NY, [b(NY, "SUN", 1, 59)]),
        (utc(2026, 3, 8, 7, 1), NY, [b(NY, "SUN", 3, 1)]),
        # Fall back 2026-11-01: 01:00-01:59 EDT (05:00Z-05:59Z) then again in EST (06:00Z-06:59Z).
        (utc(2026, 11, 1, 5, 0), NY, [b(NY, "SUN", 1, 0)]),
        (utc(2026, 11, 1, 5, 59), NY, [b(NY, "SUN", 1, 59)]),
        (utc(2026, 11, 1, 6, 0), NY, []),  # 01:00 again: already fired
        (utc(2026, 11, 1, 6, 30), NY, []),
        (utc(2026, 11, 1, 6, 59), NY, []),
        (utc(2026, 11, 1, 7, 0), NY, [b(NY, "SUN", 2, 0)]),  # 02:00 EST exists once
        (utc(2026, 11, 1, 4, 59), NY, [b(NY, "SUN", 0, 59)]),
    ],
)
def test_due_buckets(minute_utc, tz, expected):
    assert clock.due_buckets(minute_utc, tz) == expected


def test_spring_forward_first_minute_after_gap_fires_the_whole_gap():
    due = clock.due_buckets(utc(2026, 3, 8, 7, 0), NY)
    assert due == [b(NY, "SUN", 2, m) for m in range(60)] + [b(NY, "SUN", 3, 0)]


def _fires_per_local_minute(tz: str, start: datetime, hours: int) -> dict[tuple[str, int, int], list[datetime]]:
    fired: dict[tuple[str, int, int], list[datetime]] = {}
    for m in clock.minutes(start, start + timedelta(hours=hours)):
        for t in clock.due_buckets(m, tz):
            fired.setdefault((t.day, t.hour, t.minute), []).append(m)
    return fired


@pytest.mark.parametrize(
    ("tz", "start"),
    [
        (NY, utc(2026, 3, 8, 5, 0)),  # local SUN 00:00 EST: the spring-forward day (23 h)
        (NY, utc(2026, 11, 1, 4, 0)),  # local SUN 00:00 EDT: the fall-back day (25 h)
        (SEOUL, utc(2026, 3, 7, 15, 0)),  # local SUN 00:00 KST
        ("Australia/Lord_Howe", utc(2026, 4, 4, 13, 0)),  # a 30-minute DST shift (fall back)
        ("Australia/Lord_Howe", utc(2026, 10, 3, 13, 30)),  # and its 30-minute spring forward
    ],
)
def test_every_local_minute_of_a_transition_day_fires_exactly_once(tz, start):
    day = clock.DAYS[start.astimezone(clock.zone(tz)).weekday()]
    assert start.astimezone(clock.zone(tz)).strftime("%H:%M") == "00:00"
    # Walk from an hour before local midnight to an hour after the next one (a local day is 23-25 h).
    fired = _fires_per_local_minute(tz, start - timedelta(hours=1), 27)
    expected = {(day, h, m) for h in range(24) for m in range(60)}
    assert {k for k in fired if k[0] == day} == expected
    assert all(len(v) == 1 for k, v in fired.items() if k[0] == day), {k: v for k, v in fired.items() if len(v) != 1}


def test_fall_back_fires_on_first_occurrence_only():
    fired = _fires_per_local_minute(NY, utc(2026, 11, 1, 4, 0), 4)
    assert fired[("SUN", 1, 30)] == [utc(2026, 11, 1, 5, 30)]  # 01:30 EDT, not 01:30 EST (06:30Z)


def test_spring_forward_gap_minutes_fire_at_the_first_valid_minute():
    fired = _fires_per_local_minute(NY, utc(2026, 3, 8, 4, 0), 6)
    assert fired[("SUN", 2, 30)] == [utc(2026, 3, 8, 7, 0)]  # 03:00 EDT
    assert fired[("SUN", 3, 0)] == [utc(2026, 3, 8, 7, 0)]


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (utc(2026, 3, 8, 7, 0, 59), utc(2026, 3, 8, 7, 0)),
        (datetime(2026, 3, 8, 7, 0, 1), utc(2026, 3, 8, 7, 0)),  # naive = UTC
        (datetime(2026, 3, 8, 16, 0, 30, tzinfo=clock.zone(SEOUL)), utc(2026, 3, 8, 7, 0)),
    ],
)
def test_floor_minute(moment, expected):
    assert clock.floor_minute(moment) == expected


def test_minutes_is_half_open():
    ms = list(clock.minutes(utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 0, 3)))
    assert ms == [utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2)]


def test_unknown_timezone_is_refused():
    assert not is_portable_timezone("Mars/Olympus")
    assert is_portable_timezone(SEOUL)
    with pytest.raises(ValueError):
        clock.due_buckets(utc(2026, 1, 1, 0, 0), "Mars/Olympus")


def test_idempotency_key_names_template_bucket_and_minute():
    key = clock.idempotency_key("k-1", b(NY, "SUN", 2, 30), utc(2026, 3, 8, 7, 0, 12))
    assert key == "cycle:k-1:America/New_York:SUN0230:2026-03-08T07:00Z"
