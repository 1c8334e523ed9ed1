"""Liveness of the processes that serve no HTTP (worker, scheduler) for ``notee healthcheck``.

The process touches ``NOTEE_HEARTBEAT_FILE`` while it is healthy (the worker from its event loop
every few seconds, the scheduler after every minute's tick); the healthcheck reads the file's age.
A hung event loop or a tick that never ends lets the file age, and the container turns unhealthy.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

WORKER_INTERVAL_S = 5.0
# What `notee healthcheck` tolerates by default: a few missed worker beats; a missed minute tick.
MAX_AGE_S = {"worker": 30.0, "scheduler": 150.0, "webhooks": 30.0}  # webhooks: the dispatcher beats like a worker


def beat(path: str | None) -> None:
    """Record "alive now" (no-op without a configured file). Never raises: a full disk must not
    stop the work the heartbeat reports on."""
    if not path:
        return
    try:
        Path(path).touch(mode=0o600)
        os.utime(path)
    except OSError:
        pass


def age_s(path: str) -> float | None:
    """Seconds since the last beat, or None when there was none."""
    try:
        return max(0.0, time.time() - Path(path).stat().st_mtime)
    except FileNotFoundError:
        return None
