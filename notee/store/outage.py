"""Which store errors are an outage (passing: back off and retry, never fail the work for good).

A MySQL connection refused, lost or timed out, and Cassandra's unavailable / timeout / no host /
overloaded answers say nothing about the data; any other error (a constraint, a bad statement, a
bug) is not an outage and is counted towards a task's poison limit.
"""

from __future__ import annotations

from cassandra import CoordinationFailure, OperationTimedOut, RequestExecutionException
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage, ServerError
from sqlalchemy import exc as sa_exc

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
