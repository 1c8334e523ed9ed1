"""The provider interface: send a batch of messages, get one outcome per message.

Outcomes are values, not exceptions: a batch of 500 with 3 dead tokens returns 497 ``Delivered``
and 3 ``InvalidToken``. Only configuration/auth problems that make *every* send fail raise
``notee.core.errors.ProviderConfigError`` (loud, never retried per device).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from notee.providers.payload import Rich


@dataclass(slots=True)
class Message:
    """One rendered push for one device. Treated as immutable (a page's messages share their title,
    body, data and rich objects), but not a frozen dataclass: a frozen one's ``__init__`` sets each
    field through ``object.__setattr__``, about 1 µs more per push on the worker's hot path
    (docs/BENCHMARKS.md, round 3, fourth part). It was never hashable (``data`` is a dict)."""

    device_token: str
    device_os: str
    title: str
    body: str
    data: dict[str, str] = field(default_factory=dict)
    ttl_seconds: int | None = None
    priority: str = "high"  # "high" | "normal"
    collapse_key: str | None = None
    rich: Rich | None = None  # the rich fields (docs/PAYLOADS.md), one object shared by a whole page
    notification_id: str = ""  # notee.core.notification_id: echoed by the app in its receipts; "": none

    def shares_content(self, other: Message) -> bool:
        """Are this push's title, body, data and rich objects the very ones of ``other``'s (as
        ``messages_for`` shares them across a page)? Then a body built for ``other`` fits this one
        as far as those fields go, without comparing their values."""
        return (
            self.title is other.title
            and self.body is other.body
            and self.data is other.data
            and self.rich is other.rich
        )

    def apns_expiration(self, now: float) -> str | None:
        """The ``apns-expiration`` header of this push's TTL: ``0`` for a TTL of 0 (APNs tries once and
        does not store it, as FCM does with ``ttl: 0s``), else the UNIX time it expires; None: no TTL."""
        if self.ttl_seconds is None:
            return None
        return "0" if self.ttl_seconds == 0 else str(int(now) + self.ttl_seconds)


@dataclass(frozen=True, slots=True)
class Delivered:
    message_id: str = ""


@dataclass(frozen=True, slots=True)
class InvalidToken:
    """The provider says the token is dead (FCM UNREGISTERED / INVALID_ARGUMENT on the token,
    APNs 410 / BadDeviceToken): prune the device and its subscriptions."""

    reason: str


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """Retryable (429, 5xx, transport error). ``seconds`` is the provider's Retry-After, or None.
    ``transport``: no answer from the provider at all (connection problem); that is never counted
    against the device (notee.usecases.deliver). ``provider_wide``: the provider refused the request for
    its own reasons (overloaded, an internal error, the project's quota), not because of this
    device: a fan-out page waits it out without using the device's attempts. ``circuit_open``: not
    sent at all, the circuit breaker of the device's push service is open (``seconds``: until its
    next probe): a fan-out page waits for it (notee.usecases.guarded_send)."""

    reason: str
    seconds: float | None = None
    transport: bool = False
    provider_wide: bool = False
    circuit_open: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """Permanent for this message (e.g. payload rejected): record it, do not retry."""

    reason: str


Outcome = Delivered | InvalidToken | RetryAfter | Failed


class Provider(Protocol):
    name: str

    async def send(self, messages: Sequence[Message]) -> list[Outcome]:
        """Send every message; return one outcome per message, in order."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class Circuits(Protocol):
    """A provider that sends to more than one independent service (Web Push: every browser's push
    service): the fan-out's circuit breaker guards each ``circuit`` on its own, so one push service
    failing does not stop the others."""

    def circuit(self, message: Message) -> str:
        """The breaker key of the service that receives ``message`` (e.g. ``webpush:<origin>``)."""
        ...
