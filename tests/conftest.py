"""The test environment of every lane. Tests run against the real MariaDB and Cassandra that `make
test` started (or the ones NOTEE_MYSQL_URL / NOTEE_CASSANDRA_HOSTS name), in a database and keyspaces
of this checkout's own (`<db>_test_<tag>`, `<keyspace>_test_<tag>`; the tag names the checkout's
path), so they never touch `make run`'s data nor the tests of another checkout on the machine: a
test that reads what every tenant shares (the admin tables' row counts, the job queue's depth, a
dispatcher's claims) sees only this checkout's runs. A name that already says `_test` is kept.

Tests are independent of each other's data and order: each makes its own service (tenant) with a
random identifier (tests/support/tenants.py), and everything it writes hangs off that tenant, so
the integration lane runs on several processes (docs/TESTING.md). The fixtures live in
tests/support/, registered here as plugins.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from sqlalchemy.engine import make_url

from notee.core.settings import Settings

# Whole-session log capture and the final scan for credential material (issue 9); the shared
# fixtures of tests/support (stores, tenants, emulator, processes, scheduler, providers), available
# to every test without an import; and which tests the integration lane keeps apart (parallel).
pytest_plugins = [
    "tests.support.logscan",
    "tests.support.stores",
    "tests.support.tenants",
    "tests.support.emulator",
    "tests.support.processes",
    "tests.support.scheduler",
    "tests.support.providers",
    "tests.support.parallel",
    "tests.support.cli",
]


def _test_environment() -> None:
    """Point every NOTEE_* store setting at this checkout's test database/keyspaces, for this process
    and for the subprocesses (workers, schedulers, xdist workers) that tests start."""
    suffix = "_test_" + hashlib.sha256(str(Path(__file__).resolve().parents[1]).encode()).hexdigest()[:6]
    base = Settings()
    url = make_url(base.mysql_url.get_secret_value())
    if "_test" not in (url.database or ""):
        url = url.set(database=f"{url.database or 'notee'}{suffix}")
    os.environ["NOTEE_MYSQL_URL"] = url.render_as_string(hide_password=False)
    for name in ("notification", "numbering"):
        key = f"NOTEE_CASSANDRA_KEYSPACE_{name.upper()}"
        current = os.environ.get(key, name)
        os.environ[key] = current if "_test" in current else f"{current}{suffix}"
    os.environ.setdefault("NOTEE_ADMIN_TOKEN", "test-admin-" + secrets.token_urlsafe(16))
    from cryptography.fernet import Fernet

    os.environ.setdefault("NOTEE_CREDENTIALS_KEY", Fernet.generate_key().decode())


_test_environment()
