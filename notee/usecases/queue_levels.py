"""The queues' levels for the metrics, read when Prometheus scrapes: the fan-out queue
(``notee_job_queue_*``) and the webhook outbox (``notee_webhook_outbox_*``).

The API exposes both, every worker the job queue and every webhook dispatcher the outbox (the same
cluster-wide figures in each: dashboards take ``max``), so a queue stays visible while no process
that works it runs. Each scrape reads them in a short session of its own.
"""

from __future__ import annotations

from notee.core import metrics
from notee.store import queue_overview, webhooks_sql
from notee.store.runtime import Runtime


def watch_queue(runtime: Runtime) -> None:
    """From now on, every scrape of this process reports ``runtime``'s job queue."""

    def read() -> metrics.QueueLevels:
        with runtime.sessions() as session:
            return queue_overview.queue_levels(session)

    metrics.SCRAPE_TIME.queue = read


def watch_outbox(runtime: Runtime) -> None:
    """From now on, every scrape of this process reports ``runtime``'s webhook outbox."""

    def read() -> metrics.OutboxLevels:
        with runtime.sessions() as session:
            return webhooks_sql.outbox_levels(session)

    metrics.SCRAPE_TIME.outbox = read
