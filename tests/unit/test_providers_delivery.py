"""Delivery end to end against the real MariaDB/Cassandra and the emulator: single sends, routing,
pruning, retries, dead letters, loud config errors, no secrets in logs; plus the pure helpers.

Here, the rules that need no server; tests/integration/test_providers_delivery.py has the rest."""

from __future__ import annotations

import random

import pytest

from notee.providers.retry import backoff, parse_retry_after
from notee.providers.routing import choose


@pytest.mark.parametrize(
    "attempt,retry_after,low,high",
    [
        (1, None, 0.0, 0.5),
        (2, None, 0.0, 1.0),
        (4, None, 0.0, 4.0),
        (20, None, 0.0, 60.0),
        (1, 3.0, 3.0, 3.31),
        (5, 0.0, 0.0, 0.011),
        (1, 3600.0, 60.0, 60.0),
    ],
)
def test_backoff_bounds(attempt, retry_after, low, high):
    rng = random.Random(attempt)
    for _ in range(50):
        assert low <= backoff(attempt, retry_after, rng=rng) <= high


@pytest.mark.parametrize(
    "value,expected", [(b"5", 5.0), ("0", 0.0), (None, None), (b"-1", None), (b"Wed, 21 Oct 2015 07:28:00 GMT", None)]
)
def test_parse_retry_after(value, expected):
    assert parse_retry_after(value) == expected


@pytest.mark.parametrize(
    "os_,has_apns,has_fcm,expected",
    [
        ("IOS", True, True, "apns"),
        ("IOS", False, True, "fcm"),
        ("AOS", True, True, "fcm"),
        ("AOS", False, True, "fcm"),
        ("IOS", True, False, "apns"),
        ("IOS", False, False, None),
        ("AOS", True, False, None),
        ("AOS", False, False, None),
    ],
)
def test_routing(os_, has_apns, has_fcm, expected):
    assert choose(os_, has_apns=has_apns, has_fcm=has_fcm) == expected
