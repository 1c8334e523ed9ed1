"""``notee webhooks``: send the outbox (``webhook_delivery``) to the services' endpoints, signed.

A loop claims due deliveries (``FOR UPDATE SKIP LOCKED`` + a lease, so any number of dispatchers
share the outbox and each attempt is made by one of them), POSTs each body with its signature
(``Notee-Signature: t=...,v1=...``, docs/WEBHOOKS.md) and records the outcome fenced by the claim
token: a 2xx is delivered; anything else (another status, a timeout, a refused address, TLS) is
retried after an exponential backoff with jitter (``webhook_backoff_base_s`` doubling, capped at an
hour) until ``webhook_retry_hours`` after the event, then failed. A dispatcher killed mid-attempt
leaves its rows due again when their lease ends: delivery is at least once, and the event id lets
the receiver drop a duplicate.

It never touches fan-out: the worker and the API only write outbox rows in their transactions; a
slow or dead receiver delays only its own deliveries.

SSRF: before each attempt the host is resolved and every address checked (``address_refused``);
a name that resolves to a private, loopback or link-local address is refused unless
NOTEE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES. Redirects are not followed. (The HTTP client resolves the
name again to connect; a DNS answer that changes between the two — rebinding — is the remaining gap,
named in docs/WEBHOOKS.md.)

Metrics (NOTEE_WEBHOOKS_METRICS_PORT, docs/METRICS.md): every attempt counted by its answer's class
(never by URL or service) and what the delivery became; the outbox's levels read when Prometheus
scrapes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from notee.core import heartbeat, metrics
from notee.core.settings import Settings
from notee.domain.credentials import credentials_box
from notee.domain.webhooks import SIGNATURE_HEADER, address_refused, open_secret, signature
from notee.store import webhooks_sql as store
from notee.store.outage import is_store_outage
from notee.store.runtime import Runtime
from notee.store.webhooks_sql import Claimed
from notee.usecases.heartbeats import ProcessHeartbeat, beat_until
from notee.usecases.queue_levels import watch_outbox

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.5
LEASE_S = 120.0  # a claimed delivery is due again after this if its dispatcher died
BACKOFF_CAP_S = 3600.0
USER_AGENT = "Notee-Webhooks/1"
# The delivery's state after an attempt -> the outcome the metrics count (a lost claim: "lost").
OUTCOMES = {"delivered": "delivered", "pending": "retry", "failed": "failed"}


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt came to. ``answer`` is its class for the metrics: ``2xx``..``5xx`` when the
    endpoint answered (``status``), else why not (``error_class``; ``refused_address``, ``unresolved``,
    ``secret`` before any request); ``error`` says it for the delivery's last_error."""

    answer: str
    status: int | None = None
    error: str | None = None

    @property
    def delivered(self) -> bool:
        return self.answer == "2xx"


def status_class(status: int) -> str:
    """``2xx``, ``3xx`` (a redirect, not followed), ``4xx``, ``5xx``; ``other`` for anything else."""
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


def error_class(exc: httpx.HTTPError) -> str:
    """No answer: ``timeout``, ``tls`` (handshake or certificate refused), ``connect`` (refused,
    unreachable) or ``transport`` (the connection broke after it was made, a protocol error)."""
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return "tls"
        cause = cause.__cause__ or cause.__context__
    return "connect" if isinstance(exc, httpx.ConnectError) else "transport"


def retry_delay(attempts: int, base_s: float, rng: random.Random | None = None) -> float:
    """Wait before the next attempt after ``attempts`` failed ones: base x 2^(attempts-1), capped at an
    hour, equal jitter (half fixed, half random) so endpoints coming back are not hit all at once."""
    ceiling = min(BACKOFF_CAP_S, base_s * 2 ** max(attempts - 1, 0))
    return float(ceiling / 2 + (rng or random.Random()).uniform(0, ceiling / 2))


def tls_context(settings: Settings) -> ssl.SSLContext:
    """The system's trust store, plus NOTEE_WEBHOOK_CA_FILE when set (a private CA, the tests' CA)."""
    context = ssl.create_default_context()
    if settings.webhook_ca_file:
        context.load_verify_locations(cafile=settings.webhook_ca_file)
    return context


