"""The performance detours, each measured with and without in one run (issue 29; docs/BENCHMARKS.md
"Performance detours"): code of Notee's that reaches into a library's internals, kept only where it pays.

    flock /tmp/notee-bench.lock .venv/bin/python -m bench.detours [--parts driver api] [--rounds 5]

``driver`` (in this process, against the bench stores; the two sides alternate, the order swapped
every round; CPU is ``time.process_time()``, every thread of the process):

* ``binder``: a bulk subscribe's rows (1,000 one-device users, ``topic_subscription_rows`` with the
  user-level row) packed into logged batches by ``Statements.write_together``, nothing sent (its
  session replaced by a list): with ``RowBinder`` (cassandra-driver's private
  ``BatchStatement._statements_and_parameters``) and without (``BatchStatement.add`` for every row).
  µs of CPU per row.
* ``page_timer``: the slot walk (``recipients.stream_recipients`` over ``slot_walk``'s seeded rows):
  with ``pages()`` dropping ``response_future._timer`` and without (``pages()`` minus that line).
  µs of CPU per row, and the garbage collections counted (``gc.callbacks``).
* ``driver_sql``: the topic subscribe's two MySQL statements (``subscription_sql.lock_users_zones``
  and ``subscribe_context``, 8 users a call as a group commit does, one connection, each call's
  transaction rolled back as a drain does): with ``_driver_rows`` (the DBAPI cursor, SQLAlchemy's
  private ``Connection._handle_dbapi_exception`` for errors; ``end_driver_transaction``) and without
  (``Connection.exec_driver_sql``; ``Connection.rollback``). µs of CPU per call.
* ``hpack``: the response header blocks of an FCM answer, decoded by jh2's native decoder
  (``jh2._hazmat.Decoder``, what ``http2_wire.HeaderDecoder`` uses) and by the pure-Python
  ``jh2.hpack.Decoder`` jh2 exports (hpack's codec, vendored). µs of CPU per block.

``api`` (``bench.api_cpu``'s harness: ``notee api`` processes, API process CPU per request from
psutil, 16 keep-alive clients): this checkout and copies of its ``notee`` package with one detour
switched off each (``API_VARIANTS``: a text replacement that must match exactly once), all serving
at once, a batch of requests of each kind sent to each in turn, the order rotated every round.
Kinds ``floor`` (the subscribe route's 422: the HTTP stack and FastAPI without a route body) and
``subscribe``.

Medians over the rounds, with min-max. Not part of ``make bench``: the table in docs/BENCHMARKS.md
is filled from a run of this (the HTTP/2 client's figures come from ``bench.engines``).
"""

from __future__ import annotations

import argparse
import copy
import gc
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import api_cpu, env, slot_walk
from bench.subscribe import TYPE
from bench.tenant import bulk_users, make_template, make_tenant

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------ results


class Sides:
    """Per-round figures of the two sides of each measure, printed as medians with min-max."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, list[float]]] = {}

    def add(self, measure: str, side: str, value: float) -> None:
        self.rows.setdefault(measure, {}).setdefault(side, []).append(value)

    def table(self) -> str:
        lines = []
        for measure, sides in self.rows.items():
            parts = [
                f"{side} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}, n={len(v)})"
                for side, v in sides.items()
            ]
            lines.append(f"  {measure}: " + "; ".join(parts))
        return "\n".join(lines)


def alternate(rounds: int, sides: list[Callable[[], None]]) -> None:
    """Every side once per round, the order rotated each round (no side always runs first)."""
    for r in range(rounds):
        k = r % len(sides)
        for side in sides[k:] + sides[:k]:
            side()


# ------------------------------------------------------------------------------ cassandra-driver


class _Unsent:
    """A session whose ``execute_async`` keeps the batch: ``write_together`` packs, nothing is sent."""

    def __init__(self) -> None:
        self.batches: list[Any] = []

    def execute_async(self, batch: Any, *args: Any) -> None:
        self.batches.append(batch)


class _DriverAdd:
    """``RowBinder``'s place taken by the driver's own ``BatchStatement.add`` for every row."""

    @staticmethod
    def add(batch: Any, stmt: Any, params: Any) -> None:
        batch.add(stmt, params)


def subscription_units(statements: Any, users: int) -> list[list[Any]]:
    from notee.store.cql.rows import SubscriptionRef

    units = []
    for i in range(1, users + 1):
        ref = SubscriptionRef("BDETOUR", f"user-{i:06d}", TYPE, "k-detour", "detour-topic", 1_700_000_000_000)
        device = [(i, f"token-{i:06d}-" + "x" * 150, "AOS")]  # an FCM token's length
        units.append(statements.topic_subscription_rows(ref, device, with_user_level=True, zone=""))
    return units


def measure_binder(runtime: Any, sides: Sides, rounds: int, users: int = 1000) -> None:
    units = subscription_units(runtime.statements, users)
    rows = sum(len(u) for u in units)
    with_binder, without = copy.copy(runtime.statements), copy.copy(runtime.statements)  # sessions replaced below
    without._binder = _DriverAdd()
    written: dict[str, list[Any]] = {}
    for st in (with_binder, without):  # warm-up: the binder's serializers, the driver's caches
        st.session = _Unsent()
        st.write_together(units)

    def side(name: str, st: Any) -> Callable[[], None]:
        def run() -> None:
            st.session = sink = _Unsent()
            started = time.process_time()
            st.write_together(units)
            sides.add("binder: µs CPU per row", name, (time.process_time() - started) / rows * 1e6)
            written[name] = [b._statements_and_parameters for b in sink.batches]

        return run

    alternate(rounds, [side("with RowBinder", with_binder), side("without (BatchStatement.add)", without)])
    ours, theirs = written.values()
    assert ours == theirs, "RowBinder's batches differ from the driver's"


def pages_keeping_timer(session: Any, statement: Any, paging_state: Any = None, execution_profile: Any = None) -> Any:
    """``notee.store.cassandra.pages`` without its one detour: each page's request timer is kept."""
    while True:
        result = session.execute(statement, paging_state=paging_state, execution_profile=execution_profile)
        yield result
        paging_state = result.paging_state
        if paging_state is None:
            return


