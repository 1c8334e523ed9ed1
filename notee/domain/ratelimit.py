"""Per-tenant rate limits: a token bucket per (service, class) in MySQL, shared by every API process.

Classes: ``publish`` (topic publishes), ``send`` (single sends), ``write`` (subscription writes and
every other tenant write), ``read`` (GET), ``receipt`` (the apps' ``POST /v1/receipts``). A limit is a rate (tokens per second) with a burst (the
bucket's size); the admin sets them per service, otherwise the deployment defaults
(``NOTEE_RATE_LIMIT_<CLASS>_RATE`` / ``_BURST``) apply. Functions take the caller's session; the
caller commits.

Under load an API process takes a few tokens at once and admits its next requests from them
without MySQL (``Allowance``): the bucket is charged for every token it hands out, so a tenant is
never admitted more than its limit; tokens a process does not use within ``Allowance.HOLD_S`` are
dropped (at worst a little less than the limit, for a moment).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from notee.core import metrics
from notee.core.errors import InvalidInput, RateLimited
from notee.core.settings import Settings
from notee.core.vocabulary import RATE_CLASSES, RateClass
from notee.store import ratelimit_sql as store

CLASSES = RATE_CLASSES
MAX_RATE = 1_000_000.0
MAX_BURST = 10_000_000


@dataclass(frozen=True)
class Limit:
    rate: float  # tokens per second
    burst: float  # bucket size: requests allowed at once after a quiet spell
    custom: bool  # set by the admin for this service (False: the deployment default)


def default_limit(settings: Settings, klass: RateClass) -> Limit:
    return Limit(
        float(getattr(settings, f"rate_limit_{klass}_rate")),
        float(getattr(settings, f"rate_limit_{klass}_burst")),
        False,
    )


def check_class(klass: str) -> RateClass:
    for known in CLASSES:
        if klass == known:
            return known
    raise InvalidInput(
        f"class must be one of {', '.join(CLASSES)}",
        details=[{"loc": ["class"], "type": "enum", "msg": f"one of {', '.join(CLASSES)}"}],
    )


def admit(session: Session, settings: Settings, service: str, klass: RateClass, *, ahead: int = 0) -> int:
    """Admit one request of ``service``'s ``klass``, or raise RateLimited (429) with the seconds until
    one fits. With ``ahead``, take that many tokens more in the same UPDATE for the process's next
    requests (``Allowance``), if the bucket can spare them; returns the tokens taken beyond this
    request's (``ahead`` or 0). An admitted request costs one UPDATE; only a service's first request,
    a refused take-ahead or a refusal costs more."""
    default = default_limit(settings, klass)
    args = {"rate": default.rate, "burst": default.burst}
    if ahead > 0 and store.take_ahead(session, service, klass, n=ahead + 1, hold_s=Allowance.HOLD_S, **args):
        return ahead
    verdict = store.take(session, service, klass, **args)
    if verdict is None:  # the first limited request of this service and class (or the server restarted)
        store.create(session, service, klass)
        verdict = store.take(session, service, klass, **args)
    if verdict:
        return 0
    refused = store.refusal(session, service, klass, **args)
    metrics.rate_limit_rejections(service, klass).inc()
    retry_after = max(1, math.ceil(refused.wait_s))
    raise RateLimited(
        f"rate limit of {klass} requests exceeded, retry after {retry_after}s",
        retry_after=retry_after,
        details=[
            {
                "loc": [],
                "type": "rate_limited",
                "msg": f"{klass} limit: {refused.rate:g} per second, burst {int(refused.burst)}",
                "ctx": {"class": klass, "rate": refused.rate, "burst": int(refused.burst)},
            }
        ],
    )


def refill(session: Session, settings: Settings, service: str, klass: RateClass, *, n: int) -> int:
    """Take ``n`` tokens of ``service``'s ``klass`` for the process's next requests, admitting no
    request itself (``Allowance.refill_due``): ``n``, or 0 when they do not fit (nothing taken, and
    nobody refused: the requests that find no token then ask the bucket each)."""
    default = default_limit(settings, klass)
    taken = store.take_ahead(
        session, service, klass, n=n, hold_s=Allowance.HOLD_S, rate=default.rate, burst=default.burst
    )
    return n if taken else 0


def get_limits(session: Session, settings: Settings, service: str) -> dict[RateClass, Limit]:
    custom = store.custom_limits(session, service)
    out: dict[RateClass, Limit] = {}
    for klass in CLASSES:
        if klass in custom:
            rate, burst = custom[klass]
            out[klass] = Limit(rate, float(burst), True)
        else:
            out[klass] = default_limit(settings, klass)
    return out


def set_limit(
    session: Session, settings: Settings, service: str, klass: RateClass, *, rate: float, burst: int
) -> Limit:
    """Set one class's limit of ``service``; every API process applies it from its next request."""
    check_class(klass)
    if not 0 < rate <= MAX_RATE:
        raise InvalidInput("rate must be > 0 and at most 1e6", details=[{"loc": ["rate"], "type": "range"}])
    if not 1 <= burst <= MAX_BURST:
        raise InvalidInput("burst must be 1..1e7", details=[{"loc": ["burst"], "type": "range"}])
    store.set_limit(session, service, klass, rate=rate, burst=burst)
    return Limit(rate, float(burst), True)


