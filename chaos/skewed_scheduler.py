"""``notee scheduler`` on a host whose clock is off by ``CHAOS_CLOCK_SKEW_S`` seconds: the chaos run's
skewed replica. Notee has no clock-offset setting; its scheduler takes its host clock as a parameter
(``Scheduler(host_clock=...)``, what tests/integration/test_scheduler_time.py injects), so this
launcher hands it a shifted one: the replica sees the skew (and warns about it) while the minutes
follow the database clock. Not shifted: APScheduler's second-0 timer, which reads the process's real
clock (a faked system clock, libfaketime, is not installed here)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from notee.cli.main import scheduler
from notee.core import clock
from notee.scheduler import runner


def main() -> None:
    skew = timedelta(seconds=float(os.environ.get("CHAOS_CLOCK_SKEW_S", "0")))
    original = runner.Scheduler.__init__

    def skewed_init(self: runner.Scheduler, *args: Any, **kwargs: Any) -> None:
        kwargs["host_clock"] = lambda: clock.now_utc() + skew
        original(self, *args, **kwargs)

    runner.Scheduler.__init__ = skewed_init  # type: ignore[method-assign]
    scheduler()


if __name__ == "__main__":
    main()