class Collections:
    """The garbage collections while it is entered (``gc.callbacks``): how many of each generation,
    and the seconds spent in them (the collector runs on whichever thread allocated: here the
    driver's event loop, mostly)."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.counts[info["generation"]] += 1
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started

    def __enter__(self) -> Collections:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)


def measure_page_timer(runtime: Any, sides: Sides, rounds: int, rows: int = 60_000) -> None:
    from notee.store.cql import recipients

    key, topic, last_slot = slot_walk.seed(runtime, rows)
    fetch = runtime.settings.fanout_fetch_size
    dropping = recipients.pages

    def side(name: str, pages: Any) -> Callable[[], None]:
        def run() -> None:
            recipients.pages = pages
            try:
                with Collections() as collections:
                    started = time.process_time()
                    n = slot_walk.notee_walk(runtime.statements, key, topic, last_slot, fetch)
                    cpu = time.process_time() - started
            finally:
                recipients.pages = dropping
            assert n == rows, f"walked {n} rows of {rows}"
            per_1000_pages = 1000 / (n / fetch)
            sides.add("page_timer: µs CPU per row", name, cpu / n * 1e6)
            sides.add("page_timer: µs in the collector per row", name, collections.seconds / n * 1e6)
            sides.add("page_timer: collections per 1,000 pages", name, sum(collections.counts) * per_1000_pages)
            sides.add("page_timer: of them generation 2", name, collections.counts[2] * per_1000_pages)

        return run

    slot_walk.notee_walk(runtime.statements, key, topic, last_slot, fetch)  # warm-up
    alternate(rounds, [side("with _timer = None", dropping), side("without (timer kept)", pages_keeping_timer)])


# ------------------------------------------------------------------------------ SQLAlchemy


def _exec_driver_sql_rows(db: Any, sql: str, params: dict[str, Any]) -> tuple[Any, ...]:
    """``subscription_sql._driver_rows``'s documented counterpart."""
    from notee.store import subscription_sql

    return tuple(subscription_sql._connection(db).exec_driver_sql(sql, params).all())


