"""The API application factory. ``create_app`` connects nothing; the lifespan builds the Runtime."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig

from notee.api import console, docs_ui, errors, openapi, openapi_examples
from notee.api.access import RequestContext
from notee.api.auth import ApiKeyCache
from notee.api.edge import EdgeGuard
from notee.api.routes import (
    admin,
    audience_publish,
    deadletters,
    devices,
    engagement,
    health,
    imports,
    insight,
    preview,
    processes,
    prometheus,
    publish,
    quiet,
    segments,
    sends,
    subscriptions,
    tags,
    templates,
    users,
    webhooks,
    webpush,
)
from notee.api.subscribe_groups import SubscribeGroups
from notee.core.logs import announce_emulator
from notee.core.settings import Settings
from notee.core.version import VERSION
from notee.domain.ratelimit import Allowance
from notee.store.runtime import Runtime
from notee.usecases.queue_levels import watch_outbox, watch_queue
from notee.usecases.receipts import Caches
from notee.usecases.sender import DeliverySender

Part = Literal["all", "tenant", "admin"]
# The tenant API's route modules, the busiest first (routing tries them in this order): imports last.
TENANT_ROUTES = (
    subscriptions,
    users,
    tags,
    devices,
    publish,
    audience_publish,
    preview,
    sends,
    engagement,
    templates,
    deadletters,
    insight,
    webhooks,
    quiet,
    webpush,
    imports,
)


# FastAPI's own OpenTelemetry looks for a global provider on every request (~10 µs: three environment
# look-ups); with Notee's tracing off nothing of OpenTelemetry is called (notee.core.tracing).
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


def create_app(
    settings: Settings,
    runtime: Runtime | None = None,
    part: Part = "all",
    key_cache: ApiKeyCache | None = None,
    allowance: Allowance | None = None,
) -> FastAPI:
    """Build the app. Pass ``runtime`` to share one (tests, or two listeners in one process);
    otherwise the lifespan makes and closes one. ``part``: every route, or only the tenant API, or
    only the admin API (for separate listeners; /healthz is in each). ``key_cache``: the process's
    cache of API keys, shared by its listeners so a revocation on the admin one reaches the tenant one;
    ``allowance``: the process's rate-limit tokens taken ahead, shared the same way (a limit changed
    on the admin listener drops the tenant listener's)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = runtime is None
        announce_emulator(settings, "api")
        app.state.runtime = runtime or Runtime(settings)
        app.state.loop = asyncio.get_running_loop()
        app.state.stopping = asyncio.Event()  # set by begin_shutdown: in-flight sends stop waiting to retry
        watch_queue(app.state.runtime)  # /metrics reports the job queue
        watch_outbox(app.state.runtime)  # and the webhook outbox
        app.state.subscribe_groups = SubscribeGroups.of(app.state.runtime)
        # single sends and replays (routes get it through deps.SenderDep): built here, in the serving
        # event loop, once; its HTTP/2 pools connect on first use. An app served again inside a serving
        # (a test client in another's lifespan) gets its own, and the outer one's comes back after it.
        outer = getattr(app.state, "sender", None)
        sender = app.state.sender = DeliverySender(app.state.runtime)
        try:
            yield
        finally:
            await sender.close()
            app.state.sender = outer
            if own:
                app.state.runtime.close()

    app = FastAPI(
        title="Notee",
        version=VERSION,
        description="Self-hosted multi-tenant push notifications: users, devices, templates, "
        "topic and cycle subscriptions, publishes fanned out through FCM and APNs.",
        lifespan=lifespan,
        responses=errors.COMMON_ERRORS,
        openapi_tags=openapi.TAGS,
        generate_unique_id_function=openapi.operation_id,
        docs_url=None,  # /docs and /redoc come from docs_ui, with Notee's own copies of their assets
        redoc_url=None,
        telemetry=None if settings.tracing else NO_TELEMETRY,
    )
    app.state.settings = settings
    app.state.key_cache = key_cache or ApiKeyCache(settings.api_key_cache_s)
    app.state.allowance = allowance or Allowance()
    app.state.receipt_caches = Caches()  # receipts' sources and webhook wants, per process
    app.state.serves_admin = part in ("all", "admin")
    app.state.serves_tenant = part in ("all", "tenant")
    errors.install(app)
    if app.state.serves_tenant:  # inside the edge: the hottest write, answered without FastAPI's routing
        app.add_middleware(subscriptions.TopicSubscribeShortcut)
    app.add_middleware(EdgeGuard)  # limits and credentials before any body is read
    app.add_middleware(RequestContext)  # outermost: the request id (and JSON access line) covers edge answers too
    # Routing tries routes in this order, each a regex match: the busiest first (health probes,
    # subscriptions), the admin API last (docs/BENCHMARKS.md, "The API's HTTP stack").
    routers = [health.router]
    if app.state.serves_tenant:
        routers += [r.router for r in TENANT_ROUTES]
        routers += [segments.router, segments.estimate_router]
    if app.state.serves_admin:
        # /metrics: admin token (its labels name every service)
        routers += [insight.admin_router, admin.router, processes.router, prometheus.router]
    for router in routers:
        app.include_router(router)
    docs_ui.install(app)
    if app.state.serves_admin:  # the console (docs/CONSOLE.md): with split listeners, on the admin one only
        console.install(app)
    devices.install_access_log_filter()  # device tokens in paths are shortened in the access log
    document = app.openapi
    app.openapi = lambda: openapi_examples.with_examples(openapi.key_patterns(document()))  # type: ignore[method-assign]
    return app


def begin_shutdown(app: FastAPI) -> None:
    """The server got SIGTERM/SIGINT: tell in-flight requests (single sends waiting to retry) to wrap
    up now, so they answer within the shutdown budget. Safe to call from a signal handler."""
    loop = getattr(app.state, "loop", None)
    stopping = getattr(app.state, "stopping", None)
    if loop is not None and stopping is not None and not loop.is_closed():
        loop.call_soon_threadsafe(stopping.set)
