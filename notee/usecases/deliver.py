"""Send a batch of pushes for one service: route each device to its provider, retry what is
retryable (bounded, with backoff honouring Retry-After), prune invalid tokens, dead-letter what
still fails. Nothing is dropped silently: every message ends delivered, pruned or dead-lettered.

- A device of a platform the service has no credentials for is not sent and not pruned: it is
  dead-lettered with reason ``no_credentials``. A service with no credentials at all (or a single
  send none of whose devices has a route) raises ``NoCredentials`` before anything is recorded.
- ``dry_run`` (the service's delivery mode) sends through the log provider only.
- Auth/configuration errors (``ProviderConfigError``) are never retried per device: the send stops,
  what was collected before it (deliveries, invalid tokens, dead letters) is still recorded, and
  ``DeliveryAborted`` carries those counts to the caller, which fails the send or job once.

This module is the caller the providers need: it loads a service's credentials (through
``notee.domain.credentials``) and hands them to ``ProviderSet``; the providers themselves never
read the registry. It owns its units of work (docs/ARCHITECTURE.md): short sessions for reads, one
transaction per pruned token and per batch of dead letters, never a session held across a send.
``DeliverySender`` is what a process keeps: the fan-out worker sends its pages through it, the API
its single sends.

Stopping (SIGTERM): the wait before a retry ends as soon as ``stop`` is set. A worker's page then
raises ``Stopping`` (nothing recorded: the task is released unadvanced and the next owner re-sends
the page); a single send (``dead_letter_on_stop``) dead-letters what was waiting, records its
prunes and dead letters, and answers, within the API's shutdown budget.

Transport errors (``RetryAfter(transport=True)``: the provider never answered) are not a device's
failure: they are retried without using the device's attempts, and ``ProviderUnavailable`` hands the
work back when nothing gets an answer for ``max_attempts`` rounds. With a circuit ``breaker`` (the
fan-out) a page mostly unreachable opens it at once and raises ``ProviderUnavailable``; the worker
releases its task without checkpointing and the page is sent again later (docs/FANOUT.md "Outages").

Refusals that are the provider's own (``RetryAfter(provider_wide=True)``: 5xx, FCM's project quota)
are not a device's failure either in a fan-out page (``provider_wait_s``): the page waits them out,
honouring Retry-After, for up to that long in all before they count; a single send, which a caller
waits for, counts them as attempts.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from notee.core import clock, metrics
from notee.core.errors import ProviderConfigError, ProviderUnavailable, QuietDropped, QuietHoursNow
from notee.core.logs import token_hint
from notee.core.vocabulary import PageCounts, ProviderCredentials
from notee.domain import services, templates, users
from notee.domain.credentials import credentials_box, load_credentials
from notee.domain.render import Rendered, choose_variant, render
from notee.domain.rules import check_data, check_send_inputs
from notee.domain.subscriptions import prune_token
from notee.providers.base import Delivered, Failed, InvalidToken, Message, Outcome, Provider, RetryAfter
from notee.providers.breaker import CircuitBreaker
from notee.providers.retry import backoff
from notee.providers.routing import NO_CREDENTIALS, ProviderSet
from notee.store import deadletter
from notee.store.mysql import db_now
from notee.store.runtime import Runtime

log = logging.getLogger(__name__)


class _Unset(enum.Enum):
    UNSET = enum.auto()  # credentials not given: deliver loads them


_UNSET = _Unset.UNSET


class Stopping(Exception):
    """The process is stopping while messages wait to be retried (``deliver(stop=...)``)."""


async def _wait(sleep: Callable[[float], Awaitable[None]], seconds: float, stop: asyncio.Event | None) -> bool:
    """Wait ``seconds`` before a retry; True if ``stop`` was set meanwhile (the wait ends at once)."""
    if stop is None:
        await sleep(seconds)
        return False
    if not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except TimeoutError:
            return False
    return True


@dataclass
class DeliveryResult:
    delivered: int = 0
    invalid_tokens: list[str] = field(default_factory=list)  # distinct tokens, pruned when prune=True
    retried: int = 0  # re-sends after a retryable outcome
    failed: list[tuple[str, str]] = field(default_factory=list)  # (token, reason), each dead-lettered
    no_credentials: int = 0  # of ``failed``: devices of a platform the service has no credentials for
    dry_run: bool = False  # the log provider recorded the messages; nothing was sent

    @property
    def pruned(self) -> int:
        return len(self.invalid_tokens)


class NoCredentials(ProviderConfigError):
    """No device of the send can be reached: the service has no credentials for their platforms."""


class DeliveryAborted(ProviderConfigError):
    """A provider configuration error stopped the send part-way. What was collected before it is
    recorded (pruned tokens, dead letters) and counted in ``partial``."""

    def __init__(self, cause: ProviderConfigError, partial: DeliveryResult) -> None:
        counts = (
            f"{partial.delivered} delivered, {partial.pruned} pruned, {len(partial.failed)} failed before the error"
        )
        super().__init__(cause.message, details=[*cause.details, {"type": "partial_delivery", "msg": counts}])
        self.partial = partial


def no_credentials_message(service: str) -> str:
    return (
        f"service {service} has no provider credentials for the platform of any device (Android needs FCM; "
        f"iOS needs APNs or FCM): upload them (PUT /v1/admin/services/{service}/credentials/fcm or apns), or "
        "set its delivery_mode to dry_run"
    )


async def deliver(
    runtime: Runtime,
    providers: ProviderSet,
    service: str,
    messages: Sequence[Message],
    *,
    credentials: ProviderCredentials | _Unset | None = _UNSET,
    job_id: str | None = None,
    dry_run: bool = False,
    entire_send: bool = True,
    max_attempts: int | None = None,
    prune: bool = True,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    stop: asyncio.Event | None = None,
    dead_letter_on_stop: bool = False,
    breaker: CircuitBreaker | None = None,
    provider_wait_s: float | None = None,
) -> DeliveryResult:
    """Deliver ``messages`` (one per device) for ``service``; returns counts and what failed.

    ``credentials``: the service's decrypted ProviderCredentials (or None); loaded from MySQL when
    not given. ``max_attempts`` defaults to ``settings.fanout_max_attempts``. ``entire_send``: the
    messages are the whole send (a single send), so "no device has a route" is the send's failure
    (NoCredentials); a fan-out page passes False (the job's other pages may have routes). ``stop``:
    set when the process is stopping; a retry wait then ends at once and either raises ``Stopping``
    (default) or, with ``dead_letter_on_stop``, dead-letters the messages that were waiting.
    Raises NoCredentials (nothing recorded) and DeliveryAborted (provider configuration error).
    With ``breaker`` (a fan-out page), raises ``ProviderUnavailable`` as soon as the breaker opens for a
    provider (what was learned is pruned and recorded first; the caller sends the page again later).
    ``provider_wait_s`` (a fan-out page): refusals that are the provider's own (a 503 storm, the
    project's quota) are retried without using the devices' attempts while the delivery has waited
    less than this in all; None: they count as attempts like any other retryable answer.
    """
    result = DeliveryResult(dry_run=dry_run)
    if not messages:
        return result
    if dry_run:
        routes = providers.dry_run(service)
    else:
        if credentials is _UNSET:
            credentials = await asyncio.to_thread(load_service_credentials, runtime, service)
        routes = providers.for_service(service, credentials)
        if not routes.any:
            raise NoCredentials(no_credentials_message(service))
    bound = max_attempts or runtime.settings.fanout_max_attempts
    _, unroutable = routes.split(messages)
    if unroutable and entire_send and len(unroutable) == len(messages):
        raise NoCredentials(no_credentials_message(service))
    attempts = [0] * len(messages)  # provider answers per message; connection problems do not count
    # of the retryable ones, those held against the device (compared with ``bound``)
    charged = [0] * len(messages)
    waited = 0.0  # seconds this delivery has waited between its rounds

    def may_retry(i: int, outcome: RetryAfter) -> bool:
        """Another attempt for message ``i``? The provider's own refusals are not held against the
        device while the delivery may still wait them out (``provider_wait_s``)."""
        if outcome.provider_wide and provider_wait_s is not None and waited < provider_wait_s:
            return True
        charged[i] += 1
        return charged[i] < bound

    invalid: dict[str, str] = {}
    dead: list[deadletter.DeadLetter] = []

    # this delivery's pushes by (provider, outcome) and retries by (provider, cause): counted in
    # the metrics once, at the end, not per push
    ended: dict[tuple[str, str], int] = {}
    retried: dict[tuple[str, str], int] = {}

    def fail(m: Message, provider: str, reason: str, tries: int, outcome: str = "failed") -> None:
        ended[provider, outcome] = ended.get((provider, outcome), 0) + 1
        result.failed.append((m.device_token, reason))
        dead.append(
            deadletter.DeadLetter(
                service=service,
                job_id=job_id,
                device_token=m.device_token,
                device_os=m.device_os,
                provider=provider,
                reason=reason,
                attempts=tries,
                payload={"title": m.title, "body": m.body, "data": dict(m.data)},
            )
        )

    for i in unroutable:  # never sent, never pruned: the token may be fine once credentials exist
        fail(messages[i], "none", NO_CREDENTIALS, 0, "no_credentials")
    result.no_credentials = len(unroutable)
    skip = set(unroutable)
    pending = [i for i in range(len(messages)) if i not in skip]
    rounds = outage_rounds = 0
    aborted: ProviderConfigError | None = None
    last_reason: dict[int, tuple[str, str]] = {}  # message index -> (provider, reason) of its last retryable answer
    try:
        while pending:
            rounds += 1
            retry: list[int] = []
            wait: float | None = None
            answered = False
            batch = [messages[i] for i in pending]
            groups, _ = routes.split(batch)
            for provider, idx in groups:
                try:
                    outcomes = await _send(provider, [batch[j] for j in idx], breaker)
                except ProviderUnavailable:  # the breaker opened: keep what was learned, hand the work back
                    await _keep(runtime, service, job_id, invalid if prune else {}, dead)
                    raise
                name, delivered = provider.name, 0
                for j, outcome in zip(idx, outcomes, strict=False):
                    i, m = pending[j], batch[j]
                    if isinstance(outcome, RetryAfter) and outcome.transport:
                        retry.append(i)  # the provider never answered about this device
                        last_reason[i] = (name, outcome.reason)
                        retried[name, "unreachable"] = retried.get((name, "unreachable"), 0) + 1
                        continue
                    answered = True
                    attempts[i] += 1
                    if isinstance(outcome, Delivered):
                        delivered += 1
                    elif isinstance(outcome, InvalidToken):
                        invalid.setdefault(m.device_token, f"{name} {outcome.reason}")
                        ended[name, "invalid_token"] = ended.get((name, "invalid_token"), 0) + 1
                    elif isinstance(outcome, RetryAfter) and may_retry(i, outcome):
                        retry.append(i)
                        last_reason[i] = (name, outcome.reason)
                        retried[name, "provider"] = retried.get((name, "provider"), 0) + 1
                        if outcome.seconds is not None:
                            wait = max(wait or 0.0, outcome.seconds)
                    else:
                        reason = outcome.reason if isinstance(outcome, (Failed, RetryAfter)) else repr(outcome)
                        if isinstance(outcome, RetryAfter):
                            within = f" in {waited:.0f} s" if provider_wait_s is not None else ""
                            reason = f"gave up after {attempts[i]} attempts{within}: {reason}"
                        fail(m, name, reason, attempts[i])
                if delivered:
                    result.delivered += delivered
                    ended[name, "sent"] = ended.get((name, "sent"), 0) + delivered
            outage_rounds = 0 if answered else outage_rounds + 1
            if retry and outage_rounds >= bound:
                # Nothing got an answer for `bound` rounds in a row: the provider is unreachable. Keep
                # what was learned, and hand the work back (the task is retried later, the API says 503).
                await _keep(runtime, service, job_id, invalid if prune else {}, dead)
                raise ProviderUnavailable(
                    f"push provider unreachable for service {service}: {len(retry)} "
                    f"message(s) not sent after {rounds} rounds"
                )
            if retry:
                result.retried += len(retry)
                delay = backoff(rounds, wait)
                waited += delay
                log.info(
                    "service=%s: retrying %d message(s) in %.2f s (round %d)", service, len(retry), delay, rounds + 1
                )
                if await _wait(sleep, delay, stop):
                    if not dead_letter_on_stop:
                        raise Stopping(f"stopping while {len(retry)} message(s) waited to retry")
                    for i in retry:
                        provider_name, last = last_reason[i]
                        fail(
                            messages[i],
                            provider_name,
                            f"not retried, shutting down after {attempts[i]} attempt(s): {last}",
                            attempts[i],
                        )
                    retry = []
            pending = retry
    except ProviderConfigError as exc:  # kept below, then raised: the caller fails the send/job once
        aborted = exc
    finally:  # what ended (and what waited for another attempt) is counted, also when the send stops
        for (provider_name, how), n in ended.items():
            metrics.pushes(provider_name, service, how).inc(n)
        for (provider_name, cause), n in retried.items():
            metrics.push_retries(provider_name, service, cause).inc(n)

    result.invalid_tokens = list(invalid)
    await _keep(runtime, service, job_id, invalid if prune else {}, dead)
    if aborted is not None:
        raise DeliveryAborted(aborted, result) from aborted
    return result


async def _keep(
    runtime: Runtime, service: str, job_id: str | None, invalid: dict[str, str], dead: list[deadletter.DeadLetter]
) -> None:
    """Prune the invalid tokens and record the dead letters of one delivery."""
    if invalid:
        await asyncio.to_thread(_prune, runtime, service, invalid)
    if dead:
        await asyncio.to_thread(_record, runtime, dead)
        log.warning(
            "service=%s job=%s: %d message(s) dead-lettered (first: %s)",
            service,
            job_id or "-",
            len(dead),
            dead[0].reason,
        )


async def _send(provider: Provider, messages: list[Message], breaker: CircuitBreaker | None) -> list[Outcome]:
    """``provider.send`` guarded by the circuit breaker: refused while it is open, one message as a
    probe when it is half-open, and it opens when most of the send was unreachable."""
    if breaker is None:
        return await provider.send(messages)
    name = provider.name
    wait = breaker.blocked_for(name)
    if wait > 0:
        raise ProviderUnavailable(f"{name}: circuit open, next probe in {wait:.1f} s", retry_in=wait)
    outcomes: list[Outcome] = []
    if breaker.probing(name):
        outcomes = await provider.send(messages[:1])
        if breaker.record(name, sent=1, unreachable=int(_unreachable(outcomes[0]))):
            log.warning("%s: probe failed (%s); circuit open for %.1f s", name, outcomes[0], breaker.blocked_for(name))
            raise ProviderUnavailable(f"{name}: probe failed", retry_in=breaker.blocked_for(name))
        log.info("%s: probe answered; circuit closed", name)
        messages = messages[1:]
        if not messages:
            return outcomes
    rest = await provider.send(messages)
    unreachable = sum(1 for o in rest if _unreachable(o))
    if breaker.record(name, sent=len(rest), unreachable=unreachable):
        log.warning(
            "%s: %d of %d requests unreachable; circuit open for %.1f s",
            name,
            unreachable,
            len(rest),
            breaker.blocked_for(name),
        )
        raise ProviderUnavailable(
            f"{name}: {unreachable} of {len(rest)} requests unreachable; circuit open",
            retry_in=breaker.blocked_for(name),
        )
    return outcomes + rest


def _unreachable(outcome: Outcome) -> bool:
    return isinstance(outcome, RetryAfter) and outcome.transport


def _prune(runtime: Runtime, service: str, invalid: dict[str, str]) -> None:
    for token, reason in invalid.items():
        try:
            with runtime.sessions.begin() as session:  # Cassandra rows, then this commit of the MySQL rows
                prune_token(session, runtime.statements, service, token, reason)
        except Exception:  # a store error must not lose the other prunes; the token comes back next send
            log.exception("service=%s: pruning token %s failed", service, token_hint(token))


def load_service_credentials(runtime: Runtime, service: str) -> ProviderCredentials | None:
    """The service's decrypted credentials (or None), read in a short session of their own."""
    with runtime.sessions() as session:
        return load_credentials(session, credentials_box(runtime.settings), service)


def _record(runtime: Runtime, letters: list[deadletter.DeadLetter]) -> None:
    with runtime.sessions.begin() as session:
        deadletter.record(session, letters, now=clock.stored_now())


# --- dead letters: operators send them again -------------------------------------------------------


@dataclass
class ReplayResult:
    replayed: int = 0  # dead letters sent again (and removed)
    delivered: int = 0
    pruned: int = 0
    failed: int = 0  # still failing: recorded again as new dead letters, never dropped


def list_dead_letters(
    session: Session, service: str, *, limit: int = 100, before_id: int | None = None, job_id: str | None = None
) -> list[Any]:
    """A service's dead letters, newest first (``before_id``: the next, older page)."""
    return deadletter.list_for_service(session, service, limit=limit, before_id=before_id, job_id=job_id)


async def replay_dead_letters(
    runtime: Runtime,
    providers: ProviderSet,
    service: str,
    *,
    ids: Sequence[int] | None = None,
    job_id: str | None = None,
    limit: int = 1000,
) -> ReplayResult:
    """Send a service's dead letters again (the given ids, or a job's, or the oldest ``limit``).

    The letters are locked while they are sent (two replays never send one twice) and deleted
    when the send is done; what fails again is dead-lettered anew by ``deliver``, so a letter is
    never lost. Other tenants' ids are simply not found."""
    session = runtime.sessions()
    try:
        rows = await asyncio.to_thread(_lock_for_replay, session, service, ids, job_id, limit)
        if not rows:
            return ReplayResult()
        out = ReplayResult(replayed=len(rows))
        by_job: dict[str | None, list[Any]] = {}
        for r in rows:
            by_job.setdefault(r.job_id, []).append(r)
        for letter_job, letters in by_job.items():  # a letter that fails again keeps its job id
            messages = [
                Message(
                    device_token=r.device_token,
                    device_os=r.device_os,
                    title=r.payload.get("title", ""),
                    body=r.payload.get("body", ""),
                    data=dict(r.payload.get("data") or {}),
                )
                for r in letters
            ]
            result = await deliver(runtime, providers, service, messages, job_id=letter_job)
            out.delivered += result.delivered
            out.pruned += len(messages) - result.delivered - len(result.failed)
            out.failed += len(result.failed)
        await asyncio.to_thread(_delete_replayed, session, service, [r.id for r in rows])
    finally:
        await asyncio.to_thread(session.close)
    log.info(
        "service=%s: %d dead letter(s) replayed: delivered=%d pruned=%d failed again=%d",
        service,
        out.replayed,
        out.delivered,
        out.pruned,
        out.failed,
    )
    return out


def _lock_for_replay(
    session: Session, service: str, ids: Sequence[int] | None, job_id: str | None, limit: int
) -> list[Any]:
    # READ COMMITTED: row locks only, no gap locks, so the dead letters ``deliver`` records meanwhile
    # (other transactions) are not blocked by this one.
    session.connection(execution_options={"isolation_level": "READ COMMITTED"})
    return deadletter.for_replay(session, service, ids=ids, job_id=job_id, limit=limit)


def _delete_replayed(session: Session, service: str, ids: list[int]) -> None:
    deadletter.delete_ids(session, service, ids)
    session.commit()


# --- single sends ---------------------------------------------------------------------------------


def prepare_single(
    runtime: Runtime,
    service: str,
    user_id: str,
    type_: str,
    *,
    variables: dict[str, str] | None = None,
    data: dict[str, str] | None = None,
    quiet_hours: bool = False,
) -> tuple[list[Message], bool]:
    """Render the SINGLE template ``type_`` once for every device of ``user_id``: (messages, dry_run).
    Raises NotFound (user or template), InvalidInput (missing variables, bad data) or
    PayloadTooLarge, before anything is sent."""
    extra = check_data(data)
    check_send_inputs(variables, None)
    with runtime.sessions() as session:
        service_row = services.get_service(session, service)
        dry_run = service_row.delivery_mode == "dry_run"
        user = users.get_user(session, service, user_id)
        template = templates.get_template(session, runtime.statements, service, "SINGLE", type_)
        devices = users.list_devices(session, service, user_id)
        now = db_now(session) if quiet_hours else None
    window = user.quiet_hours or service_row.quiet_hours
    if now is not None and window is not None:
        _check_quiet(now, user.timezone or service_row.timezone, window, template.quiet_hours, len(devices))
    content = template.content()
    tags = list((content.variants or {}).keys())
    overrides = {"data": extra} if extra else None
    pushes: dict[str | None, Rendered] = {}  # rendered once per variant some device needs, never per device
    messages = []
    for d in devices:
        key = choose_variant(d.locale or user.locale, tags)
        if key not in pushes:
            pushes[key] = render(content.content_for(key), variables, overrides)
        push = pushes[key]
        messages.append(
            Message(
                device_token=d.token,
                device_os=d.os,
                title=push.title,
                body=push.body,
                data=push.data,
                ttl_seconds=push.ttl_seconds,
                priority=push.priority,
            )
        )
    if not devices:  # nothing to send, but a request that cannot render is still refused
        render(content, variables, overrides)
    return messages, dry_run


def _check_quiet(now: datetime, zone_name: str, window: tuple[int, int], mode: str, devices: int) -> None:
    """An opted-in single send inside the user's quiet hours: QuietDropped (the template drops) or
    QuietHoursNow (it holds: the caller may send again when they end)."""
    moment = now.replace(tzinfo=UTC)
    if not clock.in_window(moment, zone_name, *window):
        return
    if mode == "drop":
        raise QuietDropped(devices)
    until = clock.window_end(moment, zone_name, *window)
    raise QuietHoursNow(f"the user is in quiet hours until {until:%Y-%m-%dT%H:%M}Z", until_at=until)


async def send_single(
    runtime: Runtime,
    providers: ProviderSet,
    service: str,
    user_id: str,
    type_: str,
    *,
    variables: dict[str, str] | None = None,
    data: dict[str, str] | None = None,
    stop: asyncio.Event | None = None,
    quiet_hours: bool = False,
) -> tuple[int, DeliveryResult]:
    """``POST /v1/users/{user_id}/send``: (devices targeted, result). ``quiet_hours``: the send
    opted in to the user's quiet hours (QuietDropped / QuietHoursNow inside them). When ``stop`` is set (the API is
    shutting down) a retry wait ends at once: what waited is dead-lettered, prunes and dead letters
    are recorded, and the counts say so."""
    messages, dry_run = await asyncio.to_thread(
        prepare_single, runtime, service, user_id, type_, variables=variables, data=data, quiet_hours=quiet_hours
    )
    result = await deliver(runtime, providers, service, messages, dry_run=dry_run, stop=stop, dead_letter_on_stop=True)
    log.info(
        "single send: service=%s type=%s devices=%d delivered=%d pruned=%d failed=%d (no_credentials=%d)%s",
        service,
        type_,
        len(messages),
        result.delivered,
        result.pruned,
        len(result.failed),
        result.no_credentials,
        " dry run" if dry_run else "",
    )
    return len(messages), result


class PageAborted(ProviderConfigError):
    """A provider configuration error stopped a fan-out page part-way; ``counts`` is what it did before."""

    def __init__(self, message: str, counts: PageCounts) -> None:
        super().__init__(message)
        self.counts = counts


def _page_counts(result: DeliveryResult, processed: int) -> PageCounts:
    """The counts of the ``processed`` recipients of a page (all of them, unless an error stopped it)."""
    # pruned by difference: a token twice in a page is pruned once but counted for each recipient
    failed = len(result.failed)
    return PageCounts(
        targeted=processed,
        sent=result.delivered,
        failed=failed,
        pruned=processed - result.delivered - failed,
        retried=result.retried,
        no_credentials=result.no_credentials,
    )


class DeliverySender:
    """A process's sending side: one ``ProviderSet`` (providers and HTTP/2 pools, built once) and the
    services' credentials. Build it inside the event loop that sends; ``close()`` at shutdown.

    For fan-out pages (``send_page``) a service's credentials are read from MySQL at most once per
    ``CREDENTIALS_TTL_S`` (not per page, never per device); a single send reads them afresh."""

    CREDENTIALS_TTL_S = 30.0

    def __init__(self, runtime: Runtime, stop: asyncio.Event | None = None) -> None:
        self.runtime = runtime
        self.stop = stop  # a worker's stop event: a page's retry wait then ends at once (``Stopping``)
        self.providers = ProviderSet(runtime.settings)
        self.breaker = CircuitBreaker(max_open_s=runtime.settings.fanout_breaker_max_open_s)  # fan-out pages only
        self._credentials: dict[str, tuple[float, ProviderCredentials | None]] = {}

    async def _creds(self, service: str) -> ProviderCredentials | None:
        cached = self._credentials.get(service)
        if cached is None or time.monotonic() - cached[0] > self.CREDENTIALS_TTL_S:
            creds = await asyncio.to_thread(load_service_credentials, self.runtime, service)
            cached = self._credentials[service] = (time.monotonic(), creds)
        return cached[1]

    async def send_page(self, service: str, job_id: str, messages: Sequence[Message], dry_run: bool) -> PageCounts:
        """One fan-out page: retries, pruning and dead letters inside; the counts of what happened.
        ``dry_run``: the job's delivery mode (the log provider only). Raises NoCredentials (the
        service has none at all) and PageAborted (a provider configuration error, with the counts
        of what the page did before it): either fails the whole job."""
        try:
            result = await deliver(
                self.runtime,
                self.providers,
                service,
                messages,
                job_id=job_id,
                dry_run=dry_run,
                entire_send=False,
                credentials=None if dry_run else await self._creds(service),
                stop=self.stop,
                breaker=self.breaker,
                provider_wait_s=self.runtime.settings.fanout_provider_wait_s,
            )
        except DeliveryAborted as exc:
            done = exc.partial
            raise PageAborted(exc.message, _page_counts(done, done.delivered + len(done.failed) + done.pruned)) from exc
        return _page_counts(result, len(messages))

    __call__ = send_page  # a DeliverySender is the worker's SendPage

    async def send_single(
        self,
        service: str,
        user_id: str,
        type_: str,
        *,
        variables: dict[str, str] | None = None,
        data: dict[str, str] | None = None,
        stop: asyncio.Event | None = None,
        quiet_hours: bool = False,
    ) -> tuple[int, DeliveryResult]:
        """``POST /v1/users/{user_id}/send`` (see ``send_single``; ``stop``: the API is shutting down)."""
        return await send_single(
            self.runtime,
            self.providers,
            service,
            user_id,
            type_,
            variables=variables,
            data=data,
            stop=stop,
            quiet_hours=quiet_hours,
        )

    async def replay(
        self, service: str, *, ids: Sequence[int] | None = None, job_id: str | None = None, limit: int = 1000
    ) -> ReplayResult:
        """Dead letters sent again (see ``replay_dead_letters``)."""
        return await replay_dead_letters(self.runtime, self.providers, service, ids=ids, job_id=job_id, limit=limit)

    async def close(self) -> None:
        await self.providers.close()