def measure_driver_sql(runtime: Any, sides: Sides, rounds: int, calls: int = 500, group: int = 8) -> None:
    from notee.store import subscription_sql

    tenant = make_tenant(runtime)
    make_template(runtime, tenant.service, "TOPIC", TYPE)
    users = [uid for uid, _ in bulk_users(runtime, tenant.service, 100 * group)]
    groups = [users[(i % 100) * group : (i % 100 + 1) * group] for i in range(calls)]
    direct = subscription_sql._driver_rows

    def side(name: str, rows_of: Any, end: Callable[[Any], None], into: Sides) -> Callable[[], None]:
        def run() -> None:
            subscription_sql._driver_rows = rows_of
            try:
                with runtime.engine.connect() as conn:
                    started = time.process_time()
                    for ids in groups:
                        subscription_sql.lock_users_zones(conn, tenant.service, ids, exclusive=True)
                        subscription_sql.subscribe_context(conn, tenant.service, TYPE, ids)
                        end(conn)
                    cpu = time.process_time() - started
            finally:
                subscription_sql._driver_rows = direct
            into.add("driver_sql: µs CPU per call (lock, context read, rollback)", name, cpu / len(groups) * 1e6)

        return run

    def both(into: Sides) -> list[Callable[[], None]]:
        return [
            side("with _driver_rows", direct, subscription_sql.end_driver_transaction, into),
            side("without (exec_driver_sql)", _exec_driver_sql_rows, lambda conn: conn.rollback(), into),
        ]

    alternate(1, both(Sides()))  # warm-up: pools, statement caches
    alternate(rounds, both(sides))


# ------------------------------------------------------------------------------ HPACK


