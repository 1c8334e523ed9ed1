"""The fan-out queue's levels for the metrics, read when Prometheus scrapes (``notee_job_queue_*``).

The API and every worker expose them (the same cluster-wide figures: dashboards take ``max``), so
the queue stays visible while no worker runs. Each scrape reads them in a short session of its own.
"""

from __future__ import annotations

from notee.core import metrics
from notee.store import queue_overview
from notee.store.runtime import Runtime


def watch_queue(runtime: Runtime) -> None:
    """From now on, every scrape of this process reports ``runtime``'s job queue."""

    def read() -> metrics.QueueLevels:
        with runtime.sessions() as session:
            return queue_overview.queue_levels(session)

    metrics.SCRAPE_TIME.queue = read
