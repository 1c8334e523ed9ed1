"""Send a batch of pushes for one service: route each device to its provider, retry what is
retryable (bounded, with backoff honouring Retry-After), prune invalid tokens, dead-letter what
still fails. Nothing is dropped silently: every message ends delivered, pruned or dead-lettered.

``deliver()`` runs one ``Delivery`` (an object per batch; its methods are the steps) as its
``DeliveryOptions`` say. Beside it: ``single_send``, ``replay`` (dead letters), ``sender``
(``DeliverySender``: the worker's pages, the API's single sends), ``delivery_store`` and
``guarded_send`` (the circuit breaker).

- A device of a platform the service has no credentials for is not sent and not pruned: it is
  dead-lettered with reason ``no_credentials``. A service with no credentials at all (or a single
  send none of whose devices has a route) raises ``NoCredentials`` before anything is recorded.
- ``dry_run`` (the service's delivery mode) sends through the log provider only.
- Auth/configuration errors (``ProviderConfigError``) are never retried per device: the send stops,
  what was collected before it (deliveries, invalid tokens, dead letters) is still recorded, and
  ``DeliveryAborted`` carries those counts to the caller, which fails the send or job once.

It loads credentials (``notee.domain.credentials``) for ``ProviderSet`` (providers never read the
registry) and owns its units of work (``delivery_store``): short reads, one transaction per pruned
token and per batch of dead letters, no session held across a send.

Stopping (SIGTERM) ends the wait before a retry. A worker's page then raises ``Stopping`` (nothing
recorded: the task is released unadvanced, the next owner re-sends the page), or, when part of it is
done, is handed back (``HandedBack``, below: the next owner sends only the rest); a single send
(``dead_letter_on_stop``) dead-letters what was waiting, records its prunes and dead letters, and
answers within the API's shutdown budget.

Transport errors (``RetryAfter(transport=True)``: no answer) are not a device's failure: retried
without using its attempts; the work is handed back (``HandedBack``, a ``ProviderUnavailable``) when
nothing is answered for ``max_attempts`` rounds. With a circuit ``breaker`` (the fan-out; per
provider, per push service for Web Push) what an open breaker keeps from its provider is held
(``RetryAfter(circuit_open=True)``): a page nothing of which was answered is handed back at once
(before any send if the breaker was open); else the held wait in the page, attempts unused, up to
``provider_wait_s``, then it is handed back. A page handed back names what of it is done (delivered,
pruned, dead-lettered for its own reason, no credentials: recorded once), so its next try sends only
the rest: an outage however long delays its devices and never dead-letters them (docs/FANOUT.md).

The provider's own refusals (``RetryAfter(provider_wide=True)``: 5xx, FCM's project quota) are no
device's failure in a fan-out page: it waits them out, honouring Retry-After, up to
``provider_wait_s``, then it is handed back (``HandedBack``); a single send, which a caller waits
for, counts them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import NoReturn

from notee.core import metrics
from notee.core.errors import ProviderConfigError
from notee.providers.base import Circuits, Delivered, Failed, InvalidToken, Message, Outcome, Provider, RetryAfter
from notee.providers.payload import rich_of
from notee.providers.retry import backoff
from notee.providers.routing import NO_CREDENTIALS, ProviderSet, ServiceProviders
from notee.store import deadletter
from notee.store.runtime import Runtime
from notee.usecases.delivery_options import DEFAULT_OPTIONS, UNSET
from notee.usecases.delivery_options import DeliveryOptions as DeliveryOptions  # its callers import it from here
from notee.usecases.delivery_result import DeliveryAborted as DeliveryAborted
from notee.usecases.delivery_result import DeliveryResult as DeliveryResult
from notee.usecases.delivery_result import HandedBack, no_credentials_message
from notee.usecases.delivery_result import NoCredentials as NoCredentials
from notee.usecases.delivery_store import load_service_credentials, prune_tokens, record_dead_letters
from notee.usecases.guarded_send import send_guarded

log = logging.getLogger(__name__)


class Stopping(Exception):
    """The process is stopping while messages wait to be retried (``DeliveryOptions.stop``)."""


async def deliver(
    runtime: Runtime,
    providers: ProviderSet,
    service: str,
    messages: Sequence[Message],
    options: DeliveryOptions = DEFAULT_OPTIONS,
) -> DeliveryResult:
    """Deliver ``messages`` (one per device) for ``service``; returns counts and what failed.

    Raises NoCredentials (nothing recorded), DeliveryAborted (provider configuration error),
    ``ProviderUnavailable`` (the work handed back: module doc) and ``Stopping`` (``options.stop`` set
    during a retry wait, unless ``options.dead_letter_on_stop``: those messages are dead-lettered)."""
    return await Delivery(runtime, providers, service, messages, options).run()


class Delivery:
    """One delivery of a batch: its rounds over the providers and what it learned on the way.

    Per message (by index into ``messages``): its provider answers (``attempts``: connection
    problems do not count), the retryable ones held against the device (``charged``, compared with
    ``bound``) and its last retryable answer (``last_reason``: for a dead letter written at stop).
    This delivery's pushes by (provider, outcome) and retries by (provider, cause) are counted in
    the metrics once, at the end, not per push."""

    def __init__(
        self,
        runtime: Runtime,
        providers: ProviderSet,
        service: str,
        messages: Sequence[Message],
        options: DeliveryOptions,
    ) -> None:
        self.runtime, self.providers, self.service = runtime, providers, service
        self.messages, self.options = messages, options
        self.result = DeliveryResult(dry_run=options.dry_run)
        self.bound = options.max_attempts or runtime.settings.fanout_max_attempts
        self.attempts = [0] * len(messages)
        self.charged = [0] * len(messages)
        self.last_reason: dict[int, tuple[str, str]] = {}  # message index -> (provider, reason)
        self.waited = 0.0  # seconds this delivery has waited between its rounds
        self.rounds = self.outage_rounds = 0  # rounds sent; of the last ones, those nothing answered
        self.retry_after: float | None = None  # the longest Retry-After of this round's answers
        self.held: set[int] = set()  # this round's messages a push service's open breaker held back
        self.refused = False  # this round: the provider's own refusals outlasted provider_wait_s (fan-out)
        self.answered_any = False  # some message of this delivery got an answer from a provider
        self.unfinished: list[int] | None = None  # not done when a configuration error stopped the send
        self.invalid: dict[str, str] = {}  # token -> why it is pruned
        self.dead: list[deadletter.DeadLetter] = []
        self.ended: dict[tuple[str, str], int] = {}
        self.retried: dict[tuple[str, str], int] = {}

    async def run(self) -> DeliveryResult:
        """Every round until nothing waits; then what was learned is kept (also after a
        configuration error, which is raised as ``DeliveryAborted`` with the counts so far)."""
        if not self.messages:
            return self.result
        routes = await self._routes()
        pending = self._routable(routes)
        aborted: ProviderConfigError | None = None
        try:
            while pending:
                pending = await self._round(routes, pending)
        except ProviderConfigError as exc:  # kept below, then raised: the caller fails the send/job once
            aborted = exc
        finally:  # what ended (and what waited for another attempt) is counted, also when the send stops
            self._count()
        self.result.invalid_tokens = list(self.invalid)
        await self._keep()
        if aborted is not None:
            left = range(len(self.messages)) if self.unfinished is None else self.unfinished
            raise DeliveryAborted(aborted, self.result, done=self._done(left)) from aborted
        return self.result

    async def _routes(self) -> ServiceProviders:
        """The service's providers: the log provider in dry run, else those of its credentials."""
        options, service = self.options, self.service
        if options.dry_run:
            return self.providers.dry_run(service)
        credentials = options.credentials
        if credentials is UNSET:
            credentials = await asyncio.to_thread(load_service_credentials, self.runtime, service)
        routes = self.providers.for_service(service, credentials)
        if not routes.any:
            raise NoCredentials(no_credentials_message(service))
        return routes

    def _routable(self, routes: ServiceProviders) -> list[int]:
        """The indexes of the messages some provider can send; the others are dead-lettered (never
        sent, never pruned: the token may be fine once credentials exist)."""
        messages = self.messages
        _, unroutable = routes.split(messages)
        if unroutable and self.options.entire_send and len(unroutable) == len(messages):
            raise NoCredentials(no_credentials_message(self.service))
        for i in unroutable:
            self._fail(messages[i], "none", NO_CREDENTIALS, 0, "no_credentials")
        self.result.no_credentials = len(unroutable)
        skip = set(unroutable)
        return [i for i in range(len(messages)) if i not in skip] if skip else list(range(len(messages)))

    async def _round(self, routes: ServiceProviders, pending: list[int]) -> list[int]:
        """Send every pending message once, each group to its provider; the indexes to send again
        (after the wait before the next round)."""
        self.rounds += 1
        self.retry_after = None
        self.held = set()
        self.refused = False
        retry: list[int] = []
        answered = False
        messages = self.messages  # a first round pending every message lists them in order: no look-ups
        batch = list(messages) if self.rounds == 1 and len(pending) == len(messages) else [messages[i] for i in pending]
        groups, _ = routes.split(batch)
        await self._hand_back_if_blocked(groups, pending)
        for n, (provider, idx) in enumerate(groups):
            try:
                outcomes = await send_guarded(provider, [batch[j] for j in idx], self.options.breaker)
            except ProviderConfigError:  # this group and those after it not sent; ``retry`` not done either
                self.unfinished = retry + [pending[j] for _, later in groups[n:] for j in later]
                raise
            answered = self._classify(provider.name, idx, outcomes, pending, batch, retry) or answered
        self.answered_any = self.answered_any or answered
        if self.refused:  # the provider's own refusals outlasted the page's wait: delay, never dead-letter
            why = f"the provider refused for {self.waited:.0f} s ({self.last_reason[retry[0]][1]})"
            await self._hand_back(f"service {self.service}: {why}", retry, self.retry_after or 0.0)
        if self.held:
            retry = await self._held_back(retry)
        unreached = len(retry) - len(self.held)
        self.outage_rounds = 0 if answered or not unreached else self.outage_rounds + 1
        if unreached and self.outage_rounds >= self.bound:
            # Nothing got an answer for `bound` rounds in a row: the provider is unreachable. Keep
            # what was learned, and hand the work back (the task is retried later, the API says 503).
            await self._hand_back(
                f"push provider unreachable for service {self.service}: {len(retry)} "
                f"message(s) not sent after {self.rounds} rounds",
                retry,
            )
        if retry:
            return await self._wait_to_retry(retry)
        return retry

    async def _hand_back_if_blocked(self, groups: list[tuple[Provider, list[int]]], pending: list[int]) -> None:
        """Nothing answered yet and FCM's or APNs's breaker open: hand the work back before anything is
        sent (nothing twice, no lane waiting); once part was answered, ``_held_back`` holds instead."""
        breaker = self.options.breaker
        if breaker is None or self.answered_any:
            return
        for provider, _ in groups:
            wait = 0.0 if isinstance(provider, Circuits) else breaker.blocked_for(provider.name)
            if wait > 0:
                await self._hand_back(f"{provider.name}: circuit open, next probe in {wait:.1f} s", pending, wait)

    async def _held_back(self, retry: list[int]) -> list[int]:
        """Messages an open breaker held back (``self.held``): a page nothing of which got an answer is
        handed back at once; otherwise they wait inside it for up to ``provider_wait_s`` (a short outage
        costs no release), then the page is handed back with what is done (never dead-lettered)."""
        if self.answered_any and self.waited < (self.options.provider_wait_s or 0.0):
            return retry
        reason = self.last_reason[min(self.held)][1]
        waited = f" after waiting {self.waited:.0f} s" if self.answered_any else ""
        await self._hand_back(
            f"service {self.service}: {len(self.held)} message(s) held by an open circuit{waited} ({reason})",
            retry,
            self.retry_after or 0.0,
        )

    async def _hand_back(self, message: str, remaining: list[int], retry_in: float = 0.0) -> NoReturn:
        """Give the work back (``HandedBack``): what ended is kept (prunes, dead letters) and named, so
        the page's next try sends only ``remaining`` (message indexes) and counts nothing twice."""
        await self._keep()
        self.result.invalid_tokens = list(self.invalid)
        done, processed = self._done(remaining), len(self.messages) - len(set(remaining))
        handed = HandedBack(message, retry_in=retry_in, partial=self.result, done=done, processed=processed)
        handed.waited_s = self.waited
        raise handed

    def _done(self, remaining: Sequence[int]) -> frozenset[str]:
        """The tokens of the messages that ended, all but ``remaining`` (indexes). A token both done
        and remaining (two users sharing a device) is sent again: never skipped."""
        messages, left = self.messages, set(remaining)
        waiting = {messages[i].device_token for i in left}
        return frozenset(m.device_token for i, m in enumerate(messages) if i not in left) - waiting

    def _classify(
        self,
        name: str,
        idx: list[int],
        outcomes: list[Outcome],
        pending: list[int],
        batch: list[Message],
        retry: list[int],
    ) -> bool:
        """What one provider answered for its group (``idx`` into ``batch``, whose message ``j`` is
        ``pending[j]``): counted, kept to prune, appended to ``retry`` or failed. True if the
        provider answered about any device. The hot loop: everything it touches is a local."""
        attempts, last_reason, invalid = self.attempts, self.last_reason, self.invalid
        ended, retried = self.ended, self.retried
        wait, answered, delivered = self.retry_after, False, 0
        for j, outcome in zip(idx, outcomes, strict=False):
            i, m = pending[j], batch[j]
            if outcome.__class__ is Delivered:  # nearly every answer: counted before any other test
                attempts[i] += 1
                delivered += 1
                continue
            if isinstance(outcome, RetryAfter) and outcome.circuit_open:
                retry.append(i)  # not sent: its push service's breaker is open
                self.held.add(i)
                last_reason[i] = (name, outcome.reason)
                retried[name, "circuit_open"] = retried.get((name, "circuit_open"), 0) + 1
                if outcome.seconds is not None:
                    wait = max(wait or 0.0, outcome.seconds)
                continue
            if isinstance(outcome, RetryAfter) and outcome.transport:
                retry.append(i)  # the provider never answered about this device
                last_reason[i] = (name, outcome.reason)
                retried[name, "unreachable"] = retried.get((name, "unreachable"), 0) + 1
                continue
            answered = True
            attempts[i] += 1
            if isinstance(outcome, InvalidToken):
                invalid.setdefault(m.device_token, f"{name} {outcome.reason}")
                ended[name, "invalid_token"] = ended.get((name, "invalid_token"), 0) + 1
            elif isinstance(outcome, RetryAfter) and self._may_retry(i, outcome):
                retry.append(i)
                last_reason[i] = (name, outcome.reason)
                retried[name, "provider"] = retried.get((name, "provider"), 0) + 1
                if outcome.seconds is not None:
                    wait = max(wait or 0.0, outcome.seconds)
            else:
                reason = outcome.reason if isinstance(outcome, (Failed, RetryAfter)) else repr(outcome)
                if isinstance(outcome, RetryAfter):
                    within = f" in {self.waited:.0f} s" if self.options.provider_wait_s is not None else ""
                    reason = f"gave up after {attempts[i]} attempts{within}: {reason}"
                self._fail(m, name, reason, attempts[i])
        if delivered:
            self.result.delivered += delivered
            ended[name, "sent"] = ended.get((name, "sent"), 0) + delivered
        self.retry_after = wait
        return answered or delivered > 0

    def _may_retry(self, i: int, outcome: RetryAfter) -> bool:
        """Another attempt for message ``i``? The provider's own refusals are not held against the
        device while the delivery may still wait them out (``provider_wait_s``); past it, a fan-out page
        is handed back for them (an outage of the provider, not the device's failure)."""
        wait_s = self.options.provider_wait_s
        if outcome.provider_wide and wait_s is not None:
            if self.waited < wait_s:
                return True
            if self.options.breaker is not None:  # a fan-out page: handed back (``_round``), never charged
                self.refused = True
                return True
        self.charged[i] += 1
        return self.charged[i] < self.bound

    def _fail(self, m: Message, provider: str, reason: str, tries: int, outcome: str = "failed") -> None:
        """Message ``m`` ends failed: counted, and dead-lettered (recorded by ``_keep``)."""
        self.ended[provider, outcome] = self.ended.get((provider, outcome), 0) + 1
        self.result.failed.append((m.device_token, reason))
        self.dead.append(
            deadletter.DeadLetter(
                service=self.service,
                job_id=self.options.job_id,
                device_token=m.device_token,
                device_os=m.device_os,
                provider=provider,
                reason=reason,
                attempts=tries,
                payload={"title": m.title, "body": m.body, "data": dict(m.data), **rich_of(m)},
            )
        )

    async def _wait_to_retry(self, retry: list[int]) -> list[int]:
        """Wait before the next round (backoff, honouring Retry-After); ``retry`` unless the process
        is stopping meanwhile: then ``Stopping``, or (``dead_letter_on_stop``) they are failed."""
        options = self.options
        self.result.retried += len(retry)
        delay = backoff(self.rounds, self.retry_after)
        self.waited += delay
        log.info(
            "service=%s: retrying %d message(s) in %.2f s (round %d)", self.service, len(retry), delay, self.rounds + 1
        )
        if not await self._stopped_during(delay):
            return retry
        if not options.dead_letter_on_stop:
            why = f"stopping while {len(retry)} message(s) waited to retry"
            if options.breaker is not None and len(retry) < len(self.messages):
                await self._hand_back(why, retry)  # a fan-out page part of which is done: named, never re-sent
            raise Stopping(why)
        for i in retry:
            provider_name, last = self.last_reason[i]
            tries = self.attempts[i]
            self._fail(
                self.messages[i], provider_name, f"not retried, shutting down after {tries} attempt(s): {last}", tries
            )
        return []

    async def _stopped_during(self, seconds: float) -> bool:
        """Wait ``seconds`` before a retry; True if ``stop`` was set meanwhile (the wait ends at once)."""
        stop = self.options.stop
        if stop is None:
            await self.options.sleep(seconds)
            return False
        if not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), seconds)
            except TimeoutError:
                return False
        return True

    def _count(self) -> None:
        """This delivery's pushes and retries, into the metrics (once per delivery)."""
        service = self.service
        for (provider_name, how), n in self.ended.items():
            metrics.pushes(provider_name, service, how).inc(n)
        for (provider_name, cause), n in self.retried.items():
            metrics.push_retries(provider_name, service, cause).inc(n)

    async def _keep(self) -> None:
        """Prune the invalid tokens (``prune``) and record the dead letters of this delivery."""
        runtime, service, dead = self.runtime, self.service, self.dead
        if self.invalid and self.options.prune:
            await asyncio.to_thread(prune_tokens, runtime, service, self.invalid)
        if dead:
            await asyncio.to_thread(record_dead_letters, runtime, dead)
            job = self.options.job_id or "-"
            log.warning(
                "service=%s job=%s: %d message(s) dead-lettered (first: %s)", service, job, len(dead), dead[0].reason
            )
