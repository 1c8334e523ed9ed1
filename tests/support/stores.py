"""The test stores: the fixtures that open them, and read-side checks on them.

Fixtures (registered as a plugin by tests/conftest.py): ``settings``, ``migrated`` (the test database
and keyspaces at this checkout's schema), ``runtime`` (one per test process), ``app`` and ``client``
(the API in-process, on that runtime), ``st`` (the runtime's prepared Cassandra statements),
``fresh_stores`` (a database and keyspaces of one test's own; ``store_env`` points a process at them).

Checks: everything the stores hold for one tenant, as a comparable value, to prove that a rejected
request wrote nothing: ``assert snapshot(runtime, service) == before``."""

from __future__ import annotations

import fcntl
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra.query import PreparedStatement
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from notee.core.settings import Settings
from notee.store.cassandra import connect
from notee.store.runtime import Runtime
from notee.usecases import migrate

NOT_DATA = {"rate_bucket"}  # request accounting, changed by every request by design
# Tables without a ``service`` column that still hold a tenant's rows, with the query selecting them.
_BY_JOIN = {
    "fanout_task": "SELECT t.* FROM fanout_task t JOIN fanout_job j USING (job_id) WHERE j.service = :s",
}

Snapshot = dict[str, list[str]]


def snapshot(runtime: Runtime, service: str) -> Snapshot:
    """MySQL: every row of every table with a ``service`` column (found from the schema, so a new
    table is covered) and the tables of ``_BY_JOIN``; request accounting (``NOT_DATA``) excluded.
    Cassandra: the tenant's numbering counters and the ``notification_per_user`` rows of each of its
    users. Together these move on every subscription write: a new subscriber row (topic, cycle)
    takes a number from the counters, and every subscribe/unsubscribe writes or deletes the user's
    own row, which also carries the cycle schedule that ``cycle_due`` indexes."""
    out: Snapshot = {}
    with runtime.engine.connect() as conn:
        tables = (
            conn.execute(
                text(
                    "SELECT table_name FROM information_schema.columns WHERE table_schema = DATABASE() "
                    "AND column_name = 'service' ORDER BY table_name"
                )
            )
            .scalars()
            .all()
        )
        queries = {t: f"SELECT * FROM `{t}` WHERE service = :s" for t in tables if t not in NOT_DATA} | _BY_JOIN
        for table, query in queries.items():
            out[f"mysql.{table}"] = sorted(repr(tuple(r)) for r in conn.execute(text(query), {"s": service}))
        users = [
            str(u)
            for u in conn.execute(text("SELECT user_id FROM `user` WHERE service = :s"), {"s": service}).scalars()
        ]
    counters, per_user = _cql_statements(runtime)
    out["cql.counters"] = sorted(repr(tuple(r)) for r in runtime.cql.execute(counters, (service,)))
    pending = [runtime.cql.execute_async(per_user, (u, service)) for u in users]
    out["cql.per_user"] = sorted(repr(tuple(r)) for f in pending for r in f.result())
    return out


def totals(runtime: Runtime) -> dict[str, int]:
    """Row counts of the tables any tenant's admin requests write (services, API keys, credentials):
    a rejected admin request addressed to some other service must not add rows there either."""
    with runtime.engine.connect() as conn:
        return {
            t: int(conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one())
            for t in ("service", "api_key", "provider_credentials")
        }


def changes(before: Snapshot, after: Snapshot) -> dict[str, dict[str, list[str]]]:
    """What differs between two snapshots, per table: rows gone and rows new (empty when equal)."""
    diff = {}
    for table in sorted(set(before) | set(after)):
        old, new = set(before.get(table, [])), set(after.get(table, []))
        if old != new:
            diff[table] = {"gone": sorted(old - new), "new": sorted(new - old)}
    return diff


_prepared: dict[int, tuple[PreparedStatement, PreparedStatement]] = {}


