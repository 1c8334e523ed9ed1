"""The console's pure helpers (issue 33): when a job sends, as the pages show it (notee/api/console/
when.py), and the server-rendered SVG charts (notee/api/console/charts.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from notee.api.console import charts, when

NOW = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, None),
        (-5, None),
        (9, "in 9 s"),
        (250, "in 4 min 10 s"),
        (2 * 3600 + 5 * 60 + 59, "in 2 h 5 min"),
        (26 * 3600, "in 1 d 2 h"),
    ],
)
def test_time_left(seconds, text):
    assert when.time_left(seconds) == text


def test_a_scheduled_job_in_the_service_zone_and_utc_across_a_dst_change():
    # Europe/Berlin moves to CEST at 01:00 UTC on 2026-03-29: 00:30 UTC is CET, 02:30 UTC is CEST.
    timed = when.timing("2026-03-29T02:30:00Z", {"topic": "a"}, "Europe/Berlin", NOW)
    assert timed.send_at == when.Moment(
        "2026-03-29 02:30:00 UTC",
        "2026-03-29 04:30 CEST (Europe/Berlin)",
        int(datetime(2026, 3, 29, 2, 30, tzinfo=UTC).timestamp()),
    )
    assert timed.left == "in 2 h 0 min" and timed.window is None and timed.local_time is None


def test_a_naive_send_at_is_utc_and_a_past_one_has_no_time_left():
    timed = when.timing(datetime(2026, 3, 29, 0, 0), {}, "Asia/Seoul", NOW)
    assert timed.send_at is not None and timed.send_at.local == "2026-03-29 09:00 KST (Asia/Seoul)"
    assert timed.left is None


def test_a_local_time_publish_shows_its_first_and_last_release():
    target = {
        "topic": "a",
        "local_time": "09:00",
        "parts": [
            {"at": "2026-03-29T07:00:00+00:00", "zones": ["Europe/Berlin"]},
            {"at": "2026-03-29T00:00:00+00:00", "zones": ["Asia/Seoul"]},
        ],
    }
    timed = when.timing(None, target, "Europe/Berlin", NOW)
    assert timed.send_at is None and timed.local_time == "09:00"
    assert timed.window is not None
    assert (timed.window[0].utc, timed.window[1].utc) == ("2026-03-29 00:00:00 UTC", "2026-03-29 07:00:00 UTC")


def test_an_unknown_zone_falls_back_to_utc_and_says_so():
    moment = when.moment(NOW, "Mars/Olympus")
    assert moment.local == "2026-03-29 00:30 UTC (time zone Mars/Olympus unknown here)"


def test_bars_scale_to_the_largest_and_escape_every_text():
    chart = charts.bars(
        "<b>t</b>", [charts.Bar("a", 5, "x<script>"), charts.Bar("b", 10, "y"), charts.Bar("c", 0, "z")]
    )
    assert chart.total == 15
    assert "<script>" not in chart.svg and "&lt;script&gt;" in chart.svg and "&lt;b&gt;t&lt;/b&gt;" in chart.svg
    assert 'height="124.0"' in chart.svg and 'height="62.0"' in chart.svg and 'height="0.0"' in chart.svg
    assert "style" not in chart.svg  # the console's CSP allows no inline style: presentation attributes only
    assert chart.svg.startswith("<svg") and 'role="img"' in chart.svg


def test_an_empty_chart_is_a_baseline():
    chart = charts.failure_bars([])
    assert chart.total == 0 and "<rect" not in chart.svg and "<line" in chart.svg
