"""Per-tenant rate limits (issue 15, item 2): set by the admin per service and class, 429 with
Retry-After in the error format, one bucket per (service, class) in MySQL shared by every API process.

Here, the rules that need no server; tests/integration/test_rate_limits.py has the rest."""

from __future__ import annotations

import pytest

from notee.api.edge import rate_class
from notee.domain import ratelimit


@pytest.mark.parametrize(
    "method,path,klass",
    [
        ("POST", "/v1/topics/news/sports/publish", "publish"),
        ("POST", "/v1/publish/news", "publish"),
        ("POST", "/v1/publish/news/preview", "read"),  # a preview writes and sends nothing
        ("POST", "/v1/topics/news/sports/publish/preview", "read"),
        ("POST", "/v1/users/0b5c2f7e-0000-4000-8000-000000000000/send", "send"),
        ("PUT", "/v1/users/0b5c2f7e-0000-4000-8000-000000000000/subscriptions/topic/news/sports", "write"),
        ("POST", "/v1/topics/news/sports/subscribers", "write"),
        ("DELETE", "/v1/users/0b5c2f7e-0000-4000-8000-000000000000/subscriptions/cycle/remind", "write"),
        ("PUT", "/v1/users/someone", "write"),
        ("PUT", "/v1/templates/TOPIC/news", "write"),
        ("GET", "/v1/templates", "read"),
        ("GET", "/v1/jobs/0b5c2f7e-0000-4000-8000-000000000000", "read"),
        ("PUT", "/v1/admin/services/X/rate-limits/read", None),
        ("GET", "/healthz", None),
    ],
)
def test_rate_class_of_each_route(method, path, klass):
    assert rate_class(method, path) == klass


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_allowance_takes_ahead_only_under_load_and_drops_what_it_does_not_use():
    clock = _Clock()
    allowance = ratelimit.Allowance(clock)
    hold, window = ratelimit.Allowance.HOLD_S, ratelimit.Allowance.WINDOW_S
    # a few requests a second: every one asks the bucket for its own token only
    for _ in range(3):
        assert allowance.take("S", "write") is False
        assert allowance.ahead_for("S", "write") == 0
        clock.now += 0.3
    # 400 a second for a window: the next UPDATE takes what 400/s needs in HOLD_S
    for _ in range(int(400 * window)):
        assert allowance.take("S", "write") is False
        clock.now += 1 / 400
    assert allowance.take("S", "write") is False
    assert allowance.ahead_for("S", "write") == 0  # not before the limit was read
    assert allowance.needs_limit("S", "write")
    allowance.learn("S", "write", 1000.0, 5000.0)
    assert not allowance.needs_limit("S", "write")
    wanted = allowance.ahead_for("S", "write")
    assert 15 <= wanted <= int(400 * hold) == 20  # about 400/s over the last whole window
    allowance.keep("S", "write", wanted, wanted=wanted)
    assert [allowance.take("S", "write") for _ in range(wanted + 1)] == [True] * wanted + [False]  # no more
    assert allowance.take("S", "read") is False and allowance.take("T", "write") is False  # per service and class
    # tokens not used within HOLD_S are dropped, never used later
    allowance.keep("S", "write", 5, wanted=20)
    clock.now += hold
    assert allowance.take("S", "write") is False
    # a take-ahead that did not fit (near the limit): one token at a time for TIGHT_S
    allowance.keep("S", "write", 0, wanted=20)
    assert allowance.ahead_for("S", "write") == 0
    clock.now += ratelimit.Allowance.TIGHT_S
    assert allowance.ahead_for("S", "write") > 0
    # a small limit caps a take: what it refills in HOLD_S and an eighth of its burst (one is the request's)
    allowance.learn("S", "write", 100.0, 40.0)
    assert allowance.ahead_for("S", "write") == min(100 * hold, 40 / 8) - 1 == 4
    clock.now += ratelimit.Allowance.LIMIT_TTL_S  # read again every LIMIT_TTL_S
    assert allowance.needs_limit("S", "write") and allowance.ahead_for("S", "write") == 0
    # a changed limit drops what the process holds for the service
    allowance.keep("S", "write", 3, wanted=3)
    allowance.forget("S")
    assert allowance.take("S", "write") is False


def _busy_allowance() -> ratelimit.Allowance:
    """An allowance that has seen (S, write) at 400 requests a second, with its limit read."""
    clock = _Clock()
    allowance = ratelimit.Allowance(clock)
    for _ in range(int(400 * ratelimit.Allowance.WINDOW_S) + 1):
        allowance.take("S", "write")
        clock.now += 1 / 400
    allowance.learn("S", "write", 1000.0, 5000.0)
    assert allowance.takes_ahead("S", "write")
    return allowance


def _run_misses(allowance: ratelimit.Allowance, requests: int, kept: int) -> tuple[list[str], int]:
    """``requests`` requests of (S, write) that found no token, at once; the first bucket call blocks
    until all of them are waiting or asking, then keeps ``kept`` tokens. The services answered, and
    how many bucket calls were made."""
    import asyncio
    import threading

    from notee.api.take_ahead import TakeAheads

    calls: list[int] = []
    release = threading.Event()

    def ask() -> str:
        calls.append(1)
        if len(calls) == 1:
            assert release.wait(10)
            allowance.keep("S", "write", kept, wanted=kept or 20)
        return "S"

    async def scenario() -> list[str]:
        aheads = TakeAheads()
        assert not any(allowance.take("S", "write") for _ in range(requests))  # as the edge's first try
        tasks = [asyncio.create_task(aheads.admitted(allowance, "S", "write", ask)) for _ in range(requests)]
        for _ in range(3):  # every task reaches its wait (or its own hop) in the loop's next steps
            await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(*tasks)

    return asyncio.run(scenario()), len(calls)


