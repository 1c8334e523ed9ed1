"""What one delivery (``notee.usecases.deliver``) did: ``DeliveryResult``; ``NoCredentials`` (nothing
of the send has a route); and the two ways a send ends early with what it did so far: ``DeliveryAborted`` (a provider configuration error) and ``HandedBack``
(a fan-out page given back during a provider outage, with the devices of it that are done)."""

from __future__ import annotations

from dataclasses import dataclass, field

from notee.core.errors import ProviderConfigError, ProviderUnavailable


@dataclass
class DeliveryResult:
    delivered: int = 0
    invalid_tokens: list[str] = field(default_factory=list)  # distinct tokens, pruned when prune=True
    retried: int = 0  # re-sends after a retryable outcome
    failed: list[tuple[str, str]] = field(default_factory=list)  # (token, reason), each dead-lettered
    no_credentials: int = 0  # of ``failed``: devices of a platform the service has no credentials for
    dry_run: bool = False  # the log provider recorded the messages; nothing was sent

    @property
    def pruned(self) -> int:
        return len(self.invalid_tokens)


class NoCredentials(ProviderConfigError):
    """No device of the send can be reached: the service has no credentials for their platforms."""


def no_credentials_message(service: str) -> str:
    return (
        f"service {service} has no provider credentials for the platform of any device (Android needs FCM; "
        f"iOS needs APNs or FCM): upload them (PUT /v1/admin/services/{service}/credentials/fcm or apns), or "
        "set its delivery_mode to dry_run"
    )


class DeliveryAborted(ProviderConfigError):
    """A provider configuration error stopped the send part-way. What was collected before it is
    recorded (pruned tokens, dead letters) and counted in ``partial``; ``done`` are the device tokens
    of the messages that ended before it (a fan-out page requeued later sends only the others)."""

    def __init__(
        self, cause: ProviderConfigError, partial: DeliveryResult, *, done: frozenset[str] = frozenset()
    ) -> None:
        counts = (
            f"{partial.delivered} delivered, {partial.pruned} pruned, {len(partial.failed)} failed before the error"
        )
        super().__init__(cause.message, details=[*cause.details, {"type": "partial_delivery", "msg": counts}])
        self.partial, self.done = partial, done


class HandedBack(ProviderUnavailable):
    """A fan-out page given back because a provider (or push service) cannot be reached. ``partial``
    counts what its devices that are done did (delivered, pruned, dead-lettered for their own reason,
    no credentials: ``processed`` messages; its prunes and dead letters are recorded), ``done`` are
    their device tokens, ``waited_s`` how long the page waited before it was given back. The rest are
    not sent and nothing is held against them: the next claim of the page sends them, skipping ``done``."""

    def __init__(
        self, message: str, *, retry_in: float, partial: DeliveryResult, done: frozenset[str], processed: int
    ) -> None:
        super().__init__(message, retry_in=retry_in)
        self.partial, self.done, self.processed = partial, done, processed
        self.waited_s = 0.0