def fcm_answer_blocks(n: int) -> list[bytes]:
    """Header blocks of n FCM 200 answers as one server connection sends them (indexed after the first)."""
    from jh2.hpack import Encoder

    encoder = Encoder()
    return [
        encoder.encode(
            [
                (b":status", b"200"),
                (b"content-type", b"application/json; charset=UTF-8"),
                (b"vary", b"Origin, X-Origin, Referer"),
                (b"date", b"Fri, 04 Dec 2026 21:%02d:%02d GMT" % divmod(i // 2000, 60)),
                (b"content-length", b"%d" % (70 + i % 3)),
            ],
            huffman=True,
        )
        for i in range(n)
    ]


def _raw_decode(decoder: Any) -> Callable[[bytes], Any]:
    return lambda block: decoder.decode(block, raw=True)


def measure_hpack(sides: Sides, rounds: int, n: int = 20_000) -> None:
    from jh2._hazmat import Decoder as NativeDecoder
    from jh2.hpack import Decoder as PythonDecoder

    blocks = fcm_answer_blocks(n)

    def side(name: str, decode_with: Callable[[], Callable[[bytes], Any]]) -> Callable[[], None]:
        def run() -> None:
            decode = decode_with()
            started = time.process_time()
            for block in blocks:
                decode(block)
            sides.add("hpack: µs CPU per response block", name, (time.process_time() - started) / n * 1e6)

        return run

    alternate(
        rounds,
        [
            side("with jh2._hazmat.Decoder", lambda: NativeDecoder().decode),
            side("without (jh2.hpack.Decoder)", lambda: _raw_decode(PythonDecoder())),
        ],
    )


DRIVER_MEASURES = ("hpack", "binder", "driver_sql", "page_timer")


def driver_part(rounds: int, measures: list[str], walk_rows: int) -> Sides:
    from notee.core.settings import Settings
    from notee.store.runtime import Runtime

    env.migrate(Settings())
    runtime = Runtime(Settings())
    sides = Sides()
    try:
        if "hpack" in measures:
            measure_hpack(sides, rounds)
        if "binder" in measures:
            measure_binder(runtime, sides, rounds)
        if "driver_sql" in measures:
            measure_driver_sql(runtime, sides, rounds)
        if "page_timer" in measures:
            measure_page_timer(runtime, sides, rounds, walk_rows)
    finally:
        runtime.close()
    return sides


# ------------------------------------------------------------------------------ the API process

# (file under the tree, text replaced, replacement): each copy switches one detour off.
API_VARIANTS: dict[str, list[tuple[str, str, str]]] = {
    # the route alone answers a topic subscribe
    "no-shortcut": [
        (
            "notee/api/app.py",
            "        app.add_middleware(subscriptions.TopicSubscribeShortcut)\n",
            "        pass  # bench.detours: the shortcut off\n",
        )
    ],
    # the subclass keeps its head bound, uvicorn writes head and body apart
    "no-coalescing": [
        (
            "notee/api/http1.py",
            "super().connection_made(CoalescingTransport(transport, self.loop))",
            "super().connection_made(transport)",
        )
    ],
    # uvicorn's own httptools protocol: no head bound (not shippable), plain-text errors
    "stock-httptools": [
        (
            "notee/api/server.py",
            "http=HttpToolsProtocol.with_head_limit(settings.api_max_header_bytes),",
            'http="httptools",',
        )
    ],
    # what keeps the head bound without the subclass: uvicorn's h11 protocol (the API's before issue 19)
    "h11": [
        (
            "notee/api/server.py",
            "http=HttpToolsProtocol.with_head_limit(settings.api_max_header_bytes),",
            'http="h11", h11_max_incomplete_event_size=settings.api_max_header_bytes,',
        )
    ],
}


def export_variant(where: Path, name: str) -> str:
    """A copy of this checkout's ``notee`` package with ``API_VARIANTS[name]`` applied."""
    tree = where / name
    shutil.copytree(ROOT / "notee", tree / "notee", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, old, new in API_VARIANTS[name]:
        path = tree / rel
        text = path.read_text()
        if text.count(old) != 1:
            raise AssertionError(f"{name}: {rel} no longer holds {old!r} exactly once: update bench/detours.py")
        path.write_text(text.replace(old, new))
    return str(tree)


def api_part(rounds: int, n: int, variants: list[str], kinds: list[str], concurrency: int = 16) -> Sides:
    """Every variant's API process started at once, then batches of ``n`` requests of each kind sent
    to each in turn (the order rotated every round): the sides alternate every few seconds."""
    from notee.core.settings import Settings
    from notee.store.runtime import Runtime

    env.migrate(Settings())
    runtime = Runtime(Settings())
    sides = Sides()
    where = Path(tempfile.mkdtemp(prefix="notee-detours-"))
    apis: dict[str, Any] = {}
    try:
        trees: dict[str, str | None] = {"this checkout": None}
        trees.update({name: export_variant(where, name) for name in variants})
        tenant = make_tenant(runtime)
        make_template(runtime, tenant.service, "TOPIC", TYPE)
        # a subscribe batch takes users never subscribed (each user's index rows would grow over the run)
        fresh = len(trees) * rounds if "subscribe" in kinds else 0
        made = [uid for uid, _ in bulk_users(runtime, tenant.service, n * (1 + fresh))]
        users, batches = made[:n], iter([made[i : i + n] for i in range(n, len(made), n)])
        for name, tree in trees.items():
            apis[name] = api = api_cpu.start_api(tree)
            for kind in api_cpu.KINDS:  # warm-up: every code path imported, pools filled, the key cached
                api_cpu.drive(
                    api.port, tenant.api_key, api_cpu.requests_of(kind, users[:200], f"warm-{name}"), concurrency
                )
        names = list(apis)
        for r in range(rounds):
            got: dict[tuple[str, str], float] = {}
            for name in names[r % len(names) :] + names[: r % len(names)]:
                for kind in kinds:
                    who = next(batches) if kind == "subscribe" else users
                    batch = api_cpu.requests_of(kind, who, f"d{r}-{names.index(name)}")
                    before = apis[name].cpu_s()
                    api_cpu.drive(apis[name].port, tenant.api_key, batch, concurrency)
                    got[name, kind] = ms = (apis[name].cpu_s() - before) / n * 1000
                    sides.add(f"api {kind}: ms API CPU per request", name, ms)
            for (name, kind), ms in got.items():  # the same round's pair: what drifts over the run cancels
                if name != names[0]:
                    sides.add(f"api {kind}: variant / this checkout, same round", name, ms / got[names[0], kind])
            print(f"round {r}: " + ", ".join(f"{name} {kind} {ms:.3f}" for (name, kind), ms in got.items()), flush=True)
    finally:
        for api in apis.values():
            api.stop()
        runtime.close()
        shutil.rmtree(where, ignore_errors=True)
    return sides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.detours", description=__doc__)
    parser.add_argument("--parts", nargs="*", choices=("driver", "api"), default=["driver", "api"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--measures", nargs="*", choices=DRIVER_MEASURES, default=list(DRIVER_MEASURES))
    parser.add_argument("--walk-rows", type=int, default=60_000, help="page_timer: rows walked per pass")
    parser.add_argument("--api-rounds", type=int, default=10)
    parser.add_argument("--n", type=int, default=1000, help="API requests per kind, variant and round")
    parser.add_argument("--variants", nargs="*", choices=list(API_VARIANTS), default=list(API_VARIANTS))
    parser.add_argument("--kinds", nargs="*", choices=api_cpu.KINDS, default=["floor", "subscribe"])
    args = parser.parse_args(argv)
    env.use_bench_stores()
    print(f"started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}", flush=True)
    if "driver" in args.parts:
        print(
            "driver (medians over rounds, min-max):\n"
            + driver_part(args.rounds, args.measures, args.walk_rows).table(),
            flush=True,
        )
    if "api" in args.parts:
        sides = api_part(args.api_rounds, args.n, args.variants, args.kinds)
        print(f"api (medians over {args.api_rounds} rounds, {args.n} requests a batch):\n" + sides.table())
    print(f"ended {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