def test_requests_that_run_out_during_a_take_ahead_wait_for_it_and_are_admitted_from_its_tokens():
    answered, calls = _run_misses(_busy_allowance(), 8, kept=20)
    assert answered == ["S"] * 8
    assert calls == 1  # one UPDATE for the eight: the others were admitted from its tokens


def test_a_take_ahead_that_leaves_no_token_sends_its_waiters_to_the_bucket():
    answered, calls = _run_misses(_busy_allowance(), 4, kept=0)  # the tenant is near its limit
    assert answered == ["S"] * 4
    assert calls == 4


def test_requests_with_no_take_ahead_expected_ask_the_bucket_side_by_side():
    """A tenant at a few requests a second (or at its limit) is judged request by request, and no
    request waits for another's: three concurrent asks meet at a barrier."""
    import asyncio
    import threading

    from notee.api.take_ahead import TakeAheads

    allowance = ratelimit.Allowance(_Clock())
    assert not allowance.takes_ahead("S", "write")
    barrier = threading.Barrier(3, timeout=10)

    def ask() -> str:
        barrier.wait()  # BrokenBarrierError if the asks ran one after the other
        return "S"

    async def scenario() -> list[str]:
        aheads = TakeAheads()
        return await asyncio.gather(*(aheads.admitted(allowance, "S", "write", ask) for _ in range(3)))

    assert asyncio.run(scenario()) == ["S"] * 3


def test_a_refill_is_due_at_half_a_take_ahead_and_each_take_keeps_its_own_deadline():
    """A busy process takes its next tokens while half of a take-ahead is left (``refill_due``), and
    a refill's tokens never keep older ones past their HOLD_S: each take is dropped on its own."""
    clock = _Clock()
    allowance = ratelimit.Allowance(clock)
    for _ in range(int(400 * ratelimit.Allowance.WINDOW_S) + 1):  # 400 a second for a window
        allowance.take("S", "write")
        clock.now += 1 / 400
    assert not allowance.refill_due("S", "write")  # the limit not read yet: a request's own take reads it
    allowance.learn("S", "write", 1000.0, 5000.0)
    size = allowance.refill_size("S", "write")
    assert size == allowance.ahead_for("S", "write") + 1 == 20  # what a request's take-ahead takes, with its own
    assert allowance.refill_due("S", "write")  # nothing held
    allowance.keep("S", "write", size, wanted=size)
    used = 0
    while not allowance.refill_due("S", "write"):
        assert allowance.take("S", "write")
        used += 1
    assert size // 2 - 1 <= size - used <= size // 2  # about half left
    clock.now += ratelimit.Allowance.HOLD_S / 2
    allowance.keep("S", "write", 7, wanted=7)  # the refill's tokens, beside the ~10 still held
    clock.now += ratelimit.Allowance.HOLD_S / 2  # the first take's are dropped now, the refill's are not
    assert [allowance.take("S", "write") for _ in range(8)] == [True] * 7 + [False]
    # the limit read long ago: a refill is still due (``refill_allowance`` reads it again first)
    clock.now += ratelimit.Allowance.LIMIT_TTL_S
    assert allowance.refill_due("S", "write") and allowance.needs_limit("S", "write")
    # a tenant near its limit (a take-ahead refused): no refill, one token per request
    allowance.keep("S", "write", 0, wanted=20)
    assert not allowance.refill_due("S", "write") and allowance.refill_size("S", "write") == 0


def test_a_refill_runs_once_at_a_time_and_requests_that_run_out_wait_for_its_tokens():
    import asyncio
    import threading

    from notee.api.take_ahead import TakeAheads

    allowance = _busy_allowance()
    runs: list[int] = []
    asks: list[int] = []
    release = threading.Event()

    def run() -> None:
        runs.append(1)
        assert release.wait(10)
        allowance.keep("S", "write", 20, wanted=20)

    def ask() -> str:
        asks.append(1)
        return "S"

    async def scenario() -> list[str]:
        aheads = TakeAheads()
        aheads.refill("S", "write", run)
        aheads.refill("S", "write", run)  # one in progress already: not started again
        assert not allowance.take("S", "write")  # nothing held yet: these requests wait for the refill
        tasks = [asyncio.create_task(aheads.admitted(allowance, "S", "write", ask)) for _ in range(5)]
        for _ in range(3):
            await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(*tasks)

    assert asyncio.run(scenario()) == ["S"] * 5
    assert runs == [1] and asks == []  # one UPDATE, none of the requests asked the bucket


def test_a_failed_refill_answers_nobody_and_its_waiters_ask_the_bucket(caplog):
    import asyncio

    from notee.api.take_ahead import TakeAheads

    allowance = _busy_allowance()
    asks: list[int] = []

    def run() -> None:
        raise ConnectionError("MySQL went away")

    def ask() -> str:
        asks.append(1)
        return "S"

    async def scenario() -> list[str]:
        aheads = TakeAheads()
        aheads.refill("S", "write", run)
        return await asyncio.gather(*(aheads.admitted(allowance, "S", "write", ask) for _ in range(3)))

    assert asyncio.run(scenario()) == ["S"] * 3
    assert len(asks) == 3  # each asked the bucket itself after the refill failed
    assert "a refill of write tokens failed (ConnectionError)" in caplog.text
