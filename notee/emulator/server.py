"""Run the emulator: granian (Rust HTTP server), one ASGI worker, TLS with the generated test CA.

One port serves HTTP/2 (with or without ALPN: aioapns sends none) and HTTP/1.1 (requests).
"""

from __future__ import annotations

import logging
from pathlib import Path

from granian import Granian
from granian.constants import HTTPModes, Interfaces

from notee.emulator.tls import TlsFiles, ensure_tls

log = logging.getLogger(__name__)


def serve(host: str, port: int, state_dir: str | Path, *, on_ready=None) -> None:
    """Serve until interrupted. ``on_ready(tls_files)`` is called once the certificates exist."""
    files: TlsFiles = ensure_tls(state_dir, [host])
    if on_ready:
        on_ready(files)
    Granian(
        "notee.emulator.app:app",
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        http=HTTPModes.auto,
        workers=1,  # the state (tokens, faults, counts) lives in this one worker's memory
        ssl_cert=files.server_cert,
        ssl_key=files.server_key,
        log_level="warning",
        backpressure=4096,
    ).serve()
