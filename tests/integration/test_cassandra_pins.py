"""cassandra-driver is pinned exactly because of two performance detours through its private
attributes (docs/BENCHMARKS.md, "Performance detours"):

* ``RowBinder`` (notee/store/cql/binder.py) appends bound rows to ``BatchStatement._statements_and_parameters``
  as ``BatchStatement.add`` does, without ``PreparedStatement.bind``'s per-value work. Its rows are
  compared with the driver's for every statement a subscribe writes by
  tests/integration/test_cql_statements.py::test_rows_bound_by_the_binder_equal_the_drivers.
* ``pages()`` (notee/store/cassandra.py) sets ``response_future._timer = None``: the request's timer
  and its future point at each other (``Timer.callback`` is the future's bound ``_on_timeout``), a
  cycle that only the garbage collector frees, and each page's rows with it. Checked here: the cycle
  is still there (else the detour does nothing and goes), and a page read by ``pages()`` is freed
  without a collection.

Each test fails naming the detour, the pinned and installed versions, and what to re-check.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable

from cassandra.query import BatchStatement, SimpleStatement

from notee.store.cassandra import pages
from tests.support.pins import PAGE_TIMER, ROW_BINDER

QUERY = "SELECT release_version FROM system.local"


def _freed_without_gc(ref: weakref.ref[object], within_s: float) -> bool:
    """Whether ``ref``'s object is gone within ``within_s``, the collector off (the driver's I/O
    thread may hold the request a moment longer after its answer)."""
    deadline = time.monotonic() + within_s
    while ref() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    return ref() is None


def _with_gc_off(check: Callable[[], None]) -> None:
    gc.collect()
    gc.disable()
    try:
        check()
    finally:
        gc.enable()


def test_cassandra_driver_is_pinned_exactly_to_the_installed_version() -> None:
    ROW_BINDER.assert_pinned_to_installed()
    PAGE_TIMER.assert_pinned_to_installed()


def test_a_batch_keeps_its_rows_in_the_list_the_binder_appends_to() -> None:
    batch = BatchStatement()
    rows = getattr(batch, "_statements_and_parameters", None)
    assert isinstance(rows, list) and rows == [], ROW_BINDER.loud(
        f"BatchStatement._statements_and_parameters is {rows!r}"
    )
    batch.add(SimpleStatement("INSERT INTO t (a) VALUES (%s)"), (1,))
    # (what a bound row's entry holds: tests/integration/test_cql_statements.py)
    assert len(batch._statements_and_parameters) == 1, ROW_BINDER.loud(
        f"BatchStatement.add no longer appends there: {batch._statements_and_parameters!r}"
    )


def test_a_requests_timer_and_its_future_still_point_at_each_other(runtime) -> None:
    future = runtime.cql.execute_async(QUERY)
    future.result()
    timer = getattr(future, "_timer", None)
    callback = getattr(timer, "callback", None)
    assert getattr(callback, "__self__", None) is future, PAGE_TIMER.loud(
        f"the request's _timer is {timer!r} with callback {callback!r}, no longer a cycle with its future: "
        "dropping it does nothing now, remove the line from pages()"
    )


def test_a_page_read_by_pages_is_freed_without_the_garbage_collector(runtime) -> None:
    def check() -> None:
        kept = runtime.cql.execute(QUERY)  # the driver's way: the timer kept
        kept_ref = weakref.ref(kept.response_future)
        del kept
        assert not _freed_without_gc(kept_ref, 0.2), PAGE_TIMER.loud(
            "a page whose timer is kept is freed without a collection: the detour no longer pays"
        )
        read = list(pages(runtime.cql, SimpleStatement(QUERY)))
        assert len(read) == 1 and read[0].current_rows
        ref = weakref.ref(read[0].response_future)
        del read
        assert _freed_without_gc(ref, 2.0), PAGE_TIMER.loud(
            "a page read by pages() is still alive after its reader let go"
        )

    _with_gc_off(check)
