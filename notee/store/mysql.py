"""The MySQL engine and session lifecycle.

One engine per process, built by the app factory / CLI from Settings. Sessions are opened by the
caller (one per request or per job step) and passed to the query functions, which never open their
own.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pymysql.connections import Connection as PyMySQLConnection
from sqlalchemy import CursorResult, Engine, Result, Row, create_engine, event, text
from sqlalchemy.exc import SAWarning
from sqlalchemy.orm import Session, sessionmaker

from notee.core.settings import Settings
from notee.store.outage import watch_mysql

AnyRow = Row[*tuple[Any, ...]]  # a result row of any shape, read by column name


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

    watch_mysql(engine)  # notee_store_errors_total{store="mysql"}
    return engine


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
