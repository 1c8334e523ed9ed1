"""Logging set-up for every Notee process. One line per event, `%s` arguments, no secrets.

``log_format="json"`` writes one JSON object per line: time (RFC 3339, UTC), level, logger, message,
and the request id, job id and service of the work in progress (context variables set by the API's
request middleware and edge, and by the worker while it runs a task), the trace id inside a span
when tracing is on (``notee.core.tracing``; the text format ends with ``trace_id=``), plus any ``extra`` fields a
line declares in ``FIELDS`` (the access log's method, path, status, duration_ms).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from notee.core import tracing

if TYPE_CHECKING:
    from notee.core.settings import Settings

LogFormat = Literal["text", "json"]

request_id: ContextVar[str | None] = ContextVar("notee_request_id", default=None)
job_id: ContextVar[str | None] = ContextVar("notee_job_id", default=None)
service: ContextVar[str | None] = ContextVar("notee_service", default=None)

# ``extra`` fields a JSON line carries when a record has them (the access log's).
FIELDS = ("method", "path", "status", "duration_ms")
# Libraries whose INFO lines are routine chatter (APScheduler: two a minute; the Cassandra driver:
# every reconnect; httpx: every request). Their warnings and errors are kept.
QUIET = ("apscheduler", "cassandra", "httpx", "httpcore")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (tracebacks included as ``exc_info``)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name, var in (("request_id", request_id), ("job_id", job_id), ("service", service)):
            value = var.get()
            if value is not None:
                line[name] = value
        trace = tracing.trace_id()
        if trace is not None:
            line["trace_id"] = trace
        for name in FIELDS:
            if name in record.__dict__:
                line[name] = record.__dict__[name]
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The text line, ending with `` trace_id=<32 hex>`` inside a span when tracing is on."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        trace = tracing.trace_id()
        return line if trace is None else f"{line} trace_id={trace}"


def setup(level: str = "INFO", log_format: LogFormat = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])  # a no-op under a test runner's handlers
    for name in QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))


def dict_config(loggers: Sequence[str], level: str = "INFO", log_format: LogFormat = "text") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` giving ``loggers`` (and the root) Notee's handler and format, for a
    library that sets up its own logging from one (granian, in the emulator and its worker process)."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"}
        if log_format == "json"
        else {"format": "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"}
    )
    handler = {"class": "logging.StreamHandler", "formatter": "notee", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"notee": formatter},
        "handlers": {"notee": handler},
        "loggers": {name: {"handlers": ["notee"], "level": level.upper(), "propagate": False} for name in loggers},
        "root": {"handlers": ["notee"], "level": level.upper()},
    }


@contextmanager
def task_context(job: str, job_service: str | None = None) -> Iterator[None]:
    """Lines logged inside carry ``job_id`` (and ``service``); both are restored on exit."""
    job_token = job_id.set(job)
    service_token = service.set(job_service)
    try:
        yield
    finally:
        service.reset(service_token)
        job_id.reset(job_token)


def announce_emulator(settings: Settings, process: str) -> None:
    """One WARNING at a process's start when NOTEE_EMULATOR_URL reroutes every push of every service."""
    if settings.emulator_url:
        logging.getLogger("notee").warning(
            "%s: NOTEE_EMULATOR_URL is set: every push of every service goes to the emulator at %s, not to FCM/APNs",
            process,
            settings.emulator_url,
        )


def token_hint(token: str) -> str:
    """A device token shortened for logs: enough to correlate, not enough to push to it."""
    return f"{token[:6]}…({len(token)})" if len(token) > 8 else "…"
