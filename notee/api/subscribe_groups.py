"""Concurrent single topic subscribes of one (service, type) answered by one domain call.

``PUT /v1/users/{id}/subscriptions/topic/{type}/{topic}`` is what service backends send all day,
many at once. Each request costs a worker-thread hop, a MySQL checkout with its lock and read, and
three Cassandra requests; the same work for a group of users costs about the same round trips
(``topic_subscriptions.subscribe_topics``: the users' locks and one read in MySQL, IN reads and shared
logged batches in Cassandra, one counter batch). So the route hands its pair to ``SubscribeGroups``:
while a call for that (service, type) is in progress, the requests that arrive wait, and go together
in the next call once it returns (group commit). A request that finds none in progress starts one
at once, so a lone request waits for nobody; under load a request waits for at most the call in
progress, and the calls of one (service, type) run one at a time.

A drain (the calls of one (service, type), one after the other while requests keep coming) keeps
its MySQL connection from one call to the next, each call its own transaction ended by a rollback:
a burst of calls pays one pool checkout and its ping, not one per call. The rollback that ends a
call's transaction (its users' locks) is the first statement of the drain's next call, or the
pool's reset when the connection goes back, not the call's last: the group is answered as soon as
its writes are, one MySQL round trip earlier, and the locks end before the drain's next locks (or
on the connection's return) all the same. The connection goes back to the pool when nobody waits,
or at once after a failed call.

Every request gets the answer it would have had alone: its own status and device count, 404 for an
unknown user (the others of the group are still subscribed), and the group's error (a template of
the other method, a store outage) when the call fails. Sizes are ``notee_subscribe_group_size``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from anyio import to_thread
from sqlalchemy import Connection

from notee.core.errors import NotFound
from notee.core.metrics import SUBSCRIBE_GROUP_SIZE
from notee.domain import topic_subscriptions
from notee.domain.subscription_rows import SubscribeResult
from notee.store.runtime import Runtime


class GroupDrain(Protocol):
    """What one drain calls, from worker threads, one call at a time."""

    def call(self, service: str, type_: str, pairs: Sequence[tuple[str, str]]) -> list[SubscribeResult | None]:
        """One group's topic_subscriptions.subscribe_topics."""

    def close(self) -> None:
        """The drain is over: give back what its calls kept."""


class _StoreDrain:
    """A drain's calls on one MySQL connection, a Core connection, not an ORM session (docs/BENCHMARKS.md,
    "Subscribe through the API"), checked out at the first call and kept while calls succeed."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._db: Connection | None = None

    def call(self, service: str, type_: str, pairs: Sequence[tuple[str, str]]) -> list[SubscribeResult | None]:
        if self._db is not None:
            try:  # the previous call's transaction: its users' locks end here, before this call's own
                topic_subscriptions.end_transaction(self._db)
            except Exception:  # that call was answered already: this one goes on on another connection
                self.close()
        if self._db is None:
            self._db = self._runtime.engine.connect()  # the pool's checkout pings it
        try:
            return topic_subscriptions.subscribe_topics(self._db, self._runtime.statements, service, type_, pairs)
        except BaseException:
            self.close()  # in whatever state the failure left it: the pool resets it, or discards it
            raise

    def close(self) -> None:
        """Give the connection back: the pool's reset on return rolls back the last call's transaction."""
        db, self._db = self._db, None
        if db is not None:
            db.close()


MAX_GROUP = topic_subscriptions.BULK_MAX  # pairs per call, as many as a bulk request's users


@dataclass
class _Waiting:
    pairs: list[tuple[str, str]] = field(default_factory=list)  # (user_id, topic)
    answers: list[asyncio.Future[SubscribeResult]] = field(default_factory=list)


class SubscribeGroups:
    """Gathers topic subscribes by (service, type); one per API process, used from its event loop."""

    @classmethod
    def of(cls, runtime: Runtime) -> SubscribeGroups:
        """The groups of an API process, on its stores."""
        return cls(lambda: _StoreDrain(runtime))

    def __init__(self, drain: Callable[[], GroupDrain]) -> None:
        self._new_drain = drain
        self._waiting: dict[tuple[str, str], _Waiting] = {}
        self._running: set[tuple[str, str]] = set()  # the (service, type)s with a call in progress
        self._tasks: set[asyncio.Task[None]] = set()  # the drains in progress (a task needs a reference)

    async def subscribe(self, service: str, user_id: str, type_: str, topic: str) -> SubscribeResult:
        key = (service, type_)
        answer: asyncio.Future[SubscribeResult] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(key, _Waiting())
        waiting.pairs.append((user_id, topic))
        waiting.answers.append(answer)
        if key not in self._running:
            self._running.add(key)
            task = asyncio.create_task(self._drain(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # A client that goes away cancels its answer, not the group: its pair may still be written.
        return await answer

    def waiting(self, service: str, type_: str) -> int:
        """Requests of (service, type) waiting for its next call."""
        waiting = self._waiting.get((service, type_))
        return len(waiting.pairs) if waiting else 0

    async def _drain(self, key: tuple[str, str]) -> None:
        """Run the calls of ``key`` one after the other until nobody waits."""
        drain = self._new_drain()
        try:
            while waiting := self._waiting.pop(key, None):
                if len(waiting.pairs) > MAX_GROUP:
                    rest = _Waiting(waiting.pairs[MAX_GROUP:], waiting.answers[MAX_GROUP:])
                    self._waiting[key] = rest
                    waiting = _Waiting(waiting.pairs[:MAX_GROUP], waiting.answers[:MAX_GROUP])
                SUBSCRIBE_GROUP_SIZE.observe(len(waiting.pairs))
                try:
                    results = await to_thread.run_sync(drain.call, key[0], key[1], waiting.pairs)
                    if len(results) != len(waiting.pairs):  # never left waiting: every request is answered
                        raise RuntimeError(f"{len(results)} results for {len(waiting.pairs)} subscribes")
                except Exception as exc:  # the group's failure is each request's (the API maps it)
                    for answer in waiting.answers:
                        if not answer.done():
                            answer.set_exception(exc)
                    continue
                for answer, result in zip(waiting.answers, results, strict=True):
                    if answer.done():  # cancelled: its client went away
                        continue
                    if result is None:
                        answer.set_exception(NotFound("user not found"))
                    else:
                        answer.set_result(result)
        finally:
            # Free first: a request arriving while the connection goes back starts a drain of its own.
            self._running.discard(key)
            await to_thread.run_sync(drain.close)
