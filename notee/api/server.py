"""Serving the API: one listener for everything, or (``api_admin_port`` set) the tenant API and the
admin API on two listeners of one process sharing one Runtime; HTTPS on both when a certificate and
key are configured. uvicorn on uvloop runs the HTTP/1.1 protocol of ``notee.api.http1`` (httptools
with a bound on the request head, one write per response).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

import uvicorn
from fastapi import FastAPI

from notee.api.access import uvicorn_log_config
from notee.api.app import Part, begin_shutdown, create_app
from notee.api.auth import ApiKeyCache
from notee.api.connections import ConnectionGuard, ConnectionLimits
from notee.api.http1 import HttpToolsProtocol
from notee.core.settings import Settings
from notee.domain.ratelimit import Allowance
from notee.store.runtime import Runtime
from notee.usecases.heartbeats import ProcessHeartbeat, beat_until


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    part: Part


def listeners(settings: Settings, host: str, port: int) -> list[Listener]:
    if settings.api_admin_port is None:
        return [Listener(host, port, "all")]
    if (settings.api_admin_host, settings.api_admin_port) == (host, port):
        raise ValueError("the admin listener needs its own port (NOTEE_API_ADMIN_PORT)")
    return [Listener(host, port, "tenant"), Listener(settings.api_admin_host, settings.api_admin_port, "admin")]


class _Server(uvicorn.Server):
    """A listener that, on SIGTERM/SIGINT, first tells every app of the process to wrap up (single
    sends waiting to retry stop waiting and answer), then shuts down gracefully within the budget."""

    def __init__(self, config: uvicorn.Config, apps: list[FastAPI]) -> None:
        super().__init__(config)
        self.apps = apps  # every listener's app: only the last server to install handlers hears the signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        for app in self.apps:
            begin_shutdown(app)
        super().handle_exit(sig, frame)

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, except that a signal that stopped the server gracefully is not raised again
        once the previous handlers are back: with the default handler back, that killed the process
        (exit -15 on every SIGTERM, seen in the node-loss fault run) before the Runtime was closed.
        A SIGTERM is the orchestrator's ordinary stop: ``serve`` returns and the process exits 0."""
        with super().capture_signals():
            yield
            self._captured_signals.clear()  # the stop is done: nothing left for the signal to do


@dataclass(frozen=True)
class _Shared:
    """What every listener of one process shares."""

    runtime: Runtime
    key_cache: ApiKeyCache  # a revocation on either listener
    allowance: Allowance  # a rate limit set on either listener
    guard: ConnectionGuard  # an address's connections to either listener count together


def _config(settings: Settings, shared: _Shared, listener: Listener) -> uvicorn.Config:
    app = create_app(
        settings, runtime=shared.runtime, part=listener.part, key_cache=shared.key_cache, allowance=shared.allowance
    )
    return uvicorn.Config(
        app,
        host=listener.host,
        port=listener.port,
        log_level=settings.log_level.lower(),
        # JSON logs: uvicorn's lines go through the root handler, and notee.api.access writes the access log.
        log_config=None if settings.log_format == "json" else uvicorn_log_config(),
        access_log=settings.log_format != "json",
        timeout_graceful_shutdown=settings.api_shutdown_budget_s,  # in-flight requests get this long
        # httptools (C parser) with Notee's bounds on the request head and URL, the per-address cap and
        # head deadline of notee.api.connections, and one write per response
        http=HttpToolsProtocol.for_listener(settings, shared.guard),
        limit_concurrency=settings.api_max_connections,
        timeout_keep_alive=settings.api_keepalive_timeout_s,
        # X-Forwarded-For / -Proto only from the proxies the operator named (uvicorn alone would
        # believe any client on 127.0.0.1, which could then choose its own address)
        proxy_headers=bool(settings.api_trusted_proxies),
        forwarded_allow_ips=settings.api_trusted_proxies or None,
        ssl_certfile=settings.api_tls_cert_file,
        ssl_keyfile=settings.api_tls_key_file,
    )


async def _serve_all(servers: list[uvicorn.Server], runtime: Runtime) -> None:
    # one heartbeat per process (every listener of it), in its serving loop: the health page's row
    stop_beats = asyncio.Event()
    beats = asyncio.create_task(beat_until(ProcessHeartbeat(runtime, "api"), stop_beats))
    try:
        await _serve_listeners(servers)
    finally:
        stop_beats.set()
        await beats


async def _serve_listeners(servers: list[uvicorn.Server]) -> None:
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    # Each server installs the SIGTERM/SIGINT handler in turn, so only the last one hears the signal:
    # when any server stops, the others are told to stop too.
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for server in servers:
        server.should_exit = True
    await asyncio.gather(*pending)
    for task in tasks:
        task.result()  # a listener that failed (port in use) fails the command


def serve(settings: Settings, host: str, port: int) -> None:
    """Run until SIGTERM/SIGINT, then stop every listener gracefully."""
    # No caller's frame looked up per log record (the logging HOWTO's "Optimization"): Notee's line
    # formats carry no file, line or function, and the access line is logged per request (the
    # lookup was ~3 % of the event loop's CPU per subscribe, docs/BENCHMARKS.md "Round 3, sixth part").
    logging._srcfile = None
    runtime = Runtime(settings)
    try:
        shared = _Shared(
            runtime, ApiKeyCache(settings.api_key_cache_s), Allowance(), ConnectionGuard(ConnectionLimits.of(settings))
        )
        configs = [_config(settings, shared, lst) for lst in listeners(settings, host, port)]
        apps: list[FastAPI] = [config.app for config in configs]  # type: ignore[misc]
        servers: list[uvicorn.Server] = [_Server(config, apps) for config in configs]
        # uvicorn's own loop choice (uvloop, a uvicorn[standard] extra): asyncio.run would take the
        # pure-Python selector loop, whose transports cost ~2x the CPU per request.
        with asyncio.Runner(loop_factory=configs[0].get_loop_factory()) as runner:
            runner.run(_serve_all(servers, runtime))
    finally:
        runtime.close()
