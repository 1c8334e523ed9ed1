"""notee.api.subscribe_groups: concurrent single topic subscribes of a (service, type) go in one call.

The grouping itself is tested with a call whose progress the test controls (a lone request goes at
once; requests arriving during a call go together in the next; each gets its own answer, its own
404, or the group's error; a cancelled request cancels nobody else's). Then through the HTTP API
against the real stores: requests held behind a MySQL row lock form one group, and each still gets
the answer it would have had alone; a drain's consecutive calls share its MySQL connection, each
call's locks ending with it, and a failed call gives the connection back.
Here, the rules that need no server; tests/integration/test_subscribe_groups.py has the rest.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from notee.api.subscribe_groups import SubscribeGroups
from notee.core.errors import NotFound
from notee.domain.subscription_rows import SubscribeResult
from tests.support.waiting import until


class HeldCall:
    """The drains' calls, recorded, each waiting for the test's go-ahead before answering
    (``SubscribeGroups(lambda: held)``: every drain calls this one)."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[list[tuple[str, str, str, str]]] = []
        self.entered = threading.Semaphore(0)
        self.go = threading.Semaphore(0)
        self.fail = fail

    def call(self, service: str, type_: str, pairs: Sequence[tuple[str, str]]) -> list[SubscribeResult | None]:
        self.calls.append([(service, type_, u, t) for u, t in pairs])
        self.entered.release()
        self.go.acquire(timeout=10)
        if self.fail is not None and len(self.calls) > 1:
            raise self.fail
        return [None if u.startswith("unknown") else {"status": "subscribed", "devices": len(t)} for u, t in pairs]

    def close(self) -> None:
        pass


def test_requests_arriving_during_a_call_go_together_in_the_next_each_with_its_answer():
    async def scenario() -> None:
        held = HeldCall()
        groups = SubscribeGroups(lambda: held)
        first = asyncio.create_task(groups.subscribe("S", "u0", "news", "a"))
        await asyncio.to_thread(held.entered.acquire)  # a lone request went at once, alone
        assert held.calls == [[("S", "news", "u0", "a")]]
        later = [asyncio.create_task(groups.subscribe("S", u, "news", t)) for u, t in [("u1", "bb"), ("unknown", "c")]]
        other_type = asyncio.create_task(groups.subscribe("S", "u3", "sport", "dddd"))
        await asyncio.to_thread(held.entered.acquire)  # another type does not wait for this one's call
        assert held.calls[1] == [("S", "sport", "u3", "dddd")]
        held.go.release(2)
        assert await first == {"status": "subscribed", "devices": 1}
        assert await other_type == {"status": "subscribed", "devices": 4}
        await asyncio.to_thread(held.entered.acquire)
        assert held.calls[2] == [("S", "news", "u1", "bb"), ("S", "news", "unknown", "c")]
        held.go.release()
        assert await later[0] == {"status": "subscribed", "devices": 2}
        with pytest.raises(NotFound):  # that request's 404; its group's other request is answered
            await later[1]
        assert len(held.calls) == 3

    asyncio.run(scenario())


def test_the_group_error_reaches_each_request_and_a_cancelled_request_cancels_only_itself():
    async def scenario() -> None:
        held = HeldCall(fail=ConnectionError("cassandra down"))
        groups = SubscribeGroups(lambda: held)
        first = asyncio.create_task(groups.subscribe("S", "u0", "news", "a"))
        await asyncio.to_thread(held.entered.acquire)
        waiting = [asyncio.create_task(groups.subscribe("S", f"u{i}", "news", "a")) for i in (1, 2, 3)]
        await until(lambda: groups.waiting("S", "news") == 3, timeout=5, what="three requests waiting")
        waiting[0].cancel()
        held.go.release(2)
        assert (await first)["status"] == "subscribed"
        for task in waiting[1:]:
            with pytest.raises(ConnectionError):
                await task
        assert waiting[0].cancelled()
        # The type is free again: the next request starts a call of its own.
        held.fail = None
        nxt = asyncio.create_task(groups.subscribe("S", "u4", "news", "a"))
        await asyncio.to_thread(held.entered.acquire)
        held.go.release()
        assert (await nxt)["status"] == "subscribed"

    asyncio.run(scenario())
