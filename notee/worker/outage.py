"""What a worker treats as an outage, and how long it waits after one (docs/FANOUT.md, "Outages").

An outage (a store error, a provider that cannot be reached) is a passing condition: the claim loop
tries again, a task is released without advancing its checkpoint and claimable again after the
backoff; such a graceful release does not count as an attempt.
"""

from __future__ import annotations

import random

from notee.core.errors import ProviderUnavailable
from notee.store.outage import is_store_outage

OUTAGE_BACKOFF_BASE_S = 1.0  # first wait after an outage; doubles per consecutive outage up to the cap


class OutageBackoff:
    """Exponential backoff with a cap for outages, shared by a worker's lanes: consecutive failures
    (whichever lane saw them) double the wait; the first page sent after it resets it. Equal
    jitter (half fixed, half random) so released tasks do not all come back at once."""

    def __init__(
        self, *, base_s: float = OUTAGE_BACKOFF_BASE_S, cap_s: float = 30.0, rng: random.Random | None = None
    ) -> None:
        self.base_s, self.cap_s = base_s, cap_s
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        ceiling = min(self.cap_s, self.base_s * 2**self.failures)
        self.failures += 1
        return float(ceiling / 2 + self._rng.uniform(0, ceiling / 2))

    def reset(self) -> None:
        self.failures = 0


def is_outage(exc: BaseException) -> bool:
    """A passing condition (store or provider unreachable): release and retry, never count it."""
    return isinstance(exc, ProviderUnavailable) or is_store_outage(exc)
