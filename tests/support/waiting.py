"""Waiting in tests: on a condition, with a deadline; never a fixed sleep.

A deadline is a bound, not a timing assertion: it only stops a test that would never pass, so it is
generous (a loaded 2-core machine runs tests in parallel). The poll interval is short: a test goes on
as soon as the condition holds.

    job = wait_for(lambda: finished(job_id), timeout=60, what="the job done")      # threads, processes
    await until(lambda: server.of(PingAckReceived), timeout=5, what="the PING ACK")  # inside a loop
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["until", "wait_for"]

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], *, timeout: float, interval: float = 0.1, what: str = "condition") -> T:
    """Poll until ``predicate()`` is truthy and return it; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


async def until(predicate: Callable[[], T], *, timeout: float, interval: float = 0.005, what: str = "condition") -> T:
    """``wait_for`` for code on an event loop: the loop runs (other tasks, callbacks) while it waits."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
