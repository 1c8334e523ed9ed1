"""Fixtures of the fault suite (``make test-faults``): a 3-node Cassandra cluster, a second MariaDB
that may be killed, Notee processes as real subprocesses, and helpers to watch jobs and count what
the emulator received.

Nothing here touches the shared servers the rest of the suite uses (MariaDB on 3306, the single
Cassandra node on 9042): the cluster runs on 127.0.0.1-3:9043 (services/cassandra/cluster.sh) with
its own keyspaces, and the killable MariaDB runs on 3307 with its own datadir under ``.run/``.
Every subprocess writes its output into the session's log folder, so the final secrets scan
(tests/security_logscan.py) covers it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from notee.runtime import Runtime
from notee.settings import Settings
from notee.emulator.control import free_port
from tests.emulator_fixture import Emulator, emulator, emulator_process  # noqa: F401
from tests.security_logscan import log_dir

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "services" / "cassandra" / "cluster.sh"
CLUSTER_SIZE = 3


# --- Notee processes ------------------------------------------------------------------------------

@dataclass
class NoteeProcess:
    """One ``python -m notee <args>`` subprocess; output goes to ``<session log dir>/<name>.log``."""

    name: str
    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    log_path: Path | None = None

    def start(self) -> NoteeProcess:
        self.log_path = log_dir() / f"{self.name}.log"
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "notee", *self.args], env=self.env, cwd=REPO,
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)  # type: ignore[union-attr]

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def tail(self, n: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


@dataclass
class Processes:
    """Every subprocess a test started; all are stopped at teardown, by pid."""

    started: list[NoteeProcess] = field(default_factory=list)

    def start(self, name: str, args: list[str], env: dict[str, str]) -> NoteeProcess:
        p = NoteeProcess(name, args, env).start()
        self.started.append(p)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.started):
            p.stop(timeout=20)


@pytest.fixture()
def processes() -> Iterator[Processes]:
    procs = Processes()
    try:
        yield procs
    finally:
        procs.stop_all()


def subprocess_env(**overrides: str) -> dict[str, str]:
    """The test environment (test database, keyspaces, admin token, emulator) plus overrides."""
    env = dict(os.environ)
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"})
    env.update(overrides)
    return env


def wait_http(url: str, timeout: float = 60, proc: NoteeProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout} s" + (f"\n{proc.tail()}" if proc else ""))


# --- jobs -------------------------------------------------------------------------------------------

def wait_job(runtime: Runtime, service: str, job_id: str, timeout: float, workers: list[NoteeProcess] = ()):
    """Poll the job until it is done or failed; returns (job, progress). Fails on timeout or when
    every worker died."""
    from notee.fanout.jobs import job_status

    deadline = time.monotonic() + timeout
    while True:
        with runtime.sessions() as session:
            job, progress = job_status(session, service, job_id)
        if job.state in ("done", "failed"):
            return job, progress
        if workers and not any(w.alive() for w in workers):
            raise AssertionError("every worker exited:\n" + "\n".join(w.tail() for w in workers))
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {job.state} after {timeout} s: {progress}")
        time.sleep(0.5)


# --- emulator census ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Census:
    """What the emulator saw for a set of tokens."""

    targeted: int
    delivered: int  # tokens delivered at least once
    duplicated: int  # tokens delivered more than once
    extra_deliveries: int  # deliveries beyond the first, summed
    missing: list[str]
    max_attempts: int  # most requests any one token got (faulted ones included)
    attempts: dict[str, int]


def census(emu: Emulator, tokens: list[str], concurrency: int = 32) -> Census:
    """Ask the emulator, token by token, how often each was delivered (HTTP/2, bounded concurrency)."""

    async def run() -> dict[str, dict]:
        out: dict[str, dict] = {}
        sem = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=emu.url, verify=ssl.create_default_context(cafile=emu.ca_file), http2=True,
                                     timeout=30) as client:
            async def one(tok: str) -> None:
                async with sem:
                    r = await client.get("/_emu/deliveries", params={"token": tok})
                    r.raise_for_status()
                    out[tok] = r.json()

            for i in range(0, len(tokens), 2000):
                await asyncio.gather(*(one(t) for t in tokens[i:i + 2000]))
        return out

    seen = asyncio.run(run())
    counts = {t: seen[t]["fcm"] + seen[t]["apns"] for t in tokens}
    attempts = {t: seen[t]["attempts"] for t in tokens}
    return Census(
        targeted=len(tokens),
        delivered=sum(1 for c in counts.values() if c >= 1),
        duplicated=sum(1 for c in counts.values() if c > 1),
        extra_deliveries=sum(c - 1 for c in counts.values() if c > 1),
        missing=[t for t, c in counts.items() if c == 0],
        max_attempts=max(attempts.values(), default=0),
        attempts=attempts,
    )


# --- the 3-node Cassandra cluster -------------------------------------------------------------------------

@dataclass
class FaultCluster:
    settings: Settings
    runtime: Runtime
    env: dict[str, str]

    def kill(self, node: int) -> None:
        subprocess.run([str(CLUSTER_SH), "kill", str(node), str(CLUSTER_SIZE)], check=True, timeout=60)

    def restart(self, node: int) -> None:
        """Start a killed node again; returns once the ring is whole again (cluster.sh waits for it)."""
        subprocess.run([str(CLUSTER_SH), "restart", str(node), str(CLUSTER_SIZE)], check=True, timeout=600)

    def ensure_whole(self) -> None:
        """Start any node an earlier test killed, and wait until all nodes form one ring again."""
        with open(log_dir() / "cassandra-cluster.log", "ab") as log:
            subprocess.run([str(CLUSTER_SH), "start", str(CLUSTER_SIZE)], check=True, timeout=900, stdout=log,
                           stderr=subprocess.STDOUT, env={**os.environ, "CASSANDRA_HEAP": "768M"})

    @staticmethod
    def hosts() -> list[str]:
        return [f"127.0.0.{n}" for n in range(1, CLUSTER_SIZE + 1)]

    @staticmethod
    def node_pid(node: int) -> int:
        """The pid of the java process serving CQL on node N's address (whoever's checkout started it)."""
        out = subprocess.run(["ss", "-Hltnp", f"src 127.0.0.{node}:9043"], capture_output=True, text=True,
                             check=True, timeout=10).stdout
        match = re.search(r"pid=(\d+)", out)
        if match is None:
            raise RuntimeError(f"no process listens on 127.0.0.{node}:9043: {out!r}")
        return int(match.group(1))


def cluster_overrides() -> dict[str, str]:
    return {
        "NOTEE_CASSANDRA_HOSTS": ",".join(f"127.0.0.{n}" for n in range(1, CLUSTER_SIZE + 1)),
        "NOTEE_CASSANDRA_PORT": "9043",
        "NOTEE_CASSANDRA_REPLICATION": "{'class': 'SimpleStrategy', 'replication_factor': 3}",
        "NOTEE_CASSANDRA_CONSISTENCY": "QUORUM",
        "NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION": "notification_fault",
        "NOTEE_CASSANDRA_KEYSPACE_NUMBERING": "numbering_fault",
    }


def settings_from(env: dict[str, str]) -> Settings:
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        return Settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def fault_cluster(migrated) -> Iterator[FaultCluster]:
    """Start the 3-node cluster (reused if already running), migrate its keyspaces at RF 3, stop it
    at the end of the session. ``cluster.sh start`` returns only once every node sees the others UP
    and NORMAL with one schema version (notee/store/ring.py): answering CQL is not enough, a node
    that has not gossiped yet believes it is alone (issue 14, item 9)."""
    from notee import migrate

    log = open(log_dir() / "cassandra-cluster.log", "ab")
    env = subprocess_env(**cluster_overrides())
    settings = settings_from(env)
    runtime = Runtime(settings)
    try:
        # Inside the try: a start that fails (or a ring that never forms) still stops the nodes it started.
        subprocess.run([str(CLUSTER_SH), "start", str(CLUSTER_SIZE)], check=True, timeout=900, stdout=log,
                       stderr=subprocess.STDOUT, env={**os.environ, "CASSANDRA_HEAP": "768M"})
        deadline = time.monotonic() + 120
        while len([h for h in runtime.cql.cluster.metadata.all_hosts() if h.is_up]) < CLUSTER_SIZE:
            if time.monotonic() > deadline:
                raise RuntimeError("the driver does not see 3 live nodes")
            time.sleep(1)
        migrate.migrate_cassandra(runtime.cql, settings)
        yield FaultCluster(settings, runtime, env)
    finally:
        runtime.close()
        subprocess.run([str(CLUSTER_SH), "stop", str(CLUSTER_SIZE)], timeout=300, stdout=log,
                       stderr=subprocess.STDOUT)
        log.close()


# --- a second, killable MariaDB ------------------------------------------------------------------------------

@dataclass
class KillableMariaDB:
    """mariadbd on 127.0.0.1:3307 with its own datadir and socket under .run/mariadb-fault."""

    root: Path
    port: int = 3307
    proc: subprocess.Popen | None = None

    @property
    def socket_path(self) -> Path:
        return self.root / "mysqld.sock"

    @property
    def url(self) -> str:
        return f"mysql+pymysql://notee:notee@127.0.0.1:{self.port}/notee_fault"

    @staticmethod
    def _user() -> list[str]:
        # mariadbd refuses to run as root unless told to; as any other user it runs as that user.
        return ["--user=root"] if os.geteuid() == 0 else []

    def install(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        subprocess.run(["mariadb-install-db", "--no-defaults", *self._user(), f"--datadir={self.root / 'data'}",
                        "--skip-test-db", "--auth-root-authentication-method=normal"],
                       check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> None:
        log = open(log_dir() / "mariadb-fault.log", "ab")
        self.proc = subprocess.Popen(
            ["/usr/sbin/mariadbd", "--no-defaults", *self._user(), f"--datadir={self.root / 'data'}",
             f"--socket={self.socket_path}", f"--port={self.port}", "--bind-address=127.0.0.1",
             f"--pid-file={self.root / 'mysqld.pid'}", "--innodb-buffer-pool-size=64M", "--skip-log-bin",
             "--max-connections=300"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 60
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("second mariadbd did not start; see mariadb-fault.log")
            time.sleep(0.2)

    def answers(self) -> bool:
        r = subprocess.run(["mariadb-admin", "--no-defaults", f"--socket={self.socket_path}", "-uroot", "ping"],
                           capture_output=True, timeout=10)
        return r.returncode == 0

    def kill(self) -> None:
        """SIGKILL: a crash, not a clean shutdown (InnoDB recovers on the next start)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def sql(self, statements: str) -> None:
        subprocess.run(["mariadb", "--no-defaults", f"--socket={self.socket_path}", "-uroot"],
                       input=statements.encode(), check=True, timeout=30)


@pytest.fixture(scope="session")
def killable_mariadb() -> Iterator[KillableMariaDB]:
    """A fresh second MariaDB with the notee user and a migrated ``notee_fault`` database."""
    from notee import migrate

    db = KillableMariaDB(REPO / ".run" / "mariadb-fault")
    db.install()
    db.start()
    try:
        db.sql("CREATE DATABASE notee_fault CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;\n"
               "CREATE USER 'notee'@'127.0.0.1' IDENTIFIED BY 'notee';\n"
               "CREATE USER 'notee'@'localhost' IDENTIFIED BY 'notee';\n"
               "GRANT ALL PRIVILEGES ON notee_fault.* TO 'notee'@'127.0.0.1';\n"
               "GRANT ALL PRIVILEGES ON notee_fault.* TO 'notee'@'localhost';\nFLUSH PRIVILEGES;\n")
        engine = create_engine(db.url)
        try:
            migrate.migrate_mysql(engine)
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
        finally:
            engine.dispose()
        yield db
    finally:
        db.stop()


__all__ = ["Census", "FaultCluster", "KillableMariaDB", "NoteeProcess", "Processes", "census", "emulator",
           "emulator_process", "free_port", "signal", "subprocess_env", "wait_http", "wait_job"]