def _cql_statements(runtime: Runtime) -> tuple[PreparedStatement, PreparedStatement]:
    """Prepared once per Cassandra session (the fuzz test takes a snapshot after every case)."""
    key = id(runtime.cql)
    if key not in _prepared:
        ks = runtime.keyspaces
        _prepared[key] = (
            runtime.cql.prepare(f"SELECT * FROM {ks.numbering}.notification WHERE service = ?"),
            runtime.cql.prepare(
                f"SELECT * FROM {ks.notification}.notification_per_user WHERE user_id = ? AND service = ?"
            ),
        )
    return _prepared[key]


def drop_test_stores(settings: Settings) -> None:
    """Drop the MySQL database and both keyspaces these settings name. Refuses names without a test
    suffix: only a test's own stores are ever dropped."""
    url = make_url(settings.mysql_url.get_secret_value())
    names = [url.database or "", settings.cassandra_keyspace_notification, settings.cassandra_keyspace_numbering]
    if not all("_test" in name for name in names):
        raise ValueError(f"refusing to drop stores that are not a test's own: {names}")
    server = create_engine(url._replace(database=None))
    try:
        with server.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{url.database}`"))
    finally:
        server.dispose()
    cluster, session = connect(settings)
    try:
        for keyspace in names[1:]:
            session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
    finally:
        cluster.shutdown()


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def migrated(settings: Settings) -> None:
    """The test database and keyspaces at this checkout's schema. They persist between runs (the
    MariaDB data directory is the machine's); when another checkout left a history this one cannot
    continue (a renumbered or edited file), they are dropped and migrated from scratch.

    Every test process (each xdist worker, and the other checkouts of this machine) asks; a file lock
    named after the test database makes them take turns, so a reset never drops the stores under a
    process that has already migrated them (``migrate_all`` alone serialises the migrations, not
    the drop)."""
    database = make_url(settings.mysql_url.get_secret_value()).database
    lock = Path(tempfile.gettempdir()) / f"notee-{database}-migrate.lock"
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
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
def app(settings: Settings, runtime: Runtime) -> Any:
    from notee.api.app import create_app  # deferred: the API's import cost only where a test needs it

    return create_app(settings, runtime=runtime)


@pytest.fixture(scope="session")
def client(app: Any) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture()
def st(runtime: Runtime) -> Any:
    """The runtime's prepared Cassandra statements (``notee.store.cql.Statements``)."""
    return runtime.statements


@pytest.fixture()
def fresh_stores(settings: Settings) -> Iterator[Settings]:
    """Settings naming a new, empty MySQL database and new keyspaces of the test's own (created,
    nothing migrated); all dropped at its end. For tests of migrations, and for processes that must
    act on no other test's rows: a `notee scheduler` (it runs every tenant's due minutes), the
    workers of `make run` (they serve every tenant), a webhook dispatcher (it claims every tenant's
    deliveries)."""
    suffix = secrets.token_hex(3)
    url = make_url(settings.mysql_url.get_secret_value())
    url = url.set(database=f"{url.database}_m{suffix}")
    fresh = settings.model_copy(
        update={
            "mysql_url": SecretStr(url.render_as_string(hide_password=False)),
            "cassandra_keyspace_notification": f"{settings.cassandra_keyspace_notification}_m{suffix}",
            "cassandra_keyspace_numbering": f"{settings.cassandra_keyspace_numbering}_m{suffix}",
        }
    )
    migrate.ensure_mysql_database(fresh)
    try:
        yield fresh
    finally:
        drop_test_stores(fresh)


def store_env(settings: Settings) -> dict[str, str]:
    """The environment of a process using ``settings``' stores: this process's, with them."""
    return os.environ | {
        "NOTEE_MYSQL_URL": settings.mysql_url.get_secret_value(),
        "NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION": settings.cassandra_keyspace_notification,
        "NOTEE_CASSANDRA_KEYSPACE_NUMBERING": settings.cassandra_keyspace_numbering,
    }
