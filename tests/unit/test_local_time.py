"""Local-time publish (issue 18 item 2): ``local_time: "09:00"`` reaches each recipient when the clock
of its zone (the user's, else the service's) next shows 09:00, DST-correct, through one job whose
parts are released by the job queue at their minute (task ``lease_until``, the database clock) and
whose worker pages keep only the part's recipients. No per-user timer, no per-user row at publish.

The release rule is the cycle scheduler's (``clock.due_walls``): it is checked here against a brute
force walk of UTC minutes through every DST change used; the end-to-end tests publish on a simulated
date (``at``) around the 2026 fall-back in New York and check each device received one push, each in
the part of its own local 09:00.

Here, the rules that need no server; tests/integration/test_local_time.py has the rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from notee.core import clock
from notee.usecases import planning


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    "start, hhmm, zone, expected",
    [
        # New York falls back on 2026-11-01 at 02:00 EDT -> 01:00 EST (06:00Z)
        (utc(2026, 10, 31, 12, 0), (9, 0), "America/New_York", utc(2026, 10, 31, 13, 0)),  # EDT, the same day
        (utc(2026, 10, 31, 20, 0), (9, 0), "America/New_York", utc(2026, 11, 1, 14, 0)),  # EST, the next day
        (utc(2026, 11, 1, 4, 0), (1, 30), "America/New_York", utc(2026, 11, 1, 5, 30)),  # repeated: first one
        (utc(2026, 11, 1, 5, 45), (1, 30), "America/New_York", utc(2026, 11, 2, 6, 30)),  # not the repeat
        # New York springs forward on 2026-03-08 at 02:00 EST -> 03:00 EDT (07:00Z): 02:30 does not exist
        (utc(2026, 3, 8, 5, 0), (2, 30), "America/New_York", utc(2026, 3, 8, 7, 0)),  # shifted to 03:00 EDT
        (utc(2026, 3, 8, 5, 0), (3, 0), "America/New_York", utc(2026, 3, 8, 7, 0)),
        # Berlin falls back on 2026-10-25 at 03:00 CEST -> 02:00 CET (01:00Z)
        (utc(2026, 10, 24, 12, 0), (9, 0), "Europe/Berlin", utc(2026, 10, 25, 8, 0)),
        # Lord Howe shifts by 30 minutes (2026-10-04 02:00 -> 02:30)
        (utc(2026, 10, 3, 14, 0), (2, 15), "Australia/Lord_Howe", utc(2026, 10, 3, 15, 30)),
        # no DST; the current minute counts (09:00:40 KST -> 09:00 is now)
        (utc(2026, 11, 30, 0, 0, 40), (9, 0), "Asia/Seoul", utc(2026, 11, 30, 0, 0)),
        (utc(2026, 11, 30, 0, 1), (9, 0), "Asia/Seoul", utc(2026, 12, 1, 0, 0)),
    ],
)
def test_release_instant(start, hhmm, zone, expected):
    assert clock.local_release(start, *hhmm, zone) == expected


def _brute_force(start: datetime, hour: int, minute: int, zone: str) -> datetime:
    """The first UTC minute, from start's, at which the scheduler's walk makes hour:minute due."""
    m = clock.floor_minute(start)
    for _ in range(26 * 60):
        if any((w.hour, w.minute) == (hour, minute) for w in clock.due_walls(m, zone)):
            return m
        m += clock.MINUTE
    raise AssertionError("never due")


@pytest.mark.parametrize(
    "zone, day",
    [
        ("America/New_York", utc(2026, 3, 7, 18)),
        ("America/New_York", utc(2026, 10, 31, 18)),
        ("Europe/Berlin", utc(2026, 10, 24, 18)),
        ("Australia/Lord_Howe", utc(2026, 10, 3, 6)),
    ],
)
def test_release_is_the_schedulers_walk_around_each_dst_change(zone, day):
    """Every local time on the hour and half hour, from several start instants around the change."""
    for start in (day, day + timedelta(hours=7, minutes=13), day + timedelta(hours=11, minutes=31)):
        for hour in range(24):
            for minute in (0, 30):
                got = clock.local_release(start, hour, minute, zone)
                assert got == _brute_force(start, hour, minute, zone), (zone, start, hour, minute)
                assert clock.floor_minute(start) <= got <= start + timedelta(hours=25)


def test_parts_group_zones_by_release_minute_and_take_each_release_once():
    start = utc(2026, 10, 31, 20, 0)
    zones = ["America/New_York", "America/Toronto", "Europe/Berlin", "Asia/Seoul", "Asia/Kolkata"]
    parts = planning.local_parts(start, 9, 0, zones)
    assert [(p.at, p.zones) for p in parts] == [
        (utc(2026, 11, 1, 0, 0), ("Asia/Seoul",)),
        (utc(2026, 11, 1, 3, 30), ("Asia/Kolkata",)),
        (utc(2026, 11, 1, 8, 0), ("Europe/Berlin",)),
        (utc(2026, 11, 1, 14, 0), ("America/New_York", "America/Toronto")),  # one part: the same minute
    ]
    target = {"parts": [{"at": p.at.isoformat(), "zones": list(p.zones)} for p in parts]}
    for minute in range(0, 26 * 60, 7):  # any release, also of a zone not in use at publish, is in one part
        release = start + timedelta(minutes=minute)
        assert sum(planning.in_part(target, i, release) for i in range(len(parts))) == 1
