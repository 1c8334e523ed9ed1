"""``DeliverySender``: what a process keeps to send. The fan-out worker sends its pages through it
(``send_page``: it is the worker's ``SendPage``), the API its single sends and both the API and the
CLI their dead-letter replays. Built once by the process, inside the event loop that sends, and
closed at shutdown: never built inside a route (the API hands it to its routes as a dependency)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from notee.core.errors import ProviderConfigError, ProviderUnavailable
from notee.core.vocabulary import PageCounts, ProviderCredentials
from notee.providers.base import Message
from notee.providers.breaker import CircuitBreaker
from notee.providers.routing import ProviderSet
from notee.store.page_holds_sql import HeldPage
from notee.store.runtime import Runtime
from notee.usecases.deliver import DeliveryAborted, DeliveryOptions, DeliveryResult, deliver
from notee.usecases.delivery_result import HandedBack
from notee.usecases.delivery_store import load_service_credentials
from notee.usecases.replay import ReplayResult, replay_dead_letters
from notee.usecases.single_send import SingleSend, send_single


class PageHeld(ProviderUnavailable):
    """A fan-out page given back during a provider outage (``HandedBack``): ``held`` is what it did
    (the counts and tokens of its devices that are done) for the worker to keep with the release."""

    def __init__(self, cause: HandedBack, held: HeldPage) -> None:
        super().__init__(cause.message, retry_in=cause.retry_in)
        self.held = held


class PageAborted(ProviderConfigError):
    """A provider configuration error stopped a fan-out page part-way; ``held`` is what it did before
    (the counts and tokens of its devices that are done), kept with the failed task so that the page,
    once its job is requeued, sends only the rest."""

    def __init__(self, message: str, held: HeldPage) -> None:
        super().__init__(message)
        self.held = held

    @property
    def counts(self) -> PageCounts:
        return self.held.counts


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
        of what the page did before it): either fails the whole job; and PageHeld (a provider or push
        service cannot be reached: the page is given back with what of it is done)."""
        options = DeliveryOptions(
            credentials=None if dry_run else await self._creds(service),
            job_id=job_id,
            dry_run=dry_run,
            entire_send=False,
            stop=self.stop,
            breaker=self.breaker,
            provider_wait_s=self.runtime.settings.fanout_provider_wait_s,
        )
        try:
            result = await deliver(self.runtime, self.providers, service, messages, options)
        except DeliveryAborted as exc:
            done = exc.partial
            counts = _page_counts(done, done.delivered + len(done.failed) + done.pruned)
            raise PageAborted(exc.message, HeldPage(counts, exc.done, 0.0, exc.message)) from exc
        except HandedBack as exc:
            counts = _page_counts(exc.partial, exc.processed)
            raise PageHeld(exc, HeldPage(counts, exc.done, exc.waited_s, exc.message)) from exc
        return _page_counts(result, len(messages))

    __call__ = send_page  # a DeliverySender is the worker's SendPage

    async def send_single(self, send: SingleSend, stop: asyncio.Event | None = None) -> tuple[int, DeliveryResult]:
        """``POST /v1/users/{user_id}/send`` (see ``single_send.send_single``; ``stop``: the API is
        shutting down)."""
        return await send_single(self.runtime, self.providers, send, stop)

    async def replay(
        self, service: str, *, ids: Sequence[int] | None = None, job_id: str | None = None, limit: int = 1000
    ) -> ReplayResult:
        """Dead letters sent again (see ``replay.replay_dead_letters``)."""
        return await replay_dead_letters(self.runtime, self.providers, service, ids=ids, job_id=job_id, limit=limit)

    async def close(self) -> None:
        await self.providers.close()
