"""SQLAlchemy is pinned exactly because of a performance detour: the topic subscribe's MySQL
statements (``subscription_sql.lock_users_zones``, ``subscribe_context``) run on the DBAPI cursor of a
Core connection (``_driver_rows``), not through ``Connection.exec_driver_sql``, and an error takes
SQLAlchemy's own path through its private ``Connection._handle_dbapi_exception``, the method
``exec_driver_sql`` calls (docs/BENCHMARKS.md, "Performance detours"). What that buys only holds
while the private method does what ``exec_driver_sql`` does with an error: the same exception
classes (the API's 503 mapping), the pool's disconnect handling and the engine's ``handle_error``
events (``notee_store_errors_total``). Checked here against ``exec_driver_sql`` itself; each test
fails naming the detour, the pinned and installed versions, and what to re-check.
"""

from __future__ import annotations

import inspect

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Connection, ExceptionContext
from sqlalchemy.exc import DBAPIError

from notee.store import subscription_sql
from tests.support.pins import DRIVER_SQL

BAD = "SELECT no_such_column FROM `user` WHERE service = %(service)s"


def test_sqlalchemy_is_pinned_exactly_to_the_installed_version() -> None:
    DRIVER_SQL.assert_pinned_to_installed()


def test_the_private_error_path_keeps_its_signature() -> None:
    method = getattr(Connection, "_handle_dbapi_exception", None)
    assert method is not None, DRIVER_SQL.loud("Connection._handle_dbapi_exception is gone")
    params = list(inspect.signature(method).parameters)
    expected = ["self", "e", "statement", "parameters", "cursor", "context", "is_sub_exec"]
    assert params == expected, DRIVER_SQL.loud(f"Connection._handle_dbapi_exception now takes {params}")


def _failure(runtime, run) -> tuple[type[BaseException], type[BaseException], int]:
    """The exception ``run(conn)`` raises, its DBAPI original, and the handle_error events it fired."""
    seen: list[ExceptionContext] = []

    def listen(context: ExceptionContext) -> None:
        seen.append(context)

    event.listen(runtime.engine, "handle_error", listen)
    try:
        with runtime.engine.connect() as conn, pytest.raises(DBAPIError) as err:  # BAD fails in MariaDB
            run(conn)
    finally:
        event.remove(runtime.engine, "handle_error", listen)
    return type(err.value), type(getattr(err.value, "orig", None)), len(seen)


def test_a_statement_error_is_raised_as_exec_driver_sql_raises_it(runtime) -> None:
    ours = _failure(runtime, lambda conn: subscription_sql._driver_rows(conn, BAD, {"service": "S"}))
    theirs = _failure(runtime, lambda conn: conn.exec_driver_sql(BAD, {"service": "S"}))
    assert ours == theirs, DRIVER_SQL.loud(
        f"an error through _driver_rows gives (exception, original, handle_error events) {ours}, "
        f"exec_driver_sql gives {theirs}"
    )
    assert theirs[2] == 1 and theirs[0].__module__ == "sqlalchemy.exc"
