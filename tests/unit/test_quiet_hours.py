"""Quiet hours (issue 18 item 3): a service and a user may set a daily local-time window in which
TOPIC pushes are held until it ends (or dropped, as the template says); cycle pushes are not
affected; a single send opts in. The window follows the recipient's clock: tested across midnight
and across DST changes (pure), and end to end on a simulated date and on the database clock.

Here, the rules that need no server; tests/integration/test_quiet_hours.py has the rest."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from notee.core import clock
from notee.usecases import planning


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def hm(text_: str) -> int:
    return int(text_[:2]) * 60 + int(text_[3:])


NIGHT = (hm("22:00"), hm("07:00"))


@pytest.mark.parametrize(
    "moment, inside",
    [
        (utc(2026, 11, 30, 12, 59), False),  # 21:59 KST
        (utc(2026, 11, 30, 13, 0), True),  # 22:00
        (utc(2026, 11, 30, 15, 0), True),  # 00:00, across midnight
        (utc(2026, 11, 30, 21, 59), True),  # 06:59
        (utc(2026, 11, 30, 22, 0), False),  # 07:00: the end is not quiet
    ],
)
def test_a_window_across_midnight(moment, inside):
    assert clock.in_window(moment, "Asia/Seoul", *NIGHT) is inside


def test_a_window_within_a_day():
    assert clock.in_window(utc(2026, 11, 30, 3, 30), "Asia/Seoul", hm("12:00"), hm("13:00"))
    assert not clock.in_window(utc(2026, 11, 30, 4, 0), "Asia/Seoul", hm("12:00"), hm("13:00"))


@pytest.mark.parametrize(
    "moment, zone, window, end",
    [
        # across midnight: 23:30 KST -> 07:00 KST the next day
        (utc(2026, 11, 30, 14, 30), "Asia/Seoul", NIGHT, utc(2026, 11, 30, 22, 0)),
        # outside: now
        (utc(2026, 11, 30, 5, 0), "Asia/Seoul", NIGHT, utc(2026, 11, 30, 5, 0)),
        # New York springs forward 2026-03-08 02:00 EST -> 03:00 EDT: an end at 02:30 (in the gap) is
        # reached at the first minute after it, 03:00 EDT
        (utc(2026, 3, 8, 6, 50), "America/New_York", (hm("22:00"), hm("02:30")), utc(2026, 3, 8, 7, 0)),
        # the night the clocks spring forward is an hour shorter: 23:00 EST -> 07:00 EDT = 7 hours
        (utc(2026, 3, 8, 4, 0), "America/New_York", NIGHT, utc(2026, 3, 8, 11, 0)),
        # New York falls back 2026-11-01 02:00 EDT -> 01:00 EST: a 22:00-07:00 night is an hour longer
        (utc(2026, 11, 1, 3, 0), "America/New_York", NIGHT, utc(2026, 11, 1, 12, 0)),
        # a window ending in the repeated hour ends each time the clock reaches its end: 01:10 EDT -> 01:30 EDT
        (utc(2026, 11, 1, 5, 10), "America/New_York", (hm("00:00"), hm("01:30")), utc(2026, 11, 1, 5, 30)),
        # ... and at 01:10 EST (the clock shows 01:10 again: quiet again) -> 01:30 EST
        (utc(2026, 11, 1, 6, 10), "America/New_York", (hm("00:00"), hm("01:30")), utc(2026, 11, 1, 6, 30)),
        # Berlin falls back 2026-10-25 03:00 CEST -> 02:00 CET
        (utc(2026, 10, 24, 21, 0), "Europe/Berlin", NIGHT, utc(2026, 10, 25, 6, 0)),
    ],
)
def test_window_end(moment, zone, window, end):
    assert clock.window_end(moment, zone, *window) == end


def _plan(**extra):
    return {
        "from": utc(2026, 11, 30, 14, 30).isoformat(),
        "default_timezone": "Asia/Seoul",
        "quiet_mode": "hold",
    } | extra


def test_placement_holds_drops_or_sends():
    at = utc(2026, 11, 30, 14, 30)  # 23:30 KST
    assert planning.placement(_plan(), None, None) == (at, True)  # no window anywhere
    assert planning.placement(_plan(), None, NIGHT) == (utc(2026, 11, 30, 22, 0), True)  # held to 07:00 KST
    assert planning.placement(_plan(service_quiet=list(NIGHT)), None, None) == (utc(2026, 11, 30, 22, 0), True)
    assert planning.placement(_plan(service_quiet=list(NIGHT)), "Europe/Berlin", None) == (at, True)  # 15:30 there
    assert planning.placement(_plan(quiet_mode="drop"), None, NIGHT) == (at, False)  # dropped, in the part of now
    # with a local time: 06:00 local is inside the night, so it waits for 07:00
    assert planning.placement(_plan(local_time="06:00"), None, NIGHT) == (utc(2026, 11, 30, 22, 0), True)
    assert planning.placement(_plan(local_time="08:00"), None, NIGHT) == (utc(2026, 11, 30, 23, 0), True)


def test_a_publish_that_overrides_quiet_hours_places_everyone_at_its_base_minute():
    at = utc(2026, 11, 30, 14, 30)  # 23:30 KST: inside the night of the user and of the service
    override = _plan(quiet_mode="override", service_quiet=list(NIGHT))
    assert planning.placement(override, None, NIGHT) == (at, True)  # neither held nor dropped
    assert planning.placement(override, None, None) == (at, True)  # the service's window neither
    # with a local time: 06:00 local is inside the night, and sent at 06:00 all the same
    assert planning.placement(override | {"local_time": "06:00"}, None, NIGHT) == (utc(2026, 11, 30, 21, 0), True)