def _refused_address(url: str) -> AttemptResult | None:
    """Why the URL's host may not be called (it does not resolve, or to a non-public address), or None."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        infos = socket.getaddrinfo(host, parts.port or 443, type=socket.SOCK_STREAM)
    except OSError as exc:
        return AttemptResult("unresolved", error=f"cannot resolve {host}: {exc}")
    for info in infos:
        reason = address_refused(str(info[4][0]))
        if reason:
            return AttemptResult(
                "refused_address", error=f"{host} resolves to a {reason} address ({info[4][0]}); refused"
            )
    return None


class Dispatcher:
    def __init__(self, runtime: Runtime, *, stop: asyncio.Event | None = None) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.stop = stop or asyncio.Event()
        self.box = credentials_box(runtime.settings)
        self.client = httpx.AsyncClient(
            verify=tls_context(runtime.settings),
            timeout=runtime.settings.webhook_timeout_s,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
        )
        self.attempts = {"delivered": 0, "retry": 0, "failed": 0}  # outcomes recorded by this process

    async def close(self) -> None:
        await self.client.aclose()

    async def run(self, *, until_idle: bool = False) -> None:
        """Claim and send until ``stop`` (or, with ``until_idle``, until nothing is due)."""
        backoff = 0
        in_flight: set[asyncio.Task[None]] = set()
        try:
            while not self.stop.is_set():
                free = self.settings.webhook_concurrency - len(in_flight)
                if free <= 0:  # a slow endpoint holds one slot, never the next claim
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    batch = await asyncio.to_thread(
                        store.claim,
                        self.runtime.sessions,
                        limit=free,
                        lease_s=LEASE_S,
                        receipt_batch=self.settings.webhook_receipt_batch_events,
                    )
                    backoff = 0
                except Exception as exc:  # MySQL away: the outbox waits, nothing is lost
                    backoff += 1
                    log.warning("webhooks: claim failed (%s); retrying", type(exc).__name__)
                    await self._sleep(min(30.0, 2.0**backoff))
                    continue
                for claimed in batch:
                    task = asyncio.create_task(self._attempt(claimed))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                if not batch:
                    if until_idle and not in_flight:
                        return
                    await self._sleep(IDLE_POLL_S)
        finally:
            # On stop, attempts under way finish (each is bounded by webhook_timeout_s) and record.
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            pass

    async def _attempt(self, claimed: Claimed) -> None:
        result = await self._post(claimed)
        attempts = claimed.delivery.attempts + 1
        delay = 0.0 if result.delivered else retry_delay(attempts, self.settings.webhook_backoff_base_s)
        state = await self._record(claimed, result, delay)
        outcome = OUTCOMES.get(state or "", "lost")
        metrics.webhook_attempts(result.answer, outcome).inc()
        d = claimed.delivery
        if state is None:
            log.warning("webhook delivery %d: claim lost before its outcome was recorded", d.delivery_id)
            return
        self.attempts[outcome] += 1
        if state == "delivered":
            log.info(
                "webhook %s %s -> endpoint %s: delivered (%s) after %d attempt(s)",
                d.event_type,
                d.event_id,
                d.endpoint_id,
                result.status,
                attempts,
            )
        else:
            log.warning(
                "webhook %s %s -> endpoint %s: attempt %d failed (%s)%s",
                d.event_type,
                d.event_id,
                d.endpoint_id,
                attempts,
                result.error,
                "; gave up" if state == "failed" else f"; retry in {delay:.1f} s",
            )

    async def _post(self, claimed: Claimed) -> AttemptResult:
        """One attempt. Never raises."""
        if not self.settings.webhook_allow_private_addresses:
            refused = await asyncio.to_thread(_refused_address, claimed.url)
            if refused:
                return refused
        try:
            secret = open_secret(self.box, claimed.secret)
        except Exception as exc:  # key missing or rotated away: retried (an operator can fix the key)
            return AttemptResult("secret", error=f"cannot open the endpoint's secret: {type(exc).__name__}")
        body = claimed.body
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(secret, timestamp, body),
            "Notee-Event-Id": claimed.delivery.event_id,
            "Notee-Event-Type": claimed.delivery.event_type,
            "Notee-Delivery-Attempt": str(claimed.delivery.attempts + 1),
        }
        try:
            response = await self.client.post(claimed.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return AttemptResult(error_class(exc), error=f"{type(exc).__name__}: {exc}"[:300])
        result = AttemptResult(status_class(response.status_code), response.status_code)
        return result if result.delivered else AttemptResult(result.answer, result.status, f"HTTP {result.status}")

    async def _record(self, claimed: Claimed, result: AttemptResult, delay: float) -> str | None:
        """Record the outcome; while MySQL is away keep trying (until stop: then the lease expires and
        the attempt is simply made again: at least once)."""
        wait = 1.0
        while True:
            try:
                return await asyncio.to_thread(self._record_sync, claimed, result, delay)
            except Exception as exc:
                if self.stop.is_set() or not is_store_outage(exc):
                    log.warning("webhook delivery %d: outcome not recorded (%s)", claimed.delivery.delivery_id, exc)
                    return None
                await self._sleep(wait)
                wait = min(wait * 2, 30.0)

    def _record_sync(self, claimed: Claimed, result: AttemptResult, delay: float) -> str | None:
        with self.runtime.sessions.begin() as session:
            return store.record_attempt(
                session,
                claimed,
                delivered=result.delivered,
                status=result.status,
                error=result.error,
                retry_in_s=delay,
                retry_hours=self.settings.webhook_retry_hours,
            )


async def _main(runtime: Runtime) -> None:
    exporter = metrics.serve(runtime.settings.webhooks_metrics_port, runtime.settings.metrics_host, "webhooks")
    watch_outbox(runtime)  # the outbox's levels on every scrape
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    dispatcher = Dispatcher(runtime, stop=stop)
    log.info(
        "webhooks dispatcher: concurrency=%d, retry for %d h, ca_file=%s",
        runtime.settings.webhook_concurrency,
        runtime.settings.webhook_retry_hours,
        runtime.settings.webhook_ca_file or "-",
    )

    async def beat() -> None:
        while not stop.is_set():
            heartbeat.beat(runtime.settings.heartbeat_file)
            await dispatcher._sleep(heartbeat.WORKER_INTERVAL_S)

    beats = asyncio.create_task(beat())
    shared_beats = asyncio.create_task(beat_until(ProcessHeartbeat(runtime, "webhooks"), stop))
    try:
        await dispatcher.run()
    finally:
        stop.set()
        await beats
        await shared_beats
        await dispatcher.close()
        if exporter is not None:
            exporter.close()
        log.info("webhooks dispatcher stopped: %s", dispatcher.attempts)


def run(settings: Settings) -> None:
    """Entry point of ``notee webhooks``: runs until SIGTERM/SIGINT."""
    runtime = Runtime(settings)
    try:
        asyncio.run(_main(runtime))
    finally:
        runtime.close()
