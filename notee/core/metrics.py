# over 400 lines: every metric of Notee is defined here once, so no two modules can define one twice.
"""Every Prometheus metric of Notee, defined once, on prometheus_client's default registry.

Shared layer: imports no Notee module, so the stores, the transport, the domain and the API all
count through it, each at the one place that owns the concern (docs/METRICS.md lists every metric
with its labels). The API serves the registry on ``/metrics`` (admin token); the worker, the
scheduler and the webhook dispatcher on their own metrics port (``serve``). Each process has one registry: the
API's listeners and the worker's lanes share one process (lanes are coroutines, not forked
processes), so no multiprocess mode is needed.

Cheap on the hot path: labelled children are looked up once per label set (``_child``, cached), a
page's pushes are counted once per (provider, outcome), and what is a level rather than an event
(open HTTP/2 streams, circuit breakers, the job queue, the webhook outbox) is read only when
Prometheus scrapes. No ``<name>_created`` series: Prometheus does not use them, and each would double
a counter's or histogram's series.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Protocol, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# No <name>_created series; called before the first metric below, as it applies to those made after it.
disable_created_metrics()  # type: ignore[no-untyped-call]

PREFIX = "notee_"

# --- HTTP API (notee/api/access.py) ------------------------------------------------------------------
HTTP_REQUESTS = Counter(
    "notee_http_requests_total",
    "HTTP requests answered by the API, by method, route template (never the raw path) and status.",
    ["method", "route", "status"],
)
HTTP_DURATION = Histogram(
    "notee_http_request_duration_seconds",
    "Time from a request's arrival to the end of its response, by method and route template.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
SUBSCRIBE_GROUP_SIZE = Histogram(
    "notee_subscribe_group_size",
    "Single topic subscribes answered by one store call (notee.api.subscribe_groups): requests per group.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1000),
)
RATE_LIMIT_REJECTIONS = Counter(
    "notee_rate_limit_rejections_total",
    "Tenant requests refused with 429 by the service's rate limit, by service and rate class.",
    ["service", "class"],
)

# --- delivery (notee/usecases/deliver.py) -------------------------------------------------------------------
PUSHES = Counter(
    "notee_pushes_total",
    "Pushes by their final outcome (sent, invalid_token, failed, no_credentials), by provider and service. "
    "A push re-sent after a retryable answer is counted once, when it ends.",
    ["provider", "service", "outcome"],
)
RECEIPTS = Counter(
    "notee_receipts_total", "Receipt events stored and counted, by service and event.", ["service", "event"]
)
PUSH_RETRIES = Counter(
    "notee_push_retries_total",
    "Push attempts that left the push waiting for another one: a retryable answer (cause=provider: 429, "
    "5xx) or none at all (cause=unreachable: connect failure, reset, timeout).",
    ["provider", "service", "cause"],
)

# --- transport (notee/providers/http2.py, http2_pool.py, notee/providers/breaker.py) -----------------
PROVIDER_LATENCY = Histogram(
    "notee_provider_response_seconds",
    "Time from opening a push's HTTP/2 stream to the provider's complete response, by provider.",
    ["provider"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
HTTP2_CONNECTIONS = Counter(
    "notee_http2_connections_opened_total", "HTTP/2 connections opened to a push provider.", ["provider"]
)
BREAKER_OPENED = Counter(
    "notee_circuit_breaker_opened_total",
    "Times a provider's circuit breaker opened (most of a page unreachable, or a failed probe).",
    ["provider"],
)

# --- fan-out work queue (notee/store/task_leases.py, notee/worker/lanes.py, notee/worker/task.py) ------
TASKS_CLAIMED = Counter("notee_tasks_claimed_total", "Fan-out tasks leased by this worker.")
LEASE_TAKEOVERS = Counter(
    "notee_task_lease_takeovers_total",
    "Fan-out tasks claimed from another worker whose lease had expired (it died or stalled).",
)
TASK_RELEASES = Counter(
    "notee_task_releases_total",
    "Fan-out tasks handed back unfinished, by cause (outage, error, paging_state, stop).",
    ["cause"],
)

# --- scheduler (notee/usecases/cycle_fire.py, notee/scheduler/runner.py) -----------------------------
SCHEDULER_MINUTES = Counter(
    "notee_scheduler_minutes_total",
    "Cycle minutes this scheduler recorded, by state: done (in its minute), late (after it, within the "
    "grace), skipped (missed beyond the grace; never sent).",
    ["state"],
)
SCHEDULER_LAG = Gauge(
    "notee_scheduler_minute_lag_seconds",
    "Seconds from the start of the last minute this scheduler ran to the moment its jobs were created.",
)
SCHEDULER_LAST_MINUTE = Gauge(
    "notee_scheduler_last_minute_timestamp_seconds",
    "Unix time of the start of the newest minute this scheduler ran (done or late).",
)
SCHEDULER_JOBS = Counter("notee_scheduler_jobs_created_total", "Cycle fan-out jobs created by this scheduler.")

# --- webhook dispatcher (notee/webhooks/dispatcher.py) ------------------------------------------------
WEBHOOK_ATTEMPTS = Counter(
    "notee_webhook_attempts_total",
    "Webhook delivery attempts by the endpoint's answer class (2xx, 3xx, 4xx, 5xx, timeout, connect, tls, "
    "transport, refused_address, unresolved, secret) and what the delivery became (delivered, retry, failed, "
    "lost: the claim ran out before the outcome was recorded).",
    ["answer", "outcome"],
)

# --- stores (notee/store/outage.py) ------------------------------------------------------------------
MYSQL_TRANSACTION_RETRIES = Counter(
    "notee_mysql_transaction_retries_total",
    "Transient MySQL errors (deadlock, lock_wait_timeout, lost_connection) met by a fan-out queue transaction "
    "(claim, checkpoint, complete, ...) or an import chunk's (import_rows, ...), by outcome: retried (run again), already_applied (the connection was "
    "lost after the commit landed: not run twice), gave_up (its attempts ran out: the caller backs off).",
    ["transaction", "kind", "outcome"],
)
STORE_ERRORS = Counter(
    "notee_store_errors_total",
    "Errors a store answered (or failed to answer) this process, by store (mysql, cassandra) and kind "
    "(outage: unreachable, timeout, unavailable; error: anything else except duplicate keys).",
    ["store", "kind"],
)


@cache
def _child(metric: Counter, *labels: str) -> Counter:
    """The labelled child of ``metric``, looked up once per label set (``labels()`` costs a lock)."""
    return metric.labels(*labels)


def pushes(provider: str, service: str, outcome: str) -> Counter:
    return _child(PUSHES, provider, service, outcome)


def push_retries(provider: str, service: str, cause: str) -> Counter:
    return _child(PUSH_RETRIES, provider, service, cause)


def rate_limit_rejections(service: str, rate_class: str) -> Counter:
    return _child(RATE_LIMIT_REJECTIONS, service, rate_class)


def task_releases(cause: str) -> Counter:
    return _child(TASK_RELEASES, cause)


def scheduler_minutes(state: str) -> Counter:
    return _child(SCHEDULER_MINUTES, state)


def http_requests(method: str, route: str, status: int) -> Counter:
    return _child(HTTP_REQUESTS, method, route, str(status))


@cache
def http_duration(method: str, route: str) -> Histogram:
    return HTTP_DURATION.labels(method, route)


@cache
def provider_latency(provider: str) -> Histogram:
    return PROVIDER_LATENCY.labels(provider)


def webhook_attempts(answer: str, outcome: str) -> Counter:
    return _child(WEBHOOK_ATTEMPTS, answer, outcome)


def mysql_transaction_retry(transaction: str, kind: str, outcome: str) -> None:
    _child(MYSQL_TRANSACTION_RETRIES, transaction, kind, outcome).inc()


def store_error(store: str, outage: bool) -> None:
    _child(STORE_ERRORS, store, "outage" if outage else "error").inc()


# --- levels read at scrape time ----------------------------------------------------------------------
class StreamSource(Protocol):
    """An HTTP/2 pool: its provider and how many streams are open on its connections now."""

    @property
    def provider(self) -> str: ...

    @property
    def open_streams(self) -> int: ...


class BreakerSource(Protocol):
    def states(self) -> dict[str, str]:
        """provider -> ``closed``, ``half_open`` or ``open``, for every provider it has guarded."""
        ...


@dataclass(frozen=True)
class QueueLevels:
    waiting: int  # tasks a worker may claim now: queued and due, or leased by a worker whose lease expired
    running: int  # tasks under a live lease
    delayed: int  # queued tasks not due yet: scheduled (send_at) or backing off after an outage
    oldest_waiting_age_s: float  # how long the oldest claimable task's job has been due (0 when none waits)


@dataclass(frozen=True)
class OutboxLevels:
    pending: int  # deliveries neither delivered nor failed: due, backing off, or under a dispatcher's lease
    due: int  # pending deliveries a dispatcher may claim now
    oldest_due_age_s: float  # how long the oldest claimable delivery has been due (0 when none is)


# A breaker's states, mildest first: a provider's state in a process is the worst its breakers report.
BREAKER_STATES = ("closed", "half_open", "open")

# The levels: name -> (help, label names). Families built from this table when Prometheus scrapes.
LEVELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "notee_http2_open_streams": ("HTTP/2 streams open to push providers now, by provider.", ("provider",)),
    "notee_circuit_breaker_state": (
        "A provider's circuit breaker in this process: 1 for its current state (closed, half_open: the next send "
        "is a probe, open), 0 for the others.",
        ("provider", "state"),
    ),
    "notee_job_queue_depth": (
        "Fan-out tasks a worker may claim now (queued and due, or leased by a worker whose lease expired).",
        (),
    ),
    "notee_job_queue_running": ("Fan-out tasks under a live lease.", ()),
    "notee_job_queue_delayed": (
        "Queued fan-out tasks not due yet: scheduled for a later send_at, or backing off after an outage.",
        (),
    ),
    "notee_job_queue_oldest_age_seconds": (
        "How long the job of the oldest claimable task has been due (since its send_at, else its creation); "
        "0 when nothing waits.",
        (),
    ),
    "notee_webhook_outbox_depth": (
        "Webhook deliveries pending: due, backing off after a failed attempt, or being attempted.",
        (),
    ),
    "notee_webhook_outbox_due": ("Pending webhook deliveries a dispatcher may claim now.", ()),
    "notee_webhook_outbox_oldest_due_age_seconds": (
        "How long the oldest claimable webhook delivery has been due; 0 when none is.",
        (),
    ),
}

Levels = TypeVar("Levels")


def _level(name: str, value: float | None = None) -> GaugeMetricFamily:
    """The family ``name`` of ``LEVELS``: empty, or with ``value`` when it has no labels."""
    help_text, labels = LEVELS[name]
    if value is not None:
        return GaugeMetricFamily(name, help_text, value=value)
    return GaugeMetricFamily(name, help_text, labels=list(labels))


def _open_streams(pools: list[StreamSource]) -> Metric:
    streams = _level("notee_http2_open_streams")
    totals: dict[str, int] = {}
    for pool in pools:
        totals[pool.provider] = totals.get(pool.provider, 0) + pool.open_streams
    for provider, n in sorted(totals.items()):
        streams.add_metric([provider], n)
    return streams


def _breaker_states(breakers: list[BreakerSource]) -> Metric:
    """One series per (provider, state), 1 for the state the provider is in and 0 for the others."""
    family = _level("notee_circuit_breaker_state")
    worst: dict[str, int] = {}
    for breaker in breakers:
        for provider, state in breaker.states().items():
            worst[provider] = max(worst.get(provider, 0), BREAKER_STATES.index(state))
    for provider, rank in sorted(worst.items()):
        for index, state in enumerate(BREAKER_STATES):
            family.add_metric([provider, state], 1 if index == rank else 0)
    return family


def _queue_families(levels: QueueLevels) -> list[Metric]:
    return [
        _level("notee_job_queue_depth", levels.waiting),
        _level("notee_job_queue_running", levels.running),
        _level("notee_job_queue_delayed", levels.delayed),
        _level("notee_job_queue_oldest_age_seconds", levels.oldest_waiting_age_s),
    ]


def _outbox_families(levels: OutboxLevels) -> list[Metric]:
    return [
        _level("notee_webhook_outbox_depth", levels.pending),
        _level("notee_webhook_outbox_due", levels.due),
        _level("notee_webhook_outbox_oldest_due_age_seconds", levels.oldest_due_age_s),
    ]


def _read_levels(read: Callable[[], Levels] | None, what: str) -> Levels | None:
    """``read()``, or None when unset or when it fails: no figures in this scrape rather than wrong ones."""
    if read is None:
        return None
    try:
        return read()
    except Exception as exc:
        log.warning("metrics: the %s's levels could not be read: %s", what, type(exc).__name__)
        return None


class _ScrapeTime(Collector):
    """The gauges that are levels: computed from live objects and short reads of MySQL when Prometheus
    scrapes, so the send path never pays for them. Objects are held weakly (a closed pool drops out by
    itself); ``queue`` and ``outbox`` are set by the processes that report them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: weakref.WeakSet[StreamSource] = weakref.WeakSet()
        self._breakers: weakref.WeakSet[BreakerSource] = weakref.WeakSet()
        self.queue: Callable[[], QueueLevels] | None = None
        self.outbox: Callable[[], OutboxLevels] | None = None

    def track_pool(self, pool: StreamSource) -> None:
        with self._lock:
            self._pools.add(pool)

    def track_breaker(self, breaker: BreakerSource) -> None:
        with self._lock:
            self._breakers.add(breaker)

    def describe(self) -> Iterable[Metric]:
        """Every family this collector may yield (empty): their names are registered like the others'."""
        return [_level(name) for name in LEVELS]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            pools, breakers, queue, outbox = list(self._pools), list(self._breakers), self.queue, self.outbox
        yield _open_streams(pools)
        yield _breaker_states(breakers)
        queue_levels = _read_levels(queue, "job queue")
        if queue_levels is not None:
            yield from _queue_families(queue_levels)
        outbox_levels = _read_levels(outbox, "webhook outbox")
        if outbox_levels is not None:
            yield from _outbox_families(outbox_levels)


