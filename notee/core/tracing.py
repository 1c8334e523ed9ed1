"""OpenTelemetry tracing, off by default (``NOTEE_TRACING=true``; docs/DEPLOY.md "Tracing").

One trace per push request: ``notee.publish`` (a publish, a scheduled send or a cycle minute makes
its job) -> ``notee.task`` (a worker sends one task of that job; the job row carries the publish's
W3C ``traceparent``, so the task joins the publish's trace in another process, later) ->
``notee.provider.send`` (one request group to FCM or APNs, with its outcome counts). An immediate
single send is ``notee.send`` -> ``notee.provider.send``. Log lines written inside a span carry its
``trace_id`` (docs/ARCHITECTURE.md "Logs").

Notee uses only OpenTelemetry's API; the SDK is the optional extra ``notee[tracing]``. When tracing
is on and the process has no SDK tracer provider yet (``opentelemetry-instrument`` or the embedding
application may have set one), ``setup`` installs one whose spans go to ``NOTEE_TRACING_EXPORTER``:
``console`` (stdout) or ``otlp`` (``opentelemetry-exporter-otlp-proto-http``, configured by the
standard ``OTEL_EXPORTER_OTLP_*`` variables). Off, nothing of OpenTelemetry is imported or called.

The tracer is held here, once per process: OpenTelemetry's tracer provider is process-global by
design, and every process sets it up once at start (``notee.cli.config.load_settings``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from notee.core.settings import Settings

Attributes = Mapping[str, str | int | float | bool]
_state: dict[str, Any] = {"tracer": None}  # the process's tracer while tracing is on


class TracingUnavailable(RuntimeError):
    """NOTEE_TRACING=true, and what it needs is not installed."""


def setup(settings: Settings) -> None:
    """Turn tracing on when the settings ask for it (TracingUnavailable when the extra is missing)."""
    if not settings.tracing:
        return
    try:
        # deferred: the tracing extra is optional; a process with tracing off never imports it
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import get_tracer, get_tracer_provider, set_tracer_provider
    except ImportError:
        raise TracingUnavailable("NOTEE_TRACING=true needs the tracing extra: pip install 'notee[tracing]'") from None
    if not isinstance(get_tracer_provider(), TracerProvider):
        provider = TracerProvider(resource=Resource.create({"service.name": settings.tracing_service_name}))
        provider.add_span_processor(BatchSpanProcessor(_exporter(settings.tracing_exporter)))
        set_tracer_provider(provider)
    enable(get_tracer("notee"))


# Loaded by name: the OTLP exporter is the operator's choice to install, not a dependency of Notee.
OTLP_EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


def _exporter(name: str) -> Any:
    if name == "console":
        # deferred: the tracing extra is optional (see setup)
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    try:
        module = importlib.import_module(OTLP_EXPORTER)
    except ImportError:
        raise TracingUnavailable(
            "NOTEE_TRACING_EXPORTER=otlp needs the OTLP exporter: pip install opentelemetry-exporter-otlp-proto-http"
        ) from None
    return module.OTLPSpanExporter()


def enable(tracer: Any) -> None:
    """Make spans with ``tracer`` (an OpenTelemetry ``Tracer``; tests pass one of their own)."""
    _state["tracer"] = tracer


def disable() -> None:
    _state["tracer"] = None


def enabled() -> bool:
    return _state["tracer"] is not None


@contextmanager
def span(name: str, attributes: Attributes | None = None, parent: str | None = None) -> Iterator[Any]:
    """A span around the block (the current span's child, or ``parent``'s: a ``traceparent`` carried
    from another process); yields it (None when tracing is off) for attributes learned inside."""
    tracer = _state["tracer"]
    if tracer is None:
        yield None
        return
    context = None
    if parent:
        # deferred: only with tracing on (the tracing extra is optional)
        from opentelemetry.propagate import extract

        context = extract({"traceparent": parent})
    with tracer.start_as_current_span(name, context=context, attributes=dict(attributes or {})) as current:
        yield current


def traceparent() -> str | None:
    """The current span as a W3C ``traceparent`` (to carry to another process), or None."""
    if _state["tracer"] is None:
        return None
    # deferred: only with tracing on (the tracing extra is optional)
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def trace_id() -> str | None:
    """The current trace's id (32 hex digits) for the logs, or None outside a span or when off."""
    if _state["tracer"] is None:
        return None
    # deferred: only with tracing on (the tracing extra is optional)
    from opentelemetry.trace import get_current_span

    context = get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
