"""The processes of a chaos run, all real: the 3-node Cassandra cluster of ``make cluster-up``
(services/cassandra/cluster.sh), a MariaDB of its own that may be killed (own datadir and port under
the run's folder, so the shared server is never touched), the push emulator with its delivery
journal, and Notee's api, worker, scheduler and webhooks processes, each restartable by name."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from notee.emulator.control import EmulatorControl, free_port, local_emulator

REPO = Path(__file__).resolve().parents[1]
CLUSTER_SH = REPO / "services" / "cassandra" / "cluster.sh"
CLUSTER_SIZE = 3


def _listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@dataclass
class Cluster:
    """The 3-node cluster on 127.0.0.1-3:9043; stopped at the end only if this run started it."""

    log: Path
    started_here: bool = False

    def _sh(self, *args: str, timeout: float) -> None:
        with open(self.log, "ab") as out:
            subprocess.run(
                [str(CLUSTER_SH), *args],
                check=True,
                timeout=timeout,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "CASSANDRA_HEAP": os.environ.get("CASSANDRA_HEAP", "768M")},
            )

    def start(self) -> None:
        self.started_here = not _listening("127.0.0.1", 9043)
        self._sh("start", str(CLUSTER_SIZE), timeout=900)

    def kill(self, node: str) -> None:
        self._sh("kill", node, str(CLUSTER_SIZE), timeout=60)

    def restart(self, node: str) -> None:
        """Returns once the ring is whole again."""
        self._sh("restart", node, str(CLUSTER_SIZE), timeout=600)

    def stop(self) -> None:
        if self.started_here:
            self._sh("stop", str(CLUSTER_SIZE), timeout=300)


@dataclass
class MariaDB:
    """A mariadbd of its own (fresh datadir and socket under ``root``, its own port), killable: the
    chaos run's (a free port) and the fault suite's (``tests/faults/conftest.py``: 3307). ``install``
    makes the datadir, starts it and creates ``database`` with the ``notee`` user."""

    root: Path
    database: str = "notee_chaos"
    port: int = field(default_factory=free_port)
    log: Path | None = None  # mariadbd's output; default root/mariadb.log
    buffer_pool: str = "128M"
    max_connections: int = 400
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)  # every incarnation's

    @property
    def socket_path(self) -> Path:
        return self.root / "mysqld.sock"

    @property
    def url(self) -> str:
        return f"mysql+pymysql://notee:notee@127.0.0.1:{self.port}/{self.database}"

    @staticmethod
    def _user() -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []  # mariadbd refuses root unless told

    def install(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                *self._user(),
                f"--datadir={self.root / 'data'}",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ],
            check=True,
            timeout=120,
            capture_output=True,
        )
        self.start()
        self.sql(
            f"CREATE DATABASE {self.database} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;\n"
            "CREATE USER 'notee'@'127.0.0.1' IDENTIFIED BY 'notee';\n"
            "CREATE USER 'notee'@'localhost' IDENTIFIED BY 'notee';\n"
            f"GRANT ALL PRIVILEGES ON {self.database}.* TO 'notee'@'127.0.0.1';\n"
            f"GRANT ALL PRIVILEGES ON {self.database}.* TO 'notee'@'localhost';\nFLUSH PRIVILEGES;\n"
        )

    def start(self) -> None:
        """Start it (again: InnoDB recovers after a kill); returns once it answers a ping."""
        with open(self.log or self.root / "mariadb.log", "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    "/usr/sbin/mariadbd",
                    "--no-defaults",
                    *self._user(),
                    f"--datadir={self.root / 'data'}",
                    f"--socket={self.socket_path}",
                    f"--port={self.port}",
                    "--bind-address=127.0.0.1",
                    f"--pid-file={self.root / 'mysqld.pid'}",
                    f"--innodb-buffer-pool-size={self.buffer_pool}",
                    "--skip-log-bin",
                    f"--max-connections={self.max_connections}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.pids.append(self.proc.pid)
        deadline = time.monotonic() + 60
        while not (_listening("127.0.0.1", self.port) and self.answers()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mariadbd did not start; see {self.log or self.root / 'mariadb.log'}")
            time.sleep(0.2)

    def answers(self) -> bool:
        r = subprocess.run(
            ["mariadb-admin", "--no-defaults", f"--socket={self.socket_path}", "-uroot", "ping"],
            capture_output=True,
            timeout=10,
        )
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
        subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={self.socket_path}", "-uroot"],
            input=statements.encode(),
            check=True,
            timeout=30,
        )


@dataclass
class Proc:
    """One Notee process (``python -m notee <args>``, or the skewed scheduler) that can be killed
    and started again under the same name; every incarnation's pid is remembered."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    port: int = 0
    metrics_port: int = 0  # a worker's, scheduler's or dispatcher's /metrics (the API's is on ``port``)
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    started_at: float = 0.0  # the current incarnation's

    def start(self) -> None:
        self.started_at = time.time()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.pids.append(self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        """The exit code, SIGKILL after ``timeout`` s."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def stop(self, timeout: float = 30) -> int | None:
        self.signal(signal.SIGTERM)
        return self.wait(timeout)


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def notee_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "notee", *args]


@contextmanager
def emulator(journal: Path) -> Iterator[EmulatorControl]:
    """A realistic emulator (OAuth, quotas, APNs HTTP/2 with GOAWAY) writing its delivery journal."""
    saved = os.environ.get("NOTEE_EMULATOR_JOURNAL")
    os.environ["NOTEE_EMULATOR_JOURNAL"] = str(journal)  # the emulator's process reads it at start
    try:
        with local_emulator(realistic=True) as emu:
            yield emu
    finally:
        if saved is None:
            os.environ.pop("NOTEE_EMULATOR_JOURNAL", None)
        else:
            os.environ["NOTEE_EMULATOR_JOURNAL"] = saved


def drop_keyspaces(env: dict[str, str]) -> None:
    """The run's keyspaces start empty: an earlier run's rows (its MariaDB is gone) would be orphans
    the final reconcile counts as this run's."""
    from cassandra.cluster import Cluster as CqlCluster  # deferred: only the full run needs the driver here

    cql = CqlCluster(env["NOTEE_CASSANDRA_HOSTS"].split(","), port=int(env["NOTEE_CASSANDRA_PORT"]))
    try:
        session = cql.connect()
        for name in ("NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION", "NOTEE_CASSANDRA_KEYSPACE_NUMBERING"):
            session.execute(f"DROP KEYSPACE IF EXISTS {env[name]}", timeout=120)
    finally:
        cql.shutdown()


def cluster_env() -> dict[str, str]:
    return {
        "NOTEE_CASSANDRA_HOSTS": ",".join(f"127.0.0.{n}" for n in range(1, CLUSTER_SIZE + 1)),
        "NOTEE_CASSANDRA_PORT": "9043",
        "NOTEE_CASSANDRA_REPLICATION": "{'class': 'SimpleStrategy', 'replication_factor': 3}",
        "NOTEE_CASSANDRA_CONSISTENCY": "QUORUM",
        "NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION": "notification_chaos",
        "NOTEE_CASSANDRA_KEYSPACE_NUMBERING": "numbering_chaos",
    }
