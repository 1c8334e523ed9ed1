"""The MySQL engine and session lifecycle.

One engine per process, built by the app factory / CLI from Settings. Sessions are opened by the
caller (one per request or per job step) and passed to the query functions, which never open their
own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from notee.settings import Settings


def make_engine(settings: Settings, *, pool_size: int | None = None) -> Engine:
    engine = create_engine(
        settings.mysql_url.get_secret_value(),
        pool_size=pool_size or settings.mysql_pool_size,
        max_overflow=settings.mysql_pool_size,
        pool_pre_ping=True,  # a connection MySQL dropped (restart, wait_timeout) is replaced, not used
        pool_recycle=1800,
        pool_timeout=settings.mysql_connect_timeout_s,
        connect_args={
            "connect_timeout": settings.mysql_connect_timeout_s,
            "read_timeout": 30,
            "write_timeout": 30,
            "charset": "utf8mb4",
        },
    )

    @event.listens_for(engine, "connect")
    def _utc(dbapi_conn, _record):  # timestamps are UTC everywhere (DATA-RULES.md)
        with dbapi_conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")

    return engine


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work commits on success and rolls back on any error."""
    with factory() as session, session.begin():
        yield session
