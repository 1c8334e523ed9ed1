"""Logging set-up for every Notee process. One line per event, `%s` arguments, no secrets."""

from __future__ import annotations

import logging


def setup(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s",
    )
    # The driver logs every reconnect attempt at WARNING; keep them, but not its chatty INFO.
    logging.getLogger("cassandra").setLevel(max(logging.WARNING, logging.getLogger().level))


def token_hint(token: str) -> str:
    """A device token shortened for logs: enough to correlate, not enough to push to it."""
    return f"{token[:6]}…({len(token)})" if len(token) > 8 else "…"
