"""Dead letters, sent again by operators: a service's letters listed (newest first) and replayed.

A replay locks the letters while they are sent (two replays never send one twice) and deletes them
when the send is done; what fails again is dead-lettered anew by ``deliver``, so a letter is never
lost. The API and the CLI replay through their process's ``DeliverySender`` (``sender.replay``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from notee.core import notification_id
from notee.providers.base import Message
from notee.providers.payload import Rich
from notee.providers.routing import ProviderSet
from notee.store import deadletter
from notee.store.runtime import Runtime
from notee.usecases.deliver import DeliveryOptions, deliver

log = logging.getLogger(__name__)


@dataclass
class ReplayResult:
    replayed: int = 0  # dead letters sent again (and removed)
    delivered: int = 0
    pruned: int = 0
    failed: int = 0  # still failing: recorded again as new dead letters, never dropped


def list_dead_letters(
    session: Session, service: str, *, limit: int = 100, before_id: int | None = None, job_id: str | None = None
) -> list[Any]:
    """A service's dead letters, newest first (``before_id``: the next, older page)."""
    return deadletter.list_for_service(session, service, limit=limit, before_id=before_id, job_id=job_id)


def job_failures(session: Session, service: str, job_id: str, since: datetime) -> list[tuple[str, str, int]]:
    """A job's dead letters by (reason, platform) with their counts, most first (``since``: the
    job's creation; letters are never older than their job)."""
    return deadletter.failures_of_job(session, service, job_id, since)


async def replay_dead_letters(
    runtime: Runtime,
    providers: ProviderSet,
    service: str,
    *,
    ids: Sequence[int] | None = None,
    job_id: str | None = None,
    limit: int = 1000,
) -> ReplayResult:
    """Send a service's dead letters again (the given ids, or a job's, or the oldest ``limit``).

    The letters are locked while they are sent (two replays never send one twice) and deleted
    when the send is done; what fails again is dead-lettered anew by ``deliver``, so a letter is
    never lost. Other tenants' ids are simply not found."""
    session = runtime.sessions()
    try:
        rows = await asyncio.to_thread(_lock_for_replay, session, service, ids, job_id, limit)
        if not rows:
            return ReplayResult()
        out = ReplayResult(replayed=len(rows))
        by_job: dict[str | None, list[Any]] = {}
        for r in rows:
            by_job.setdefault(r.job_id, []).append(r)
        for letter_job, letters in by_job.items():  # a letter that fails again keeps its job id
            messages = [
                Message(
                    device_token=r.device_token,
                    device_os=r.device_os,
                    title=r.payload.get("title", ""),
                    body=r.payload.get("body", ""),
                    data=dict(r.payload.get("data") or {}),
                    collapse_key=(r.payload.get("rich") or {}).get("collapse_key"),
                    rich=Rich.from_spec(r.payload.get("rich")),
                    # a fan-out's letter keeps its notification id (a single send's letter has no job: none)
                    notification_id=notification_id.make(notification_id.source_of_job(r.job_id), r.device_token)
                    if r.job_id
                    else "",
                )
                for r in letters
            ]
            result = await deliver(runtime, providers, service, messages, DeliveryOptions(job_id=letter_job))
            out.delivered += result.delivered
            out.pruned += len(messages) - result.delivered - len(result.failed)
            out.failed += len(result.failed)
        await asyncio.to_thread(_delete_replayed, session, service, [r.id for r in rows])
    finally:
        await asyncio.to_thread(session.close)
    log.info(
        "service=%s: %d dead letter(s) replayed: delivered=%d pruned=%d failed again=%d",
        service,
        out.replayed,
        out.delivered,
        out.pruned,
        out.failed,
    )
    return out


def _lock_for_replay(
    session: Session, service: str, ids: Sequence[int] | None, job_id: str | None, limit: int
) -> list[Any]:
    # READ COMMITTED: row locks only, no gap locks, so the dead letters ``deliver`` records meanwhile
    # (other transactions) are not blocked by this one.
    session.connection(execution_options={"isolation_level": "READ COMMITTED"})
    return deadletter.for_replay(session, service, ids=ids, job_id=job_id, limit=limit)


def _delete_replayed(session: Session, service: str, ids: list[int]) -> None:
    deadletter.delete_ids(session, service, ids)
    session.commit()
