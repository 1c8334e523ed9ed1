"""The soak's memory trend check (tests/soak/test_soak.py), on made-up samples: a steady creep is
caught by the slope even when end-versus-start growth stays under the soak's growth limit."""

from __future__ import annotations

import math

import pytest

from tests.soak.test_soak import MAX_GROWTH, MAX_SLOPE_MB_PER_MIN, slope_mb_per_min

MB = 2**20


def samples(mb_per_min: float, *, minutes: float = 10, base_mb: float = 100) -> list[tuple[float, int]]:
    """Every 5 s, with a +-2 MB sawtooth (garbage collection) on top of the trend."""
    out = []
    for i in range(int(minutes * 12) + 1):
        t = i * 5.0
        wobble = 2 * math.sin(i * 1.3)
        out.append((t, int((base_mb + mb_per_min * t / 60 + wobble) * MB)))
    return out


def test_a_creep_of_0_8_mb_per_min_fails_the_trend_check_though_growth_passes():
    points = samples(0.8)
    warm = 120.0
    # growth over the 8 minutes after warm-up: about 6.4 MB on 100 MB, under the 10 % growth limit
    start = [r for t, r in points if warm <= t < warm + 60]
    end = [r for t, r in points if t >= 540]
    assert (sum(end) / len(end) - sum(start) / len(start)) / (sum(start) / len(start)) < MAX_GROWTH
    assert slope_mb_per_min(points, warm) == pytest.approx(0.8, abs=0.1)
    assert slope_mb_per_min(points, warm) >= MAX_SLOPE_MB_PER_MIN


def test_flat_memory_with_gc_noise_passes():
    assert abs(slope_mb_per_min(samples(0.0), 120.0)) < MAX_SLOPE_MB_PER_MIN


def test_too_few_samples_after_warm_up_fail_loudly():
    with pytest.raises(AssertionError, match="run longer"):
        slope_mb_per_min(samples(0.0, minutes=1), 120.0)
