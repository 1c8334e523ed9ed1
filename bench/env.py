"""The benchmarks' own stores and emulator.

``use_bench_stores()`` points every NOTEE_* store setting at the database ``<db>_bench_<tag>`` and
the keyspaces ``<keyspace>_bench_<tag>`` (for this process and the worker subprocesses it starts),
creates and migrates them, so benchmark data never mixes with the tests' or ``make run``'s, nor with
another checkout's benches: the tag is six hex digits of this checkout's path, as the tests' stores
have (tests/conftest.py; one shared ``notee_bench`` was migrated by whichever branch ran last). A
store name that already says ``_bench`` is used as it is. ``emulator()`` runs
``notee emulator`` on a free port with its own test CA and stops it by its pid.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from notee.emulator.control import EmulatorControl, attach, free_port, local_emulator  # noqa: F401 (free_port: bench scripts)

MARK = "_bench"  # a store name with it is a bench store already
SUFFIX = MARK + "_" + hashlib.sha256(str(Path(__file__).resolve().parents[1]).encode()).hexdigest()[:6]
DATABASE = f"notee{SUFFIX}"  # the database of the default NOTEE_MYSQL_URL, for scripts that read it directly


def stop_process(proc: subprocess.Popen, timeout_s: float) -> None:
    """SIGTERM a process the bench started, and SIGKILL it if it is not gone within ``timeout_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def use_bench_stores() -> None:
    """Set NOTEE_MYSQL_URL / NOTEE_CASSANDRA_KEYSPACE_* to the bench database and keyspaces."""
    from sqlalchemy.engine import make_url

    from notee.core.settings import Settings

    base = Settings()
    url = make_url(base.mysql_url.get_secret_value())
    if MARK not in (url.database or ""):
        url = url.set(database=f"{url.database or 'notee'}{SUFFIX}")
    os.environ["NOTEE_MYSQL_URL"] = url.render_as_string(hide_password=False)
    for name in ("notification", "numbering"):
        key = f"NOTEE_CASSANDRA_KEYSPACE_{name.upper()}"
        current = os.environ.get(key, name)
        os.environ[key] = current if MARK in current else f"{current}{SUFFIX}"
    if not os.environ.get("NOTEE_CREDENTIALS_KEY"):
        from cryptography.fernet import Fernet

        os.environ["NOTEE_CREDENTIALS_KEY"] = Fernet.generate_key().decode()


def migrate(settings) -> None:
    """Create the (bench) database if needed and apply every migration to both stores."""
    from notee.usecases import migrate as migrations

    migrations.migrate_all(settings)


@contextmanager
def emulator(url: str | None = None, ca_file: str | None = None) -> Iterator[EmulatorControl]:
    """Start ``notee emulator`` (or attach to a running one when ``url`` and ``ca_file`` are given) and
    export its environment for this process and its children."""
    if url is not None and ca_file is not None:
        emu = attach(url, ca_file)
        try:
            os.environ.update(emu.env())
            yield emu
        finally:
            emu.http.close()
        return
    with local_emulator(realistic=True) as emu:  # the emulator behaves like FCM/APNs (issue 13)
        os.environ.update(emu.env())
        yield emu
