"""Shared fixtures. Tests run against the real MariaDB and Cassandra that `make test` started (or
the ones NOTEE_MYSQL_URL / NOTEE_CASSANDRA_HOSTS name), in their own database and keyspaces
(`<db>_test`, `<keyspace>_test`), so they never touch `make run`'s data.

Tests are independent of each other's data and order: each makes its own service (tenant) with a
random identifier, and everything it writes hangs off that tenant.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from notee.core.settings import Settings
from notee.store.runtime import Runtime
from tests.support.stores import drop_test_stores

# Whole-session log capture and the final scan for credential material (issue 9); the shared
# fixtures of tests/support (emulator, processes), available to every test without an import.
pytest_plugins = [
    "tests.support.logscan",
    "tests.support.emulator",
    "tests.support.processes",
    "tests.support.providers",
]


def _test_environment() -> None:
    """Point every NOTEE_* store setting at the test database/keyspaces, for this process and for
    the subprocesses (workers, schedulers) that tests start."""
    base = Settings()
    url = make_url(base.mysql_url.get_secret_value())
    if not (url.database or "").endswith("_test"):
        url = url.set(database=f"{url.database or 'notee'}_test")
    os.environ["NOTEE_MYSQL_URL"] = url.render_as_string(hide_password=False)
    for name in ("notification", "numbering"):
        key = f"NOTEE_CASSANDRA_KEYSPACE_{name.upper()}"
        current = os.environ.get(key, name)
        os.environ[key] = current if current.endswith("_test") else f"{current}_test"
    os.environ.setdefault("NOTEE_ADMIN_TOKEN", "test-admin-" + secrets.token_urlsafe(16))
    from cryptography.fernet import Fernet

    os.environ.setdefault("NOTEE_CREDENTIALS_KEY", Fernet.generate_key().decode())


_test_environment()


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def migrated(settings: Settings) -> None:
    """The test database and keyspaces at this checkout's schema. They persist between runs (the
    MariaDB data directory is the machine's); when another checkout left a history this one cannot
    continue (a renumbered or edited file), they are dropped and migrated from scratch."""
    from notee.usecases import migrate

    try:
        migrate.migrate_all(settings)
    except migrate.HistoryMismatch as mismatch:
        print(f"test stores reset: {mismatch}")
        drop_test_stores(settings)
        migrate.migrate_all(settings)


@pytest.fixture(scope="session")
def runtime(settings: Settings, migrated: None) -> Iterator[Runtime]:
    rt = Runtime(settings)
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def app(settings: Settings, runtime: Runtime):
    from notee.api.app import create_app

    return create_app(settings, runtime=runtime)


@pytest.fixture(scope="session")
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


@pytest.fixture()
def service_id() -> str:
    """A fresh tenant identifier (the row is created by the registry fixtures)."""
    return "T" + secrets.token_hex(6).upper()
