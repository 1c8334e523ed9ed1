"""Versioned schema migrations for both stores: ``notee migrate``.

Each store has a folder of numbered files (``schema/mysql/0001_core.sql``, ``schema/cql/0001_...cql``)
applied in order and recorded in that store's ``schema_version`` table with a checksum. Running it
again applies nothing; a landed file whose text changed is refused (fix forward with a new file).

Why not Alembic: the schema files are plain SQL/CQL so the DATA-RULES conventions (``-- retention:``
and ``-- serves:`` comments) stay readable and checkable, and there is no maintained migration tool
for CQL; one small runner serves both stores the same way (docs/DECISIONS.md).

A statement ends with ``;`` at the end of a line. CQL files may use ``${notification}``,
``${numbering}`` (keyspace names) and ``${replication}`` (the replication map from settings).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from cassandra.cluster import Session as CqlSession
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from notee.runtime import Runtime
from notee.settings import Settings
from notee.store.cassandra import keyspaces

log = logging.getLogger(__name__)

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.(sql|cql)$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def statements(self, substitutions: dict[str, str] | None = None) -> list[str]:
        body = Template(self.text).substitute(substitutions) if substitutions else self.text
        lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("--")]
        joined = "\n".join(lines)
        return [s.strip() for s in re.split(r";\s*$", joined, flags=re.M) if s.strip()]


class MigrationError(RuntimeError):
    pass


def load(folder: Path) -> list[Migration]:
    found = []
    for path in sorted(folder.iterdir()):
        m = _FILE.match(path.name)
        if m:
            found.append(Migration(int(m.group(1)), path.name, path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration numbers in {folder}")
    return found


def _pending(applied: dict[int, str], migrations: list[Migration]) -> list[Migration]:
    pending = []
    for m in migrations:
        if m.version in applied:
            if applied[m.version] != m.checksum:
                raise MigrationError(f"{m.name} changed after it was applied; add a new migration instead")
        else:
            pending.append(m)
    return pending


# retention: kept because it records which migrations this database has (one row per file).
_MYSQL_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
  version INT NOT NULL PRIMARY KEY,
  name VARCHAR(200) NOT NULL,
  checksum CHAR(64) NOT NULL,
  applied_at DATETIME(6) NOT NULL
) ENGINE=InnoDB
"""


def migrate_mysql(engine: Engine, folder: Path = SCHEMA_DIR / "mysql") -> list[str]:
    migrations = load(folder)
    with engine.begin() as conn:
        conn.execute(text(_MYSQL_VERSION_TABLE))
        applied = dict(conn.execute(text("SELECT version, checksum FROM schema_version")).all())
    done = []
    for m in _pending(applied, migrations):
        with engine.begin() as conn:  # MySQL DDL commits implicitly; files use IF NOT EXISTS
            for stmt in m.statements():
                conn.execute(text(stmt))
            conn.execute(
                text("INSERT INTO schema_version VALUES (:v, :n, :c, UTC_TIMESTAMP(6))"),
                {"v": m.version, "n": m.name, "c": m.checksum},
            )
        log.info("mysql: applied %s", m.name)
        done.append(m.name)
    return done


def migrate_cassandra(session: CqlSession, settings: Settings, folder: Path = SCHEMA_DIR / "cql") -> list[str]:
    ks = keyspaces(settings)
    subs = {"notification": ks.notification, "numbering": ks.numbering, "replication": settings.cassandra_replication}
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {ks.notification} WITH replication = {settings.cassandra_replication}"
    )
    # retention: kept because it records which migrations this cluster has (one row per file).
    session.execute(
        f"CREATE TABLE IF NOT EXISTS {ks.notification}.schema_version "
        "(version int PRIMARY KEY, name text, checksum text, applied_at timestamp)"
    )
    applied = {r.version: r.checksum for r in session.execute(f"SELECT version, checksum FROM {ks.notification}.schema_version")}
    done = []
    for m in _pending(applied, load(folder)):
        for stmt in m.statements(subs):
            session.execute(stmt, timeout=60)
        session.execute(
            f"INSERT INTO {ks.notification}.schema_version (version, name, checksum, applied_at) "
            "VALUES (%s, %s, %s, toTimestamp(now()))",
            (m.version, m.name, m.checksum),
        )
        log.info("cassandra: applied %s", m.name)
        done.append(m.name)
    return done


def ensure_mysql_database(settings: Settings) -> None:
    """Create the configured MySQL database if it does not exist yet (the account needs the CREATE
    privilege for that; on an existing database nothing is asked of it)."""
    url = make_url(settings.mysql_url.get_secret_value())
    server = create_engine(url._replace(database=None))  # URL.set(database=None) keeps the name (SQLAlchemy 2.1)
    try:
        with server.begin() as conn:
            conn.execute(text(f"CREATE DATABASE IF NOT EXISTS `{url.database}` "
                              "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    finally:
        server.dispose()


def migrate_all(settings: Settings) -> list[str]:
    """``notee migrate``: create the database if needed, then apply what is pending in both stores."""
    ensure_mysql_database(settings)
    runtime = Runtime(settings)
    try:
        return migrate_mysql(runtime.engine) + migrate_cassandra(runtime.cql, settings)
    finally:
        runtime.close()
