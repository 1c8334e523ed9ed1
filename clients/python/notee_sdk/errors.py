"""Errors raised by the client. Every API error carries the server's ``{"error": {code, message,
details}}`` body; transport problems (connection refused, timeouts) stay httpx's own exceptions."""

from __future__ import annotations

from typing import Any


class NoteeError(Exception):
    """The API answered with an error status."""

    def __init__(self, status: int, code: str, message: str, details: list[Any] | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []
        self.retry_after = retry_after


class BadRequest(NoteeError):
    """4xx other than those below: the request itself is wrong; repeating it will not help."""


class Unauthorized(NoteeError):
    """401/403: missing, wrong or revoked credentials, or the admin API is disabled."""


class NotFound(NoteeError):
    """404 (also another service's objects: their existence is never revealed)."""


class Conflict(NoteeError):
    """409: the object already exists."""


class ValidationFailed(NoteeError):
    """422: invalid input; the server wrote nothing. ``details`` lists each problem."""


class RateLimited(NoteeError):
    """429 after the client's retries ran out; ``retry_after`` says when to try again."""


class Unavailable(NoteeError):
    """503 (a store or provider is down) after the client's retries ran out."""


class ServerError(NoteeError):
    """Any other 5xx."""


class JobTimeout(TimeoutError):
    """``wait()`` gave up before the job finished; the job itself goes on."""


_BY_STATUS: dict[int, type[NoteeError]] = {
    401: Unauthorized, 403: Unauthorized, 404: NotFound, 409: Conflict, 422: ValidationFailed,
    429: RateLimited, 503: Unavailable,
}


def error_for(status: int, body: Any, retry_after: float | None) -> NoteeError:
    """The exception for an error answer; tolerant of bodies that are not the error format (a proxy's
    HTML page, say)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code", "error"))
        message = str(error.get("message", ""))
        details = error.get("details") if isinstance(error.get("details"), list) else []
    else:
        code, message, details = "http_error", f"HTTP {status}", []
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else BadRequest)
    return cls(status, code, message, details, retry_after)
