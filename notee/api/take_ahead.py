"""One take-ahead at a time per (service, rate class) in an API process (``ratelimit.Allowance``).

Under load, the request whose allowance ran out takes a token for itself and some for the next
requests in one UPDATE, on a worker thread. The requests that ran out while that UPDATE was under
way used to take their own (a thread hop, a MySQL statement and a commit each): subscribes are
answered in groups (notee.api.subscribe_groups), so their next requests arrive together, and about
half of them paid that hop (docs/BENCHMARKS.md, "Round 3, fifth part"). They now wait for the take
in progress and are admitted from its tokens; one that finds none left asks the bucket itself.

Only while a take-ahead is expected (the (service, class) comes fast and is not near its limit): a
tenant at its limit is judged request by request, each on its own UPDATE, none waiting for another.

Before they run out: when a request admitted from the tokens held leaves a quarter of a take-ahead
or less (``Allowance.refill_due``), the edge starts a refill, an UPDATE taking the next tokens on a
worker thread for no request of its own (``refill``), so that under steady load requests are
admitted from memory and none waits for the UPDATE (before the refill, about one rate-limited
subscribe in four waited for one: docs/BENCHMARKS.md, "Round 3, sixth part"). A refill in
progress is a take-ahead in progress: a request that finds no token waits for it. A refill that
fails (the store) is logged and answers nobody; the requests after it ask the bucket themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from anyio import to_thread

from notee.domain.ratelimit import Allowance

log = logging.getLogger(__name__)


class TakeAheads:
    """The take-aheads in progress of one app, used from its event loop."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._refills: set[asyncio.Task[None]] = set()  # in progress (a task needs a reference)

    def refill(self, service: str, klass: str, run: Callable[[], None]) -> None:
        """Start ``run`` (on a worker thread: the refill's UPDATE) unless a take-ahead of (service,
        class) is in progress already; from the event loop, without waiting for it."""
        key = (service, klass)
        if key in self._pending:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending[key] = done
        task = asyncio.create_task(self._refilling(key, done, run))
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    async def _refilling(self, key: tuple[str, str], done: asyncio.Future[None], run: Callable[[], None]) -> None:
        try:
            await to_thread.run_sync(run)
        except Exception as exc:  # no request is answered by it: its waiters ask the bucket themselves
            log.warning("service=%s: a refill of %s tokens failed (%s)", key[0], key[1], type(exc).__name__)
        finally:
            del self._pending[key]
            done.set_result(None)

    async def admitted(self, allowance: Allowance, known: str | None, klass: str | None, ask: Callable[[], str]) -> str:
        """The service ``ask`` (on a worker thread: the key lookup and the bucket's UPDATE) names,
        or, for a cached key (``known``) of a rate class whose take-ahead is in progress, the known
        service once that take left a token for this request. ``ask``'s errors are raised."""
        if known is None or klass is None:
            return await to_thread.run_sync(ask)
        key = (known, klass)
        pending = self._pending.get(key)
        if pending is not None:
            await asyncio.shield(pending)  # a client that goes away cancels its wait, not the take
            if allowance.take(known, klass, again=True):
                return known
        elif allowance.takes_ahead(known, klass):
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._pending[key] = done
            try:
                return await to_thread.run_sync(ask)
            finally:
                del self._pending[key]
                done.set_result(None)  # whatever its outcome: the waiters try its tokens, or ask themselves
        return await to_thread.run_sync(ask)
