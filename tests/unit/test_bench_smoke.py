"""A tiny run of every benchmark (docs/BENCHMARKS.md) against the test stores and the test emulator, so
the benchmarks cannot rot. These tests check that each figure is *measured* and well formed; they
assert nothing about speed (performance is measured by ``make bench``, never by timed tests).

Here, the rules that need no server; tests/integration/test_bench_smoke.py has the rest."""

from __future__ import annotations

import json
from datetime import UTC

import pytest

from bench import report


def test_results_files(tmp_path):
    from datetime import datetime

    figs = {
        "slot_walk_ratio": report.figure(
            "slot_walk_ratio", report.Measure("a", 9.5, "rows/s"), report.Measure("b", 10.0, "rows/s"), {"rows": 10}
        ),
        "send_cpu_ratio": report.missing("Notee side not available: no module"),
    }
    speed = (report.speed_probe(), 123.4)
    assert speed[0] > 0
    doc = report.write("quick", figs, datetime.now(UTC), tmp_path, speed=speed)
    on_disk = json.loads((tmp_path / "latest.json").read_text())
    assert on_disk["machine"]["speed_probe_ms"] == list(speed)
    assert on_disk["figures"] == doc["figures"]
    assert list(on_disk["figures"]) == list(report.GOALS)  # every figure present, in table order
    assert on_disk["figures"]["slot_walk_ratio"]["value"] == 0.95 and on_disk["figures"]["slot_walk_ratio"]["met"]
    assert on_disk["figures"]["fanout_ratio"] == {"missing": True, "reason": "not run"}
    md = (tmp_path / "latest.md").read_text()
    for name in report.GOALS:
        assert f"| {name} |" in md
    assert "Notee side not available" in md
    assert f"speed probe {speed[0]:g} ms before, 123.4 ms after" in md


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
