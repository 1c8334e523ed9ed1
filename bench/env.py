"""The benchmarks' own stores and emulator.

``use_bench_stores()`` points every NOTEE_* store setting at the database ``<db>_bench`` and the
keyspaces ``<keyspace>_bench`` (for this process and the worker subprocesses it starts), creates and
migrates them, so benchmark data never mixes with the tests' or ``make run``'s. ``emulator()`` runs
``notee emulator`` on a free port with its own test CA and stops it by its pid.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

SUFFIX = "_bench"


def use_bench_stores() -> None:
    """Set NOTEE_MYSQL_URL / NOTEE_CASSANDRA_KEYSPACE_* to the bench database and keyspaces."""
    from sqlalchemy.engine import make_url

    from notee.settings import Settings

    base = Settings()
    url = make_url(base.mysql_url.get_secret_value())
    if not (url.database or "").endswith(SUFFIX):
        url = url.set(database=f"{url.database or 'notee'}{SUFFIX}")
    os.environ["NOTEE_MYSQL_URL"] = url.render_as_string(hide_password=False)
    for name in ("notification", "numbering"):
        key = f"NOTEE_CASSANDRA_KEYSPACE_{name.upper()}"
        current = os.environ.get(key, name)
        os.environ[key] = current if current.endswith(SUFFIX) else f"{current}{SUFFIX}"
    if not os.environ.get("NOTEE_CREDENTIALS_KEY"):
        from cryptography.fernet import Fernet

        os.environ["NOTEE_CREDENTIALS_KEY"] = Fernet.generate_key().decode()


def migrate(settings) -> None:
    """Create the (bench) database if needed and apply every migration to both stores."""
    from notee import migrate as migrations

    migrations.migrate_all(settings)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Emulator:
    url: str
    ca_file: str
    pid: int
    http: httpx.Client

    def reset(self) -> None:
        self.http.post("/_emu/reset").raise_for_status()

    def stats(self) -> dict[str, Any]:
        return self.http.get("/_emu/stats").json()

    def delivered(self) -> int:
        return sum(self.stats().get("delivered", {}).values())

    def env(self) -> dict[str, str]:
        return {"SSL_CERT_FILE": self.ca_file, "REQUESTS_CA_BUNDLE": self.ca_file, "NO_PROXY": "127.0.0.1,localhost",
                "NOTEE_EMULATOR_URL": self.url, "NOTEE_EMULATOR_CA_FILE": self.ca_file}


@contextmanager
def emulator(url: str | None = None, ca_file: str | None = None) -> Iterator[Emulator]:
    """Start ``notee emulator`` (or attach to a running one when ``url`` and ``ca_file`` are given) and
    export its environment for this process and its children."""
    proc = None
    if url is None:
        state_dir = Path(tempfile.mkdtemp(prefix="notee-bench-emu-"))
        port = free_port()
        url, ca_file = f"https://localhost:{port}", str(state_dir / "ca.crt")
        proc = subprocess.Popen([sys.executable, "-m", "notee", "emulator", "--host", "127.0.0.1", "--port", str(port),
                                 "--state-dir", str(state_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = None
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"emulator exited: {proc.stderr.read().decode()[-2000:]}")
            if Path(ca_file).exists():
                try:
                    client = client or httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=ca_file),
                                                    timeout=10)
                    if client.get("/_emu/stats").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError("emulator did not answer within 30 s")
            time.sleep(0.1)
        emu = Emulator(url, ca_file, proc.pid if proc else 0, client)
        os.environ.update(emu.env())
        yield emu
    finally:
        if client is not None:
            client.close()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
