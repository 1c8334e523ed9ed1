"""Domain errors: a small hierarchy the API maps to HTTP in one handler (notee/api/errors.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any


class NoteeError(Exception):
    """Base of every error Notee reports to a caller. ``code`` is machine-readable and stable."""

    status = 400
    code = "bad_request"
    headers: dict[str, str] | None = None  # extra response headers (Retry-After)

    def __init__(self, message: str, *, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class InvalidInput(NoteeError):
    status = 422
    code = "invalid_input"


class NotFound(NoteeError):
    """Also answered for another tenant's objects, so their existence is not revealed."""

    status = 404
    code = "not_found"


class Conflict(NoteeError):
    status = 409
    code = "conflict"


class Unauthorized(NoteeError):
    status = 401
    code = "unauthorized"


class Forbidden(NoteeError):
    status = 403
    code = "forbidden"


class PayloadTooLarge(NoteeError):
    status = 422
    code = "payload_too_large"


class RateLimited(NoteeError):
    """The service's rate limit of this class of requests is used up; retry after ``retry_after`` s."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, details=details)
        self.retry_after = retry_after
        self.headers = {"Retry-After": str(retry_after)}


class ProviderConfigError(NoteeError):
    """Provider credentials missing or rejected: loud, never retried per device."""

    status = 424
    code = "provider_config"


class ProviderUnavailable(NoteeError):
    """FCM/APNs could not be reached at all (connections failing, not an answer about a device), or
    the fan-out's circuit breaker for it is open: the work is retried later, never counted as the
    devices' failure. ``retry_in``: seconds until the breaker lets a probe through (0: unknown)."""

    status = 503
    code = "provider_unavailable"

    def __init__(self, message: str, *, retry_in: float = 0.0) -> None:
        super().__init__(message)
        self.retry_in = retry_in


class QuietHoursNow(NoteeError):
    """A single send that opted in to quiet hours, in the user's quiet hours, of a template that holds:
    nothing was sent now; ``until_at`` (aware UTC) is when they end (the API schedules the send then)."""

    status = 409
    code = "quiet_hours"

    def __init__(self, message: str, *, until_at: datetime) -> None:
        until = until_at.isoformat().replace("+00:00", "Z")
        super().__init__(
            message,
            details=[{"loc": ["body", "quiet_hours"], "type": "quiet_hours", "msg": message, "ctx": {"until": until}}],
        )
        self.until_at = until_at


class QuietDropped(NoteeError):
    """A single send that opted in to quiet hours, in the user's quiet hours, of a template that drops:
    nothing was sent (the route answers 200 with the count)."""

    status = 200
    code = "quiet_dropped"

    def __init__(self, devices: int) -> None:
        super().__init__(f"{devices} device(s) not sent: quiet hours")
        self.devices = devices
