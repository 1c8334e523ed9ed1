"""Per-tenant rate limits: a token bucket per (service, class) in MySQL, shared by every API process.

Classes: ``publish`` (topic publishes), ``send`` (single sends), ``write`` (subscription writes and
every other tenant write), ``read`` (GET). A limit is a rate (tokens per second) with a burst (the
bucket's size); the admin sets them per service, otherwise the deployment defaults
(``NOTEE_RATE_LIMIT_<CLASS>_RATE`` / ``_BURST``) apply. Functions take the caller's session; the
caller commits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy.orm import Session

from notee import metrics
from notee.errors import InvalidInput, RateLimited
from notee.settings import Settings
from notee.store import ratelimit_sql as store
from notee.vocabulary import RATE_CLASSES, RateClass

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


def admit(session: Session, settings: Settings, service: str, klass: RateClass) -> None:
    """Admit one request of ``service``'s ``klass``, or raise RateLimited (429) with the seconds until
    one fits. An admitted request costs one UPDATE; only a service's first request or a refusal
    costs more."""
    default = default_limit(settings, klass)
    args = {"rate": default.rate, "burst": default.burst}
    verdict = store.take(session, service, klass, **args)
    if verdict is None:  # the first limited request of this service and class (or the server restarted)
        store.create(session, service, klass)
        verdict = store.take(session, service, klass, **args)
    if verdict:
        return
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
