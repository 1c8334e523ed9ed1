"""`notee migrate`: files apply in order (an out-of-order file is refused unless explicitly allowed;
the one historical exception keeps old databases working), one run at a time (a MySQL named lock),
and `--status` lists applied and pending files of both stores (issue 14, item 7).

Each test migrates a fresh database (and, where Cassandra is involved, fresh keyspaces) of its own,
dropped afterwards, so the shared test database's history is never touched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from notee.core.settings import Settings
from notee.usecases import migrate
from tests.support.logscan import log_dir

REPO = Path(__file__).resolve().parents[2]
MYSQL_FILES = [m.name for m in migrate.load(migrate.SCHEMA_DIR / "mysql")]
CQL_FILES = [m.name for m in migrate.load(migrate.SCHEMA_DIR / "cql")]


@pytest.fixture()
def fresh(fresh_stores: Settings) -> Settings:
    """This module's name for the family's fresh stores (tests/support/stores.py)."""
    return fresh_stores


@pytest.fixture()
def engine(fresh: Settings) -> Iterator[Engine]:
    eng = create_engine(fresh.mysql_url.get_secret_value())
    yield eng
    eng.dispose()


def _folder(tmp_path: Path, versions: list[int], extra: dict[str, str] | None = None) -> Path:
    """A copy of the real MySQL migration files with these version numbers, plus extra files."""
    folder = tmp_path / f"mysql-{'-'.join(map(str, versions))}-{secrets.token_hex(2)}"
    folder.mkdir()
    for m in migrate.load(migrate.SCHEMA_DIR / "mysql"):
        if m.version in versions:
            shutil.copy(migrate.SCHEMA_DIR / "mysql" / m.name, folder / m.name)
    for name, body in (extra or {}).items():
        (folder / name).write_text(body)
    return folder


def _versions(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT version FROM schema_version ORDER BY version")).scalars())


def test_a_pending_file_below_the_highest_applied_is_refused_unless_allowed(tmp_path, engine):
    assert migrate.migrate_mysql(engine, _folder(tmp_path, [1, 3, 4, 5])) == [
        "0001_core.sql",
        "0003_dead_letter.sql",
        "0004_fanout_jobs.sql",
        "0005_cycle_ticks.sql",
    ]
    late = {
        "0002_late_table.sql": "-- retention: test only\nCREATE TABLE IF NOT EXISTS late_table (id INT PRIMARY KEY);\n"
    }
    folder = _folder(tmp_path, [1, 3, 4, 5], late)

    with pytest.raises(
        migrate.MigrationError, match=r"0002_late_table.sql numbered below the highest applied version 0005"
    ):
        migrate.migrate_mysql(engine, folder)
    assert _versions(engine) == [1, 3, 4, 5]  # nothing applied
    with engine.connect() as conn:
        assert conn.execute(text("SHOW TABLES LIKE 'late_table'")).first() is None

    assert migrate.migrate_mysql(engine, folder, allow_out_of_order=True) == ["0002_late_table.sql"]
    assert _versions(engine) == [1, 2, 3, 4, 5]


def test_a_database_migrated_before_0003_landed_still_migrates(tmp_path, engine):
    """0003_dead_letter.sql landed after 0004 and 0005: a database that had 0001, 0004 and 0005
    applies 0003 without the override, and only that file is accepted that way."""
    assert migrate.migrate_mysql(engine, _folder(tmp_path, [1, 4, 5])) == [
        "0001_core.sql",
        "0004_fanout_jobs.sql",
        "0005_cycle_ticks.sql",
    ]
    newer = [m.name for m in migrate.load(migrate.SCHEMA_DIR / "mysql") if m.version > 5]
    assert migrate.migrate_mysql(engine) == ["0003_dead_letter.sql", *newer]
    assert _versions(engine) == [m.version for m in migrate.load(migrate.SCHEMA_DIR / "mysql")]
    assert migrate.migrate_mysql(engine) == []


def test_a_database_migrated_before_0007_landed_still_migrates(tmp_path, engine):
    """0007_delivery_truth.sql landed after 0010: a database that had 0010 applies 0007 without the
    override; a file numbered below the highest applied that is not grandfathered is still refused."""
    assert migrate.migrate_mysql(engine, _folder(tmp_path, [1, 3, 4, 5, 10])) == [
        "0001_core.sql",
        "0003_dead_letter.sql",
        "0004_fanout_jobs.sql",
        "0005_cycle_ticks.sql",
        "0010_rate_limits.sql",
    ]
    late = {"0008_late_table.sql": "-- retention: test only\nCREATE TABLE IF NOT EXISTS late8 (id INT PRIMARY KEY);\n"}
    with pytest.raises(migrate.MigrationError, match=r"0008_late_table\.sql numbered below"):
        migrate.migrate_mysql(engine, _folder(tmp_path, [1, 3, 4, 5, 7, 10], late))
    assert migrate.migrate_mysql(engine, _folder(tmp_path, [1, 3, 4, 5, 7, 10])) == ["0007_delivery_truth.sql"]


def test_status_lists_applied_and_pending_files_of_both_stores(tmp_path, fresh, engine):
    before = _run(["migrate", "--status"], fresh)
    assert before.returncode == 0, before.stdout
    assert f"mysql: 0 applied, {len(MYSQL_FILES)} pending" in before.stdout
    assert "  pending  0001_core.sql" in before.stdout
    assert f"cassandra: 0 applied, {len(CQL_FILES)} pending" in before.stdout
    assert "  pending  0001_subscriptions.cql" in before.stdout

    migrate.migrate_mysql(engine, _folder(tmp_path, [1, 3]))
    after = _run(["migrate", "--status"], fresh)
    assert after.returncode == 0, after.stdout
    assert f"mysql: 2 applied, {len(MYSQL_FILES) - 2} pending" in after.stdout
    for line in [
        "  applied  0001_core.sql",
        "  applied  0003_dead_letter.sql",
        *(f"  pending  {name}" for name in MYSQL_FILES[2:]),
    ]:
        assert line in after.stdout
    assert _versions(engine) == [1, 3]  # --status changed nothing

    statuses = migrate.status_all(fresh)
    assert [s.store for s in statuses] == ["mysql", "cassandra"]
    assert [name for _, name, _ in statuses[0].applied] == ["0001_core.sql", "0003_dead_letter.sql"]
    assert statuses[1].applied == [] and statuses[1].pending == CQL_FILES


def _env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "NOTEE_MYSQL_URL": settings.mysql_url.get_secret_value(),
            "NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION": settings.cassandra_keyspace_notification,
            "NOTEE_CASSANDRA_KEYSPACE_NUMBERING": settings.cassandra_keyspace_numbering,
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _run(args: list[str], settings: Settings) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "notee", *args],
        env=_env(settings),
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=300,
    )


def test_two_concurrent_migrate_runs_do_not_interleave(fresh, engine):
    """Two real `notee migrate` processes start while the migration lock is held (as by a third run):
    both wait and apply nothing; once it is released, one applies every file and the other, after
    it, finds nothing pending. Without the lock both would apply 0001 and one would fail on the
    duplicate schema_version row."""
    lock = engine.connect()
    assert lock.execute(text("SELECT GET_LOCK(:n, 0)"), {"n": migrate.lock_name(engine)}).scalar() == 1
    runs = []
    try:
        for i in range(2):
            path = log_dir() / f"migrate-concurrent-{i}-{secrets.token_hex(2)}.log"
            out = open(path, "w")  # noqa: SIM115 - each migrate process writes to it; closed after they exit
            proc = subprocess.Popen(
                [sys.executable, "-m", "notee", "migrate"],
                env=_env(fresh),
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
            out.close()
            runs.append((proc, path))
        deadline = time.monotonic() + 120
        while not all("holds the migration lock" in p.read_text() for _, p in runs):
            assert all(proc.poll() is None for proc, _ in runs), [p.read_text() for _, p in runs]
            assert time.monotonic() < deadline, [p.read_text() for _, p in runs]
            time.sleep(0.2)
        # Both are waiting on the lock: nothing was applied by either.
        with engine.connect() as conn:
            assert conn.execute(text("SHOW TABLES LIKE 'schema_version'")).first() is None
    finally:
        lock.execute(text("SELECT RELEASE_LOCK(:n)"), {"n": migrate.lock_name(engine)})
        lock.close()
    outputs = []
    for proc, path in runs:
        assert proc.wait(timeout=300) == 0, path.read_text()
        outputs.append(path.read_text())
    applied_lines = sorted(next(ln for ln in o.splitlines() if ln.startswith("applied ")) for o in outputs)
    everything = MYSQL_FILES + CQL_FILES
    assert applied_lines == [
        "applied 0 migration(s)",
        f"applied {len(everything)} migration(s): " + ", ".join(everything),
    ]
    assert _versions(engine) == [m.version for m in migrate.load(migrate.SCHEMA_DIR / "mysql")]
    statuses = migrate.status_all(fresh)
    assert all(s.pending == [] for s in statuses)
    assert [name for _, name, _ in statuses[1].applied] == CQL_FILES
