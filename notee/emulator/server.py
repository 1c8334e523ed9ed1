"""Run the emulator: granian (Rust HTTP server), one ASGI worker, TLS with the generated test CA.

One port serves HTTP/2 (with or without ALPN: aioapns sends none) and HTTP/1.1 (requests): the
worker's front (``notee.emulator.front``) terminates TLS, answers HTTP/2 itself and relays HTTP/1.1
to granian on a Unix socket in a directory of its own: nothing can take it between its choice and
granian's bind, as another process could take a loopback port picked free and released.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from granian import Granian
from granian.constants import HTTPModes, Interfaces
from granian.log import LogLevels

from notee.core.logs import LogFormat, dict_config
from notee.emulator import scratch
from notee.emulator.tls import TlsFiles, ensure_tls

log = logging.getLogger(__name__)
GRANIAN_LOGGERS = ("_granian", "granian.access")  # granian's server and access loggers (granian.log)


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """Where and how ``notee emulator`` serves.

    ``realistic``: behave like the real services (``notee.emulator.state.Realism``); FCM's port
    advertises 100 concurrent streams like Google's front ends, and APNs is served on
    ``apns_port`` (default: ``port`` + 1) by the emulator's own HTTP/2 server
    (``notee.emulator.peer``: one stream until the first valid request, then 1000; GOAWAY), because
    granian cannot change a connection's limit or send GOAWAY on demand. ``names`` are further host
    names the certificate must hold (e.g. a container's service name). ``log_level`` /
    ``log_format``: granian's own lines (its start, its worker, its errors) and the worker
    process's are written like every Notee process's (NOTEE_LOG_FORMAT=json: one JSON object per
    line)."""

    host: str
    port: int
    state_dir: str | Path
    realistic: bool = False
    apns_port: int | None = None
    names: tuple[str, ...] = ()
    log_level: str = "WARNING"
    log_format: LogFormat = "text"

    @property
    def apns_port_used(self) -> int:
        """The port APNs is served on in realistic mode."""
        return self.apns_port or self.port + 1


def serve(config: EmulatorConfig, *, on_ready: Callable[[TlsFiles], None] | None = None) -> None:
    """Serve until interrupted. ``on_ready(tls_files)`` is called once the certificates exist."""
    host, port = config.host, config.port
    files: TlsFiles = ensure_tls(config.state_dir, [host, *config.names])
    upstream_dir = scratch.make_dir()  # 0700: this user's only; stale ones (a SIGKILLed emulator's) removed first
    upstream = upstream_dir / "granian.sock"
    # read by the ASGI worker (notee.emulator.state, .app) at start-up; granian's worker inherits them
    os.environ.update(
        {
            "NOTEE_EMULATOR_FRONT_HOST": host,
            "NOTEE_EMULATOR_FRONT_PORT": str(port),
            "NOTEE_EMULATOR_UPSTREAM": str(upstream),
            "NOTEE_EMULATOR_TLS_CERT": str(files.server_cert),
            "NOTEE_EMULATOR_TLS_KEY": str(files.server_key),
        }
    )
    if config.realistic:
        os.environ.update(
            {
                "NOTEE_EMULATOR_REALISTIC": "1",
                "NOTEE_EMULATOR_APNS_HOST": host,
                "NOTEE_EMULATOR_APNS_PORT": str(config.apns_port_used),
            }
        )
    if on_ready:
        on_ready(files)
    # granian serves HTTP/1.1 on the Unix socket, behind the worker's front on the public port
    # (notee.emulator.front: TLS, HTTP/2 itself, HTTP/1.1 relayed here)
    try:
        Granian(
            "notee.emulator.app:app",
            uds=upstream,
            uds_permissions=0o600,
            interface=Interfaces.ASGI,
            http=HTTPModes.http1,
            workers=1,  # the state (tokens, faults, counts) lives in this one worker's memory
            log_level=LogLevels(config.log_level.lower()),
            log_dictconfig=dict_config(GRANIAN_LOGGERS, config.log_level, config.log_format),
            backpressure=4096,
        ).serve()
    finally:
        shutil.rmtree(upstream_dir, ignore_errors=True)
