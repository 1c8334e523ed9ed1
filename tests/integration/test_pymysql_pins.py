"""The engine's connections are ``SharedTlsContextConnection`` (notee/store/mysql.py, a performance
detour pinned by tests/unit/test_pymysql_pins.py): new connections build no TLS context of their own."""

from __future__ import annotations

import ssl

import pytest
from sqlalchemy import text

from notee.store.mysql import SharedTlsContextConnection, make_engine
from tests.support.pins import PYMYSQL_TLS


def test_new_engine_connections_build_no_tls_context_of_their_own(
    settings, runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(settings, pool_size=1)
    try:
        with engine.connect() as conn:  # the process's preferred context exists from here on
            assert isinstance(conn.connection.dbapi_connection, SharedTlsContextConnection)
        built: list[int] = []
        real = ssl.create_default_context

        def counted(*args, **kwargs):
            built.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(ssl, "create_default_context", counted)
        for _ in range(3):
            engine.dispose()  # the next checkout opens a new connection
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
        assert built == [], PYMYSQL_TLS.loud(f"{len(built)} TLS contexts built for 3 new connections")
    finally:
        engine.dispose()
