"""``notee worker``'s import lanes (``import_lanes`` of them): each claims one chunk of a bulk import
at a time and applies it (``notee.usecases.imports.run_chunk``), beside the fan-out lanes, until ``stop``.

A crash leaves the chunk leased until ``import_lease_s``; the next claim (this worker's or another's)
redoes it. A transaction of the chunk that meets a deadlock or a lock wait timeout is run again by
itself (``run_chunk``); a chunk that still fails (a store down, retries run out) is given back at once and claimed again after the lane's backoff; an outage does not count toward
its poison limit (``imports_sql.MAX_CHUNK_ATTEMPTS``), as for fan-out tasks. SIGTERM: the chunk in hand is
finished first (a chunk is short: one batch of upserts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from notee.store import imports_sql
from notee.store.runtime import Runtime
from notee.usecases.imports import run_chunk
from notee.worker.outage import OutageBackoff, is_outage

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.5


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


async def import_lane(runtime: Runtime, stop: asyncio.Event, owner: str, services: Sequence[str] | None) -> None:
    """Claim and apply import chunks until ``stop``; a failure is logged and the chunk's lease left to
    expire (it is redone)."""
    backoff = OutageBackoff(cap_s=runtime.settings.fanout_outage_backoff_cap_s)
    while not stop.is_set():
        claim = None
        try:
            claim = await asyncio.to_thread(
                imports_sql.claim,
                runtime.sessions,
                owner=owner,
                lease_s=runtime.settings.import_lease_s,
                services=services,
            )
            if claim is None:
                await _pause(stop, IDLE_POLL_S)
                continue
            await asyncio.to_thread(run_chunk, runtime, claim)
            backoff.reset()
            log.info("import %s: chunk %d applied", claim.import_id, claim.chunk_no)
        except imports_sql.LeaseLost as exc:
            log.warning("import lane of %s: %s", owner, exc)
        except Exception as exc:  # a deadlock, a store down, a bug: keep the process; the chunk is redone
            delay = backoff.next_delay()
            log.exception("import lane of %s: %s; again in %.1f s", owner, type(exc).__name__, delay)
            if claim is not None:
                await asyncio.to_thread(_give_back, runtime, claim, not is_outage(exc))
            await _pause(stop, delay)


def _give_back(runtime: Runtime, claim: imports_sql.ChunkClaim, counts: bool) -> None:
    try:
        imports_sql.release(runtime.sessions, claim, counts=counts)
    except Exception as exc:  # the store is down: the lease expires instead
        log.warning("import %s: chunk %d not given back (%s)", claim.import_id, claim.chunk_no, type(exc).__name__)
