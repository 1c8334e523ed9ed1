"""A tiny run of every benchmark (docs/BENCHMARKS.md) against the test stores and the test emulator, so
the benchmarks cannot rot. These tests check that each figure is *measured* and well formed; they
assert nothing about speed (performance is measured by ``make bench``, never by timed tests).

Here, the rules that need no server; tests/integration/test_bench_smoke.py has the rest."""

from __future__ import annotations

import pytest

from bench import report


@pytest.mark.parametrize(
    "name,value,met",
    [
        ("slot_walk_ratio", 0.95, True),
        ("slot_walk_ratio", 0.94, False),
        ("cycle_minute_s", 59.9, True),
        ("cycle_minute_s", 60.0, False),
        ("worker_rss_growth", 1.1, True),
        ("worker_rss_growth", 1.11, False),
    ],
)
def test_goal_comparison(name, value, met):
    fig = report.figure(name, report.Measure("n", 1.0, "u"), report.Measure("d", 1.0, "u"), {}, value=value)
    assert fig["met"] is met


def test_zero_denominator_is_missing_not_a_value():
    fig = report.figure("slot_walk_ratio", report.Measure("n", 5.0, "rows/s"), report.Measure("d", 0.0, "rows/s"), {})
    assert fig["missing"] is True and "value" not in fig
