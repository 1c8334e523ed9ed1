"""A circuit breaker per provider, for the fan-out: stop sending to a provider that cannot be reached.

When most of a page's requests to a provider fail at the transport level (connection refused,
reset, timeout: ``RetryAfter(transport=True)`` outcomes), the breaker *opens*: the worker stops
sending to that provider and releases its task (``ProviderUnavailable``) instead of retrying every
device. After ``open_s`` the breaker is *half-open*: the next send is a probe of one
message. A probe that gets any answer from the provider closes the breaker and the page goes on; a
probe that fails at the transport level opens it again for twice as long (capped at ``max_open_s``).

Pure state and a clock: no I/O, so it is unit-tested without a network (tests/unit/test_fanout_outages.py).
One breaker per worker process, shared by its lanes. Its keys are providers (``fcm``, ``apns``) and,
for Web Push, each push service (``webpush:<origin>``: ``notee.usecases.guarded_send``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from notee.core import metrics

# A page opens the breaker when more than this share of its requests to one provider were unreachable.
OPEN_RATIO = 0.5
# Closed breakers listed in the metrics, at most: subscriptions name their push service's origin, so a
# tenant could make many; an open or half-open one is always listed.
GUARDED_LISTED = 64


@dataclass
class _State:
    open_until: float = 0.0  # monotonic time; 0: closed
    open_s: float = 0.0  # the last open period, doubled on every failed probe


class CircuitBreaker:
    def __init__(
        self, *, open_s: float = 2.0, max_open_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.first_open_s = open_s
        self.max_open_s = max_open_s
        self.clock = clock
        self._providers: dict[str, _State] = {}  # the providers whose breaker is not closed
        self._guarded: set[str] = set()  # every provider a send was recorded for (the metrics list them)
        self.opened = 0  # how many times a breaker opened (for logs and tests)
        metrics.SCRAPE_TIME.track_breaker(self)  # notee_circuit_breaker_state, read when Prometheus scrapes

    def states(self) -> dict[str, str]:
        """provider -> ``closed``, ``open`` or ``half_open`` (due for a probe), for every provider it guarded."""
        now = self.clock()
        states = dict.fromkeys(list(self._guarded), "closed")
        for provider, state in list(self._providers.items()):
            states[provider] = "open" if now < state.open_until else "half_open"
        return states

    def blocked_for(self, provider: str) -> float:
        """Seconds until ``provider`` may be tried again (0: closed or due for a probe)."""
        state = self._providers.get(provider)
        return max(0.0, state.open_until - self.clock()) if state else 0.0

    def probing(self, provider: str) -> bool:
        """True when the breaker was open and its time is up: send one message as a probe first."""
        state = self._providers.get(provider)
        return state is not None and self.clock() >= state.open_until

    def record(self, provider: str, *, sent: int, unreachable: int) -> bool:
        """Record the transport outcome of one send; returns True when the breaker is (now) open."""
        if sent == 0:
            return self.blocked_for(provider) > 0
        state = self._providers.get(provider)
        if unreachable * 1.0 > OPEN_RATIO * sent or (state is not None and unreachable == sent):
            # A majority of the page, or a failed probe: open (again), for twice as long as last time.
            open_s = min(self.max_open_s, state.open_s * 2 if state else self.first_open_s)
            self._providers[provider] = _State(self.clock() + open_s, open_s)
            self.opened += 1
            metrics.BREAKER_OPENED.labels(provider).inc()
            return True
        self._providers.pop(provider, None)  # the provider answered: closed
        if len(self._guarded) < GUARDED_LISTED or ":" not in provider:  # fcm, apns: always
            self._guarded.add(provider)
        return False
