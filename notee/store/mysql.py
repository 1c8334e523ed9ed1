"""The MySQL engine and session lifecycle.

One engine per process, built by the app factory / CLI from Settings. Sessions are opened by the
caller (one per request or per job step) and passed to the query functions, which never open their
own. ``retried`` runs a store module's own transaction again after a transient error (a deadlock, a
lock wait timeout, a lost connection): such an error says nothing about the work.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from pymysql import err as pymysql_err
from pymysql.connections import Connection as PyMySQLConnection
from sqlalchemy import CursorResult, Engine, Result, Row, create_engine, event, text
from sqlalchemy.exc import DBAPIError, SAWarning
from sqlalchemy.orm import Session, sessionmaker

from notee.core import metrics
from notee.core.settings import Settings
from notee.store.outage import watch_mysql

AnyRow = Row[*tuple[Any, ...]]  # a result row of any shape, read by column name
T = TypeVar("T")
log = logging.getLogger(__name__)

# MariaDB errors after which the same transaction, run again, can succeed
# (https://mariadb.com/kb/en/mariadb-error-code-reference/): InnoDB rolled back a deadlock's victim
# (1213) or the statement that waited too long for a row lock (1205); the connection went away (2006)
# or was lost during a statement (2013), which rolls back what was not committed, except when it
# was lost during the COMMIT itself: then the transaction may have committed (``retried``'s ``applied``).
TRANSIENT_MYSQL_ERRORS = {1205: "lock_wait_timeout", 1213: "deadlock", 2006: "lost_connection", 2013: "lost_connection"}


def make_engine(settings: Settings, *, pool_size: int | None = None) -> Engine:
    engine = create_engine(
        settings.mysql_url.get_secret_value(),
        pool_size=pool_size or settings.mysql_pool_size,
        max_overflow=settings.mysql_pool_size,
        pool_pre_ping=True,  # a connection MySQL dropped (restart, wait_timeout) is replaced, not used
        pool_recycle=1800,
        pool_timeout=settings.mysql_connect_timeout_s,
        # A failed statement's exception text would otherwise carry its bound values (device
        # tokens, user ids) into every log line and traceback that prints it.
        hide_parameters=True,
        connect_args={
            "connect_timeout": settings.mysql_connect_timeout_s,
            "read_timeout": 30,
            "write_timeout": 30,
            "charset": "utf8mb4",
        },
    )

    @event.listens_for(engine, "connect")
    def _utc(dbapi_conn: PyMySQLConnection, _record: object) -> None:  # timestamps are UTC everywhere (DATA-RULES.md)
        with dbapi_conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: object, _record: object, cargs: list[Any], cparams: dict[str, Any]) -> PyMySQLConnection:
        return SharedTlsContextConnection(*cargs, **cparams)

    watch_mysql(engine)  # notee_store_errors_total{store="mysql"}
    return engine


class SharedTlsContextConnection(PyMySQLConnection):
    """A PyMySQL connection whose "preferred" TLS context (no TLS option given: TLS if the server
    offers it, unverified, PyMySQL's default) is built once per process, not once per connection.

    PyMySQL 1.2 builds that context in every ``Connection.__init__`` (``_create_ssl_ctx({})``:
    ``ssl.create_default_context`` loads the system's CA store), whether or not the server offers
    TLS: ~20 ms of CPU per new connection, against ~0.3 ms for the rest of connecting
    (docs/BENCHMARKS.md, "Round 3, seventh part"), paid by every process start, every pool overflow
    and every recycled connection. The shared context is PyMySQL's own, built by the same method
    with the same argument, and is only read by the connections (``wrap_socket``). A connection with
    TLS options of its own (``ssl_ca``, ``ssl_cert`` ... in the URL) gets PyMySQL's per-connection
    context, as before. A performance detour (a private method of PyMySQL, pinned exactly:
    tests/integration/test_pymysql_pins.py)."""

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if not isinstance(sslp, dict) or sslp:
            ctx: ssl.SSLContext = super()._create_ssl_ctx(sslp)  # type: ignore[misc]
            return ctx
        return _preferred_context(lambda: super(SharedTlsContextConnection, self)._create_ssl_ctx({}))  # type: ignore[misc]


_preferred: list[ssl.SSLContext] = []  # the process's one "preferred" TLS context, once built
_preferred_lock = threading.Lock()


def _preferred_context(build: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    with _preferred_lock:
        if not _preferred:
            _preferred.append(build())
        return _preferred[0]


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work commits on success and rolls back on any error."""
    with factory() as session, session.begin():
        yield session


def read_committed(session: Session) -> None:
    """Run the session's transaction at READ COMMITTED (row locks only, no gap locks; every plain
    read sees the latest commits) when it has not run a statement yet; otherwise it keeps its level."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # "Connection is already established": level kept
        session.connection(execution_options={"isolation_level": "READ COMMITTED"})


def affected(result: Result[Any]) -> int:
    """Rows an INSERT, UPDATE or DELETE matched. ``Session.execute`` is typed as returning a plain
    ``Result``; for these statements it is always a ``CursorResult``, which has the count."""
    assert isinstance(result, CursorResult)
    return result.rowcount


def db_now(session: Session) -> datetime:
    """The database server's clock (naive UTC): the clock leases and task release times compare with."""
    value = session.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    assert isinstance(value, datetime)
    return value


def transient_kind(exc: BaseException) -> str | None:
    """``deadlock``, ``lock_wait_timeout`` or ``lost_connection`` when ``exc`` is such a MySQL error, else None."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if isinstance(orig, pymysql_err.MySQLError) and orig.args and isinstance(orig.args[0], int):
        return TRANSIENT_MYSQL_ERRORS.get(orig.args[0])
    return None


@dataclass(frozen=True, slots=True)
class Retry:
    """How ``retried`` runs a transaction again: at most ``attempts`` runs in all, each after a pause of
    full jitter (uniform in [0, min(cap_s, base_s * 2**n)]), so two deadlocked lanes do not meet again
    in step. Bounded on purpose: an outage that outlasts it goes to the caller's own backoff."""

    attempts: int = 5
    base_s: float = 0.05
    cap_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)


def retried(
    sessions: sessionmaker[Session],
    work: Callable[[Session], T],
    *,
    name: str,
    applied: Callable[[Session], T | None] | None = None,
    retry: Retry | None = None,
    idempotent: bool = True,
) -> T:
    """Run ``work`` in a transaction of its own, again after a transient error (``transient_kind``);
    any other error, or the last attempt's, goes to the caller. ``applied``: after a lost connection,
    whether the lost commit landed (read in a fresh session; not None: its answer, and ``work`` is
    not run twice): a transaction that adds counts is not idempotent. Without ``applied``, a work
    that is not ``idempotent`` (plain inserts) is not run again after a lost connection. Each
    transient error is counted (``notee_mysql_transaction_retries_total``) with what was done."""
    policy = retry or Retry()
    for attempt in range(1, policy.attempts + 1):
        try:
            with sessions.begin() as session:
                return work(session)
        except DBAPIError as exc:
            kind = transient_kind(exc)
            if kind is None:
                raise
            if attempt == policy.attempts or (kind == "lost_connection" and applied is None and not idempotent):
                metrics.mysql_transaction_retry(name, kind, "gave_up")
                log.warning("mysql %s: %s %d times; giving up to the caller", name, kind, attempt)
                raise
            if kind == "lost_connection" and applied is not None:
                with sessions() as session:
                    answer = applied(session)
                if answer is not None:
                    metrics.mysql_transaction_retry(name, kind, "already_applied")
                    log.warning("mysql %s: connection lost after its commit landed; not run again", name)
                    return answer
            metrics.mysql_transaction_retry(name, kind, "retried")
            pause = policy.rng.uniform(0, min(policy.cap_s, policy.base_s * 2 ** (attempt - 1)))
            log.warning("mysql %s: %s (attempt %d); running it again in %.3f s", name, kind, attempt, pause)
            policy.sleep(pause)
    raise AssertionError("unreachable: the last attempt returns or raises")
