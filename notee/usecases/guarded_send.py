"""One provider's send in a delivery round, guarded by the fan-out's circuit breaker
(``notee.providers.breaker``: pure state, no I/O; this is where it meets the provider): nothing sent
while the breaker is open, a probe of one message while it is half-open, and the breaker opened as
soon as most of the send was unreachable (docs/FANOUT.md "Outages").

Messages a breaker keeps from their provider come back as ``RetryAfter(circuit_open=True)`` (the
delivery holds them); what the provider did answer is kept (a device delivered before the breaker
opened stays delivered). Nothing is raised here: ``Delivery`` decides whether the held messages wait
inside the page or the page is handed back. A provider that sends to several independent services
(``Circuits``: Web Push, one push service per browser vendor) is guarded per service; FCM and APNs
each as one."""

from __future__ import annotations

import logging
from collections import Counter

from notee.core import tracing
from notee.core.errors import ProviderUnavailable
from notee.providers.base import Circuits, Message, Outcome, Provider, RetryAfter
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
    if isinstance(provider, Circuits):
        return await _send_per_circuit(provider, messages, breaker)
    name = provider.name
    if breaker.blocked_for(name) > 0:
        return [_held(name, breaker)] * len(messages)
    outcomes: list[Outcome] = []
    if breaker.probing(name):
        outcomes = await _reach(provider, messages[:1])
        if breaker.record(name, sent=1, unreachable=int(_unreachable(outcomes[0]))):
            log.warning("%s: probe failed (%s); circuit open for %.1f s", name, outcomes[0], breaker.blocked_for(name))
            return [_held(name, breaker, "probe unreachable")] * len(messages)
        log.info("%s: probe answered; circuit closed", name)
        messages = messages[1:]
        if not messages:
            return outcomes
    rest = await _reach(provider, messages)
    unreachable = sum(1 for o in rest if o.__class__ is RetryAfter and o.transport)  # per message: inline
    if breaker.record(name, sent=len(rest), unreachable=unreachable):
        log.warning(
            "%s: %d of %d requests unreachable; circuit open for %.1f s",
            name,
            unreachable,
            len(rest),
            breaker.blocked_for(name),
        )
        held = _held(name, breaker, f"{unreachable} of {len(rest)} requests unreachable")
        rest = [held if _unreachable(o) else o for o in rest]  # the answered ones stand
    return outcomes + rest


async def _reach(provider: Provider, messages: list[Message]) -> list[Outcome]:
    """``provider.send``; a provider that cannot be reached at all (``ProviderUnavailable``: FCM's OAuth
    endpoint) answers every message as a refused connection would."""
    try:
        return await provider.send(messages)
    except ProviderUnavailable as exc:
        log.warning("%s: unreachable (%s)", provider.name, exc.message)
        return [RetryAfter(f"unreachable: {exc.message}", transport=True)] * len(messages)


def _unreachable(outcome: Outcome | None) -> bool:
    return isinstance(outcome, RetryAfter) and outcome.transport


def _held(circuit: str, breaker: CircuitBreaker, why: str = "") -> RetryAfter:
    wait = breaker.blocked_for(circuit)
    return RetryAfter(f"circuit open: {circuit}" + (f" ({why})" if why else ""), wait, circuit_open=True)


async def _send_per_circuit(provider: Provider, messages: list[Message], breaker: CircuitBreaker) -> list[Outcome]:
    """Each circuit (push service) of the send guarded on its own: an open one's messages held, a
    half-open one's first message sent alone as its probe, the rest sent together (one
    ``provider.send``, so the push services are still reached concurrently)."""
    assert isinstance(provider, Circuits)
    groups: dict[str, list[int]] = {}
    for i, m in enumerate(messages):
        groups.setdefault(provider.circuit(m), []).append(i)
    out: list[Outcome | None] = [None] * len(messages)
    first: list[int] = []
    probes: dict[str, list[int]] = {}  # half-open circuit -> the messages after its probe
    for circuit, idx in groups.items():
        if breaker.blocked_for(circuit) > 0:
            for i in idx:
                out[i] = _held(circuit, breaker)
        elif breaker.probing(circuit):
            first.append(idx[0])
            probes[circuit] = idx[1:]
        else:
            first.extend(idx)
    await _send_into(provider, messages, first, out)
    second: list[int] = []
    for circuit, rest in probes.items():
        probe = groups[circuit][0]
        if breaker.record(circuit, sent=1, unreachable=int(_unreachable(out[probe]))):
            log.warning(
                "%s: probe failed (%s); circuit open for %.1f s", circuit, out[probe], breaker.blocked_for(circuit)
            )
            for i in groups[circuit]:
                out[i] = _held(circuit, breaker)
        else:
            log.info("%s: probe answered; circuit closed", circuit)
            second.extend(rest)
    await _send_into(provider, messages, second, out)
    for circuit, idx in groups.items():
        sent = [i for i in probes.get(circuit, idx) if not _is_held(out[i])]
        unreachable = sum(1 for i in sent if _unreachable(out[i]))
        if sent and breaker.record(circuit, sent=len(sent), unreachable=unreachable):
            log.warning(
                "%s: %d of %d requests unreachable; circuit open for %.1f s",
                circuit,
                unreachable,
                len(sent),
                breaker.blocked_for(circuit),
            )
            for i in sent:
                if _unreachable(out[i]):
                    out[i] = _held(circuit, breaker)
    return [o if o is not None else RetryAfter("not sent", transport=True) for o in out]


async def _send_into(provider: Provider, messages: list[Message], idx: list[int], out: list[Outcome | None]) -> None:
    if idx:
        for i, outcome in zip(idx, await provider.send([messages[i] for i in idx]), strict=True):
            out[i] = outcome


def _is_held(outcome: Outcome | None) -> bool:
    return isinstance(outcome, RetryAfter) and outcome.circuit_open
