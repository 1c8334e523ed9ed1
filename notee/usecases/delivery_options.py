"""How one delivery runs (``notee.usecases.deliver``): its options, the defaults a single send's."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from notee.core.vocabulary import ProviderCredentials
from notee.providers.breaker import CircuitBreaker


class Unset(enum.Enum):
    UNSET = enum.auto()  # credentials not given: the delivery loads them


UNSET = Unset.UNSET


@dataclass(frozen=True, slots=True)
class DeliveryOptions:
    """How one delivery runs; the defaults are a single send's.

    ``credentials``: the service's decrypted ProviderCredentials (or None); loaded from MySQL when
    not given. ``job_id``: the job the messages belong to (kept on their dead letters). ``dry_run``:
    the log provider only. ``entire_send``: the messages are the whole send (a single send), so "no
    device has a route" is the send's failure (NoCredentials); a fan-out page passes False (the
    job's other pages may have routes). ``max_attempts`` defaults to ``settings.fanout_max_attempts``.
    ``prune``: invalid tokens are removed from the registry. ``stop``: set when the process is
    stopping; a retry wait then ends at once and either raises ``Stopping`` or, with
    ``dead_letter_on_stop``, dead-letters the messages that were waiting. ``breaker`` (a fan-out
    page): ``ProviderUnavailable`` as soon as it opens for a provider. ``provider_wait_s`` (a fan-out
    page): refusals that are the provider's own (a 503 storm, the project's quota) are retried
    without using the devices' attempts while the delivery has waited less than this in all; None:
    they count as attempts like any other retryable answer."""

    credentials: ProviderCredentials | Unset | None = UNSET
    job_id: str | None = None
    dry_run: bool = False
    entire_send: bool = True
    max_attempts: int | None = None
    prune: bool = True
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    stop: asyncio.Event | None = None
    dead_letter_on_stop: bool = False
    breaker: CircuitBreaker | None = None
    provider_wait_s: float | None = None


DEFAULT_OPTIONS = DeliveryOptions()
