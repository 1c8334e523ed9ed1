"""Logging set-up for every Notee process. One line per event, `%s` arguments, no secrets."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from notee.settings import Settings


def setup(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s",
    )
    # The driver logs every reconnect attempt at WARNING; keep them, but not its chatty INFO.
    logging.getLogger("cassandra").setLevel(max(logging.WARNING, logging.getLogger().level))


def announce_emulator(settings: Settings, process: str) -> None:
    """One WARNING at a process's start when NOTEE_EMULATOR_URL reroutes every push of every service."""
    if settings.emulator_url:
        logging.getLogger("notee").warning(
            "%s: NOTEE_EMULATOR_URL is set: every push of every service goes to the emulator at %s, not to FCM/APNs",
            process, settings.emulator_url)


def token_hint(token: str) -> str:
    """A device token shortened for logs: enough to correlate, not enough to push to it."""
    return f"{token[:6]}…({len(token)})" if len(token) > 8 else "…"
