"""Which store errors are an outage (passing: back off and retry, never fail the work for good),
and the one place store errors are counted (``notee_store_errors_total{store, kind}``).

A MySQL connection refused, lost or timed out, and Cassandra's unavailable / timeout / no host /
overloaded answers say nothing about the data; any other error (a constraint, a bad statement, a
bug) is not an outage and is counted towards a task's poison limit.

Counting hooks into each driver, so every statement of every process is covered wherever its
error is handled: SQLAlchemy's ``handle_error`` event on the engine (statements and connects; a
pool pre-ping that fails is replaced silently and not counted; a duplicate key is an answer some
callers rely on, not an error) and a Cassandra request listener's errback (and a failed connect).
"""

from __future__ import annotations

from cassandra import CoordinationFailure, OperationTimedOut, RequestExecutionException
from cassandra.cluster import NoHostAvailable, ResponseFuture
from cassandra.cluster import Session as CqlSession
from cassandra.connection import ConnectionException
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage, ServerError
from pymysql import err as pymysql_err
from sqlalchemy import Engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import ExceptionContext

from notee.core import metrics

_CASSANDRA = (
    RequestExecutionException,
    CoordinationFailure,
    OperationTimedOut,
    NoHostAvailable,
    ConnectionException,
    OverloadedErrorMessage,
    IsBootstrappingErrorMessage,
    ServerError,
)
_MYSQL = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError, sa_exc.TimeoutError)


def is_store_outage(exc: BaseException) -> bool:
    """True for an error that means "a store is (briefly) unreachable", not "this work is wrong"."""
    if isinstance(exc, (ConnectionError, TimeoutError, *_CASSANDRA, *_MYSQL)):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated


def count_mysql_error(exc: BaseException, *, disconnect: bool = False) -> None:
    if isinstance(exc, (sa_exc.IntegrityError, pymysql_err.IntegrityError)):
        return  # a duplicate key: the answer idempotent inserts ask for
    outage = disconnect or isinstance(exc, pymysql_err.OperationalError) or is_store_outage(exc)
    metrics.store_error("mysql", outage)


def count_cassandra_error(exc: BaseException) -> None:
    metrics.store_error("cassandra", is_store_outage(exc))


def watch_mysql(engine: Engine) -> None:
    """Count every error of ``engine``'s statements and connects."""

    @event.listens_for(engine, "handle_error")
    def _count(context: ExceptionContext) -> None:
        if not context.is_pre_ping:
            count_mysql_error(
                context.sqlalchemy_exception or context.original_exception, disconnect=context.is_disconnect
            )


def watch_cassandra(session: CqlSession) -> None:
    """Count every request of ``session`` that ends in an error (after the driver's own retries)."""

    def on_request(future: ResponseFuture) -> None:
        future.add_errback(count_cassandra_error)

    session.add_request_init_listener(on_request)
