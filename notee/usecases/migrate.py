"""Versioned schema migrations for both stores: ``notee migrate``.

Each store has a folder of numbered files (``schema/mysql/0001_core.sql``, ``schema/cql/0001_...cql``)
applied in order and recorded in that store's ``schema_version`` table with a checksum. Running it
again applies nothing; a landed file whose text changed is refused (fix forward with a new file).

Why not Alembic: the schema files are plain SQL/CQL so the DATA-RULES conventions (``-- retention:``
and ``-- serves:`` comments) stay readable and checkable, and there is no maintained migration tool
for CQL; one small runner serves both stores the same way (docs/ARCHITECTURE.md, Decisions).

A statement ends with ``;`` at the end of a line. CQL files may use ``${notification}``,
``${numbering}`` (keyspace names) and ``${replication}`` (the replication map from settings).

Three rules keep every database's history the same (docs/ARCHITECTURE.md, "Migrations"):

* **In order.** A pending file numbered below the highest applied version is refused (two databases
  would otherwise have applied the same files in different orders); ``--allow-out-of-order`` is the
  explicit override. ``0003_dead_letter.sql`` (landed after 0004/0005) and ``0007_delivery_truth.sql``
  (landed after 0010) and ``0012_job_deadline.sql`` (landed after 0013) are the grandfathered exceptions, so databases migrated before them keep working.
* **One run at a time.** ``migrate_all`` holds a MySQL named lock (``GET_LOCK``) for the whole run,
  both stores included: a second ``notee migrate`` waits for it, then finds nothing pending. The
  Cassandra side is serialised under the same lock rather than by an LWT lock row (one mechanism; a
  Notee deployment always has its MySQL database beside its keyspaces, and a dead holder's lock is
  released with its connection, where an LWT row would need a lease).
* **Schema agreement.** On a multi-node cluster a DDL statement is applied by one node and spread
  by gossip; the runner waits after each one until all live nodes report the same schema version
  (``cassandra_schema_agreement_wait_s``) and fails the file otherwise, instead of sending the next
  statement to a node that does not know the table yet.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from string import Template

from cassandra.cluster import Session as CqlSession
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from notee.core.settings import Settings
from notee.store.cassandra import keyspaces
from notee.store.runtime import Runtime

log = logging.getLogger(__name__)


def schema_dir() -> Path:
    """The folder holding ``mysql/`` and ``cql/``: inside an installed wheel ``notee/_schema`` (the
    build copies the repository's ``schema/`` there, see setup.py), in a source checkout or an
    editable install the repository's own ``schema/``."""
    packaged = Path(str(resources.files("notee") / "_schema"))
    source = Path(__file__).resolve().parents[2] / "schema"  # notee/usecases/migrate.py -> the checkout
    if not packaged.is_dir() and (source / "mysql").is_dir() and (source.parent / "pyproject.toml").is_file():
        return source
    return packaged


SCHEMA_DIR = schema_dir()
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


class HistoryMismatch(MigrationError):
    """The database's recorded history is not this notee's files: an applied file was edited, or a
    version is recorded that this notee has no file for (a newer Notee or a development branch
    migrated it). Nothing is applied on top of a history that cannot be reproduced."""


# Files that landed numbered below an already landed one, before the in-order rule existed (0003
# after 0004/0005; 0007 after 0010; 0012 after 0013, with the rule): a database migrated in between
# applies them late, which is accepted (and only for them) without the flag.
GRANDFATHERED_OUT_OF_ORDER: dict[str, frozenset[int]] = {"mysql": frozenset({3, 7, 12}), "cassandra": frozenset()}
# Files revised after a database may have applied them, for online safety, with the checksums of their
# earlier texts (accepted as applied): 0026 no longer re-adds a CHECK by copying fanout_job, and 0035
# drops the check where its first text added it (docs/DEPLOY.md "Online safety, measured"); 0004 and 0039
# had their retention comments corrected (jobs live max(retention_days, receipts_retention_days)), SQL unchanged.
REVISED: dict[str, dict[int, frozenset[str]]] = {
    "mysql": {
        4: frozenset({"8a8285a3f4535a2a960e114c7db29ae40fff8c367fa41cda31a8411de2bb6630"}),
        26: frozenset({"9dae9596962f5038e5b293f220e5a17b21eacd3cc30e6902111d77f0a681ec0d"}),
        39: frozenset({"0906b4eef80ec1ed5e692e8a2e7145c6090067112ded6241962768a79a52f18c"}),
    },
    "cassandra": {},
}


def load(folder: Path) -> list[Migration]:
    if not folder.is_dir():
        raise MigrationError(f"no migrations at {folder}: this notee was built without schema/ (see setup.py)")
    found = []
    for path in sorted(folder.iterdir()):
        m = _FILE.match(path.name)
        if m:
            found.append(Migration(int(m.group(1)), path.name, path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration numbers in {folder}")
    return found


def _pending(
    applied: dict[int, str], migrations: list[Migration], *, store: str, allow_out_of_order: bool = False
) -> list[Migration]:
    """The files still to apply, in order. Refuses an edited applied file, and (unless allowed) a
    pending file numbered below the highest applied version."""
    known = {m.version for m in migrations}
    foreign = sorted(v for v in applied if v not in known)
    if foreign:
        raise HistoryMismatch(
            f"{store}: version(s) {', '.join(f'{v:04d}' for v in foreign)} are recorded as applied but this notee "
            "has no such file (a newer Notee or a development branch migrated this database); run the notee "
            "that applied them, or restore the database"
        )
    pending = []
    for m in migrations:
        if m.version in applied:
            if applied[m.version] != m.checksum and applied[m.version] not in REVISED.get(store, {}).get(m.version, ()):
                raise HistoryMismatch(f"{m.name} changed after it was applied; add a new migration instead")
        else:
            pending.append(m)
    highest = max(applied, default=0)
    behind = [
        m.name
        for m in pending
        if m.version < highest and m.version not in GRANDFATHERED_OUT_OF_ORDER.get(store, frozenset())
    ]
    if behind and not allow_out_of_order:
        raise MigrationError(
            f"{store}: {', '.join(behind)} numbered below the highest applied version {highest:04d}; applying "
            "it now would give this database a different history from the others. Renumber it above "
            f"{highest:04d} (fix forward), or pass --allow-out-of-order if it is independent of the later files"
        )
    return pending


@dataclass(frozen=True)
class Status:
    """One store's migrations: what is applied (version, name, applied_at) and what is pending."""

    store: str
    applied: list[tuple[int, str, datetime | None]]
    pending: list[str]


_MYSQL_UNKNOWN_DATABASE = 1049

# retention: kept because it records which migrations this database has (one row per file).
_MYSQL_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
  version INT NOT NULL PRIMARY KEY,
  name VARCHAR(200) NOT NULL,
  checksum CHAR(64) NOT NULL,
  applied_at DATETIME(6) NOT NULL
) ENGINE=InnoDB
"""


def migrate_mysql(
    engine: Engine, folder: Path = SCHEMA_DIR / "mysql", *, allow_out_of_order: bool = False
) -> list[str]:
    migrations = load(folder)
    with engine.begin() as conn:
        conn.execute(text(_MYSQL_VERSION_TABLE))
        applied = {int(v): str(c) for v, c in conn.execute(text("SELECT version, checksum FROM schema_version"))}
    done = []
    for m in _pending(applied, migrations, store="mysql", allow_out_of_order=allow_out_of_order):
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


def _mysql_applied(engine: Engine) -> list[tuple[int, str, datetime | None]]:
    """(version, name, applied_at) of the applied files; none when the database or table is missing."""
    try:
        with engine.connect() as conn:
            exists = conn.execute(
                text(
                    "SELECT COUNT(*) FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND table_name = 'schema_version'"
                )
            ).scalar()
            if not exists:
                return []
            rows = conn.execute(text("SELECT version, name, applied_at FROM schema_version ORDER BY version")).all()
    except OperationalError as exc:
        if getattr(exc.orig, "args", (None,))[0] != _MYSQL_UNKNOWN_DATABASE:
            raise
        return []
    return [(int(v), str(n), at) for v, n, at in rows]


def mysql_status(engine: Engine, folder: Path = SCHEMA_DIR / "mysql") -> Status:
    """Applied and pending MySQL files; changes nothing."""
    applied = _mysql_applied(engine)
    done = {v for v, _, _ in applied}
    return Status("mysql", applied, [m.name for m in load(folder) if m.version not in done])


def _execute_ddl(session: CqlSession, statement: str, wait_s: float) -> None:
    """Run one schema statement, then wait until every live node reports the same schema version:
    the next statement may be coordinated by another node, which must already know the change."""
    session.execute(statement, timeout=60)
    if not session.cluster.control_connection.wait_for_schema_agreement(wait_time=wait_s):
        raise MigrationError(
            f"cassandra: no schema agreement {wait_s:.0f} s after {statement.split('(')[0].strip()!r}: a node is "
            "not applying schema changes (down, paused or partitioned but still counted live); fix it and run "
            "`notee migrate` again (files use IF NOT EXISTS, the unfinished file is re-run)"
        )


def _cassandra_applied(session: CqlSession, settings: Settings) -> list[tuple[int, str, str, datetime | None]] | None:
    """(version, name, checksum, applied_at) rows, or None when the keyspace or table does not exist yet."""
    ks = keyspaces(settings)
    if session.cluster.metadata.keyspaces.get(ks.notification) is None:
        session.cluster.refresh_schema_metadata()
    meta = session.cluster.metadata.keyspaces.get(ks.notification)
    if meta is None or "schema_version" not in meta.tables:
        return None
    rows = session.execute(f"SELECT version, name, checksum, applied_at FROM {ks.notification}.schema_version")
    return sorted((r.version, r.name, r.checksum, r.applied_at) for r in rows)


def cassandra_status(session: CqlSession, settings: Settings, folder: Path = SCHEMA_DIR / "cql") -> Status:
    """Applied and pending CQL files; changes nothing."""
    rows = _cassandra_applied(session, settings) or []
    done = {v for v, *_ in rows}
    return Status(
        "cassandra", [(v, n, at) for v, n, _, at in rows], [m.name for m in load(folder) if m.version not in done]
    )


def migrate_cassandra(
    session: CqlSession, settings: Settings, folder: Path = SCHEMA_DIR / "cql", *, allow_out_of_order: bool = False
) -> list[str]:
    ks = keyspaces(settings)
    subs = {"notification": ks.notification, "numbering": ks.numbering, "replication": settings.cassandra_replication}
    wait_s = settings.cassandra_schema_agreement_wait_s
    _execute_ddl(
        session,
        f"CREATE KEYSPACE IF NOT EXISTS {ks.notification} WITH replication = {settings.cassandra_replication}",
        wait_s,
    )
    # retention: kept because it records which migrations this cluster has (one row per file).
    _execute_ddl(
        session,
        f"CREATE TABLE IF NOT EXISTS {ks.notification}.schema_version "
        "(version int PRIMARY KEY, name text, checksum text, applied_at timestamp)",
        wait_s,
    )
    applied = {
        r.version: r.checksum
        for r in session.execute(f"SELECT version, checksum FROM {ks.notification}.schema_version")
    }
    done = []
    for m in _pending(applied, load(folder), store="cassandra", allow_out_of_order=allow_out_of_order):
        for stmt in m.statements(subs):
            _execute_ddl(session, stmt, wait_s)
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
            conn.execute(
                text(f"CREATE DATABASE IF NOT EXISTS `{url.database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            )
    finally:
        server.dispose()


def lock_name(engine: Engine) -> str:
    """The named lock of this database's migrations (MySQL limits lock names to 64 characters)."""
    database = engine.url.database or ""
    name = f"notee_migrate:{database}"
    return name if len(name) <= 64 else "notee_migrate:" + hashlib.sha256(database.encode()).hexdigest()[:40]


@contextmanager
def migration_lock(engine: Engine, *, timeout_s: int) -> Iterator[None]:
    """Hold the MySQL named lock of this database's migrations (``GET_LOCK``) on a connection of its
    own. Released at exit, or by the server when the holder's connection dies."""
    name = lock_name(engine)
    with engine.connect() as conn:
        got = conn.execute(text("SELECT GET_LOCK(:name, 0)"), {"name": name}).scalar()
        if got != 1:
            log.warning("another `notee migrate` holds the migration lock %s: waiting up to %d s", name, timeout_s)
            got = conn.execute(text("SELECT GET_LOCK(:name, :t)"), {"name": name, "t": timeout_s}).scalar()
            if got != 1:
                raise MigrationError(f"migration lock {name} still held after {timeout_s} s by another `notee migrate`")
        log.debug("holding the migration lock %s", name)
        try:
            yield
        finally:
            conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": name})


def migrate_all(settings: Settings, *, allow_out_of_order: bool = False, lock_timeout_s: int = 600) -> list[str]:
    """``notee migrate``: create the database if needed, then, holding the migration lock, apply what
    is pending in both stores."""
    ensure_mysql_database(settings)
    runtime = Runtime(settings)
    try:
        with migration_lock(runtime.engine, timeout_s=lock_timeout_s):
            return migrate_mysql(runtime.engine, allow_out_of_order=allow_out_of_order) + migrate_cassandra(
                runtime.cql, settings, allow_out_of_order=allow_out_of_order
            )
    finally:
        runtime.close()


def status_all(settings: Settings) -> list[Status]:
    """``notee migrate --status``: applied and pending files of both stores (changes nothing)."""
    runtime = Runtime(settings)
    try:
        return [mysql_status(runtime.engine), cassandra_status(runtime.cql, settings)]
    finally:
        runtime.close()
