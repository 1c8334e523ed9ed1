"""The ``log`` provider: a dry run. Records what would be sent and reports it delivered.

Used only for a send or job of a service an admin put in ``dry_run`` delivery mode (so a new
tenant can try the API end to end before uploading keys); those sends and jobs say
``dry_run: true``. A live service without credentials never falls back to it: its devices are
counted failed with reason ``no_credentials`` (notee/providers/routing.py).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

from notee.core.logs import token_hint
from notee.providers.base import Delivered, Message, Outcome

log = logging.getLogger(__name__)


class LogProvider:
    name = "log"

    def __init__(self, service: str = "", keep: int = 1000) -> None:
        self.service = service
        self.sent: deque[Message] = deque(maxlen=keep)  # the latest messages, for inspection

    async def send(self, messages: Sequence[Message]) -> list[Outcome]:
        self.sent.extend(messages)
        for m in messages:
            log.info(
                "dry run (log provider): service=%s os=%s token=%s title=%r",
                self.service,
                m.device_os,
                token_hint(m.device_token),
                m.title[:60],
            )
        return [Delivered("dry-run") for _ in messages]

    async def close(self) -> None:
        return None
