"""One provider's send in a delivery round, guarded by the fan-out's circuit breaker
(``notee.providers.breaker``: pure state, no I/O; this is where it meets the provider): refused
while the breaker is open, a probe of one message while it is half-open, and ``ProviderUnavailable``
as soon as most of the send was unreachable (docs/FANOUT.md "Outages")."""

from __future__ import annotations

import logging
from collections import Counter

from notee.core import tracing
from notee.core.errors import ProviderUnavailable
from notee.providers.base import Message, Outcome, Provider, RetryAfter
from notee.providers.breaker import CircuitBreaker

log = logging.getLogger(__name__)


async def send_guarded(provider: Provider, messages: list[Message], breaker: CircuitBreaker | None) -> list[Outcome]:
    """``provider.send`` guarded by the circuit breaker (None: unguarded): refused while it is open, one message as a
    probe when it is half-open, and it opens when most of the send was unreachable. Traced as
    ``notee.provider.send`` with its outcome counts (``notee.core.tracing``)."""
    attributes: dict[str, str | int] = {"notee.provider": provider.name, "notee.messages": len(messages)}
    with tracing.span("notee.provider.send", attributes) as span:
        outcomes = await _send_guarded(provider, messages, breaker)
        if span is not None:
            for kind, count in Counter(type(o).__name__ for o in outcomes).items():
                span.set_attribute(f"notee.outcome.{kind}", count)
        return outcomes


async def _send_guarded(provider: Provider, messages: list[Message], breaker: CircuitBreaker | None) -> list[Outcome]:
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