def reset_limit(session: Session, service: str, klass: RateClass) -> None:
    """Back to the deployment default."""
    store.reset_limit(session, service, check_class(klass))


# --- an API process's tokens taken ahead ------------------------------------------------------------


@dataclass(slots=True)
class _Held:
    # Tokens taken from the bucket, not used yet, by take: [clock() at which they are dropped, how
    # many], oldest first. Each take keeps its own deadline: a refill never extends an older one.
    lots: deque[list[float]] = field(default_factory=deque)
    since: float = 0.0  # the current counting window's start
    seen: int = 0  # requests of the window so far
    rate: float = 0.0  # requests per second of the last whole window
    tight_until: float = 0.0  # a take-ahead was refused: one token at a time until then
    most: int = 0  # the largest take the service's limit allows (``learn``)
    most_until: float = 0.0  # clock() after which the limit is read again

    def tokens(self, now: float) -> int:
        """The tokens still usable at ``now`` (dropping those past their deadline)."""
        lots = self.lots
        while lots and lots[0][0] <= now:
            lots.popleft()
        return int(sum(lot[1] for lot in lots))


class Allowance:
    """The tokens one API process took from its tenants' buckets ahead of their next requests.

    At a few requests per second every request takes its own token (one UPDATE each, as before).
    Once a (service, class) comes faster, the UPDATE that admits a request takes about what the
    process admits of it in ``HOLD_S`` (at most ``MAX_AHEAD``, and at most what the limit refills in
    ``HOLD_S`` and an eighth of its burst: the limit is read every ``LIMIT_TTL_S`` for that, and the
    UPDATE checks it again), and the requests after it are admitted here, on the
    event loop, with no MySQL statement and no worker-thread hop. Tokens are dropped ``HOLD_S``
    after they were taken: the bucket was charged for them, so the limit is never exceeded, and a
    process cannot sit on a part of it. When a take-ahead does not fit (the tenant is near its
    limit) the process goes back to one token per request for ``TIGHT_S``, so a tenant at its limit
    is judged request by request, exactly as without the allowance. A busy process takes its next
    tokens before it runs out (``refill_due``, ``refill_size``: notee.api.take_ahead), each take
    dropped HOLD_S after it was taken, whatever was taken since.

    One per process, shared by its listeners: ``take`` runs on the event loop, ``ahead_for`` and
    ``keep`` on worker threads; a lock guards the state."""

    HOLD_S = 0.05
    MAX_AHEAD = 64
    WINDOW_S = 0.25  # the request rate is counted over windows of this length
    TIGHT_S = 1.0
    LIMIT_TTL_S = 5.0
    MAX_KEYS = 10_000
    REFILL_AT = 2  # a refill is due when half a take-ahead is left

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], _Held] = {}

    def take(self, service: str, klass: str, *, again: bool = False) -> bool:
        """Admit one request from the tokens held for it (no I/O); False: ask the bucket. ``again``:
        a request already counted (it waited for another's take-ahead) tries once more."""
        now = self._clock()
        with self._lock:
            held = self._held.get((service, klass))
            if held is None:
                while len(self._held) >= self.MAX_KEYS:
                    self._held.pop(next(iter(self._held)))
                held = self._held[service, klass] = _Held(since=now)
            if now - held.since >= self.WINDOW_S:
                held.rate, held.since, held.seen = held.seen / (now - held.since), now, 0
            held.seen += 0 if again else 1
            lots = held.lots
            while lots and lots[0][0] <= now:  # not used within HOLD_S: dropped
                lots.popleft()
            if not lots:
                return False
            lots[0][1] -= 1
            if lots[0][1] <= 0:
                lots.popleft()
            return True

    def _wanted(self, held: _Held | None, now: float) -> int:
        if held is None or now < held.tight_until:
            return 0
        return min(self.MAX_AHEAD, int(held.rate * self.HOLD_S))

    def takes_ahead(self, service: str, klass: str) -> bool:
        """The next UPDATE of (service, class) would take tokens ahead (it comes fast, not near its limit)."""
        now = self._clock()
        with self._lock:
            return self._wanted(self._held.get((service, klass)), now) > 0

    def refill_due(self, service: str, klass: str) -> bool:
        """A take-ahead is expected and the tokens held are down to half of one: take the next
        ones now (``refill_size``), before a request finds none and has to wait for the UPDATE."""
        now = self._clock()
        with self._lock:
            held = self._held.get((service, klass))
            if held is None:
                return False
            # ``most`` is 0 until a request's own take-ahead read the limit; a refill reads it again when stale
            wanted = min(self._wanted(held, now), held.most)
            return wanted > 1 and held.tokens(now) <= wanted // self.REFILL_AT

    def refill_size(self, service: str, klass: str) -> int:
        """How many tokens a refill (an UPDATE admitting no request of its own) takes: what a
        request's take-ahead takes with its own token (``ahead_for`` + 1); 0: none now."""
        ahead = self.ahead_for(service, klass)
        return ahead + 1 if ahead > 0 else 0

    def needs_limit(self, service: str, klass: str) -> bool:
        """The process would take ahead but has not read the (service, class)'s limit lately."""
        now = self._clock()
        with self._lock:
            held = self._held.get((service, klass))
            return held is not None and self._wanted(held, now) > 0 and now >= held.most_until

    def learn(self, service: str, klass: str, rate: float, burst: float) -> None:
        """The (service, class)'s limit, read now: a take is at most what it refills in HOLD_S and an
        eighth of its burst (the UPDATE refuses more: ``ratelimit_sql.take_ahead``)."""
        now = self._clock()
        with self._lock:
            held = self._held.get((service, klass))
            if held is not None:
                held.most = int(min(rate * self.HOLD_S, burst / 8))
                held.most_until = now + self.LIMIT_TTL_S

    def ahead_for(self, service: str, klass: str) -> int:
        """How many tokens the next UPDATE should take beyond its own request's: about the requests
        this process admits of (service, class) in HOLD_S, within the limit's share; 0 at a few per
        second, near the limit, or with the limit unknown."""
        now = self._clock()
        with self._lock:
            held = self._held.get((service, klass))
            if held is None or now >= held.most_until:
                return 0
            return max(0, min(self._wanted(held, now), held.most - 1))

    def keep(self, service: str, klass: str, tokens: int, *, wanted: int) -> None:
        """The UPDATE took ``tokens`` beyond its request's, of ``wanted``: hold them for HOLD_S. Fewer
        than wanted: the tenant is near its limit, take one at a time for TIGHT_S."""
        now = self._clock()
        with self._lock:
            held = self._held.get((service, klass))
            if held is None:
                return
            if tokens > 0:  # beside any still held (two takes may have run at once), each with its own deadline
                held.lots.append([now + self.HOLD_S, tokens])
            elif wanted > 0:
                held.tight_until = now + self.TIGHT_S

    def forget(self, service: str) -> None:
        """The service's limits changed (admin API): drop what this process holds for it."""
        with self._lock:
            for key in [k for k in self._held if k[0] == service]:
                del self._held[key]