SCRAPE_TIME = _ScrapeTime()
REGISTRY.register(SCRAPE_TIME)


# --- the metrics port of the worker, the scheduler and the webhook dispatcher -----------------------
def parse_ports(spec: str) -> list[int]:
    """``"9101"``, ``"9101-9110"`` (the first free one) or ``"0"`` (any free port)."""
    first, _, last = spec.partition("-")
    lo, hi = int(first), int(last or first)
    if not (0 <= lo <= hi <= 65535) or (lo == 0 and hi != 0):
        raise ValueError(f"not a port or port range: {spec!r}")
    return list(range(lo, hi + 1))


@dataclass
class MetricsServer:
    host: str
    port: int
    server: WSGIServer
    thread: threading.Thread

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(spec: str | None, host: str, process: str) -> MetricsServer | None:
    """Serve ``/metrics`` (the default registry) on a thread, at the first free port of ``spec``;
    None when ``spec`` is unset. Logs the port chosen; OSError when no port of the range is free."""
    if not spec:
        return None
    ports = parse_ports(spec)
    last_error: OSError | None = None
    for port in ports:
        try:
            server, thread = start_http_server(port, addr=host)
        except OSError as exc:  # in use (another process of this host took it): try the next one
            last_error = exc
            continue
        bound = int(server.server_address[1])
        log.info("%s: metrics on http://%s:%d/metrics", process, host, bound)
        return MetricsServer(host, bound, server, thread)
    raise OSError(f"{process}: no free metrics port in {spec} on {host}: {last_error}")
