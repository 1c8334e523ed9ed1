"""Hostile clients against one ``notee api``: slow-header connections from one address, and what
another client's requests cost meanwhile (docs/API.md "Limits at the edge", issue 31).

The clients are reusable (a chaos run's hostile phase drives them too):

* ``SlowHeaders``: holds up to ``connections`` connections from one source address, each sending a
  request line and then one header line every ``interval_s``, never ending the head (slowloris);
  a connection the server closes is opened again at its next tick. It counts what the server did:
  accepted, answered 429 (over the per-address cap), 408 (head deadline), 503, or closed silently;
* ``probe``: ``n`` sequential ``GET /livez`` from another source address, each on a new connection
  (the accept is part of what an attack can slow down), their latencies in ms and the statuses.

``python -m bench.hostile [--connections 2000] [--n 400]`` starts a ``notee api`` (the bench's
``ApiProcess``) with the guards on (this checkout's defaults) and then with them off (no per-address
cap, a 300 s head deadline: the server as issue 31 found it), and prints the probe's p50/p99 without
and with the attack for each. Loopback addresses (127.0.0.2, 127.0.0.3) all reach a server bound on
127.0.0.1, so one machine plays both clients. Not part of ``make bench``: a tool, run alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench import env
from bench.subscribe import ApiProcess

ATTACKER = "127.0.0.2"
BYSTANDER = "127.0.0.3"


@dataclass
class SlowStats:
    """What the server did to the slow connections (counts since the start)."""

    opened: int = 0  # connections the kernel accepted (TCP connect succeeded)
    open_now: int = 0  # connections open at this moment, still waiting for the server
    max_open: int = 0
    ended: Counter[str] = field(default_factory=Counter)  # "429", "408", "503", "closed", "error"
    lifetimes_s: list[float] = field(default_factory=list)  # of connections the server ended


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    source: str  # the client's own address (127.0.0.x on one machine)


class SlowHeaders:
    """See the module docstring. ``run`` until ``stop`` is set; ``stats`` meanwhile."""

    def __init__(self, target: Target, connections: int, interval_s: float = 2.0) -> None:
        self.target = target
        self.connections = connections
        self.interval_s = interval_s
        self.stats = SlowStats()

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._one(i, stop) for i in range(self.connections)))

    async def _one(self, i: int, stop: asyncio.Event) -> None:
        await asyncio.sleep(i * 0.001)  # open them over ~2 s, as a client would, not in one burst
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await self._hold(stop)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)  # the next tick opens it again

    async def _hold(self, stop: asyncio.Event) -> None:
        t = self.target
        try:
            reader, writer = await asyncio.open_connection(t.host, t.port, local_addr=(t.source, 0))
        except OSError:
            self.stats.ended["connect_error"] += 1
            return
        s = self.stats
        s.opened += 1
        s.open_now += 1
        s.max_open = max(s.max_open, s.open_now)
        began = time.monotonic()
        try:
            writer.write(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
            n = 0
            while not stop.is_set():
                await writer.drain()
                read = asyncio.ensure_future(reader.read(4096))
                done, _ = await asyncio.wait({read}, timeout=self.interval_s)
                if done:
                    data = read.result()
                    status = data[9:12].decode("latin-1") if data.startswith(b"HTTP/1.1 ") else "closed"
                    s.ended[status] += 1
                    s.lifetimes_s.append(time.monotonic() - began)
                    return
                read.cancel()
                writer.write(b"X-Slow-%d: x\r\n" % n)
                n += 1
        except OSError:
            s.ended["error"] += 1
            s.lifetimes_s.append(time.monotonic() - began)
        finally:
            s.open_now -= 1
            writer.close()


async def probe(target: Target, n: int, pace_s: float = 0.05) -> tuple[list[float], Counter[str]]:
    """``n`` sequential GET /livez, one every ``pace_s`` at most, each on a new connection from
    ``target.source``: latencies in ms (of the answered ones) and the statuses."""
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    for _ in range(n):
        await asyncio.sleep(pace_s)
        began = time.perf_counter()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(target.host, target.port, local_addr=(target.source, 0)), 10
            )
            writer.write(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
        except (TimeoutError, OSError) as exc:
            statuses[type(exc).__name__] += 1
            continue
        latencies.append((time.perf_counter() - began) * 1000)
        statuses[data[9:12].decode("latin-1") or "closed"] += 1
    return latencies, statuses


def percentiles(latencies: list[float]) -> dict[str, float]:
    if len(latencies) < 2:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    q = statistics.quantiles(latencies, n=100)
    over = sum(1 for x in latencies if x > 500)
    return {
        "p50_ms": round(q[49], 2),
        "p99_ms": round(q[98], 2),
        "max_ms": round(max(latencies), 1),
        "over_500ms": over,
    }


def _attack(target: Target, connections: int, stop: Any, out: Any) -> None:
    """In a process of its own, so the probe's latency is not the attacker's event loop: slow
    connections until ``stop`` (a multiprocessing Event) is set; then the stats into ``out``."""

    async def run() -> SlowStats:
        slow = SlowHeaders(target, connections)
        done = asyncio.Event()
        task = asyncio.create_task(slow.run(done))
        while not stop.is_set():
            await asyncio.sleep(0.2)
            out.put(("open_now", slow.stats.open_now))
        done.set()
        await task
        return slow.stats

    stats = asyncio.run(run())
    lifetimes = sorted(stats.lifetimes_s)
    out.put(
        (
            "stats",
            {
                "opened": stats.opened,
                "max_open": stats.max_open,
                "ended_by_server": dict(stats.ended),
                "median_lifetime_s": round(statistics.median(lifetimes), 2) if lifetimes else None,
            },
        )
    )


def _phases(port: int, connections: int, n: int, settle_s: float) -> dict[str, object]:
    bystander = Target("127.0.0.1", port, BYSTANDER)
    base, base_statuses = asyncio.run(probe(bystander, n))
    ctx = multiprocessing.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    attacker = ctx.Process(target=_attack, args=(Target("127.0.0.1", port, ATTACKER), connections, stop, out))
    attacker.start()
    time.sleep(settle_s)  # every slow connection opened (or refused) at least once
    during, during_statuses = asyncio.run(probe(bystander, n))
    stop.set()
    open_while_probing: list[int] = []
    while True:
        kind, value = out.get(timeout=120)
        if kind == "stats":
            break
        open_while_probing.append(value)
    attacker.join(30)
    return {
        "without_attack": percentiles(base) | {"statuses": dict(base_statuses)},
        "with_attack": percentiles(during) | {"statuses": dict(during_statuses)},
        "slow_connections": value | {"open_at_the_end": open_while_probing[-1] if open_while_probing else None},
    }


def measure(guarded: bool, connections: int, n: int, settle_s: float) -> dict[str, object]:
    """One API process, with the connection guards at their defaults or off."""
    saved = dict(os.environ)
    if not guarded:
        os.environ.update({"NOTEE_API_MAX_CONNECTIONS_PER_ADDRESS": "0", "NOTEE_API_HEAD_TIMEOUT_S": "300"})
    try:
        api = ApiProcess()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        return _phases(api.port, connections, n, settle_s)
    finally:
        api.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__)
    parser.add_argument("--connections", type=int, default=2000, help="slow-header connections from one address")
    parser.add_argument("--n", type=int, default=400, help="probe requests per phase")
    parser.add_argument("--settle-s", type=float, default=6.0, help="attack time before the probe starts")
    parser.add_argument("--only", choices=("guarded", "unguarded"), help="one of the two processes")
    args = parser.parse_args(argv)
    env.use_bench_stores()
    out: dict[str, object] = {}
    for guarded in (True, False):
        name = "guarded" if guarded else "unguarded"
        if args.only in (None, name):
            out[name] = measure(guarded, args.connections, args.n, args.settle_s)
            print(name, json.dumps(out[name]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
