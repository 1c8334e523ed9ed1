"""Backoff for retryable provider outcomes: exponential with full jitter, honouring Retry-After,
bounded in attempts and in delay. Pure; the caller sleeps."""

from __future__ import annotations

import random

BASE_S = 0.5
CAP_S = 60.0  # never wait longer than this between attempts, whatever Retry-After says


def backoff(
    attempt: int,
    retry_after: float | None = None,
    *,
    base: float = BASE_S,
    cap: float = CAP_S,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1).

    With a Retry-After the provider's value is the floor (plus up to 10 % jitter, so a batch that
    got the same value does not come back in lock step); otherwise full jitter over
    ``base * 2**(attempt-1)`` (AWS "Exponential Backoff And Jitter"). Both capped at ``cap``.
    """
    uniform = rng.uniform if rng is not None else random.uniform
    if retry_after is not None and retry_after >= 0:
        return min(cap, retry_after + uniform(0, 0.1 * retry_after + 0.01))
    return min(cap, uniform(0, base * 2 ** max(0, attempt - 1)))


def parse_retry_after(value: bytes | str | None) -> float | None:
    """Retry-After in delay-seconds form (FCM sends seconds); an HTTP-date is treated as absent."""
    if value is None:
        return None
    try:
        seconds = float(value.decode() if isinstance(value, bytes) else value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
