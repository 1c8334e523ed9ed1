"""Fixtures of the fault suite (``make test-faults``): a 3-node Cassandra cluster and a second
MariaDB that may be killed. Notee processes, job watching and delivery counts come from
``tests/support`` (processes, fanout, emulator).

Nothing here touches the shared servers the rest of the suite uses (MariaDB on 3306, the single
Cassandra node on 9042): the cluster runs on 127.0.0.1-3:9043 (services/cassandra/cluster.sh) with
its own keyspaces, and the killable MariaDB runs on 3307 with its own datadir under ``.run/`` (``chaos.stack.MariaDB``, the chaos run's kind).
Every subprocess writes its output into the session's log folder, so the final secrets scan
(tests/support/logscan.py) covers it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from chaos.stack import MariaDB
from notee.core.settings import Settings
from notee.store.runtime import Runtime
from tests.support.logscan import log_dir
from tests.support.processes import NoteeProcess, settings_from, subprocess_env

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "services" / "cassandra" / "cluster.sh"
CLUSTER_SIZE = 3


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
            subprocess.run(
                [str(CLUSTER_SH), "start", str(CLUSTER_SIZE)],
                check=True,
                timeout=900,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "CASSANDRA_HEAP": "768M"},
            )

    @staticmethod
    def hosts() -> list[str]:
        return [f"127.0.0.{n}" for n in range(1, CLUSTER_SIZE + 1)]

    @staticmethod
    def node_pid(node: int) -> int:
        """The pid of the java process serving CQL on node N's address (whoever's checkout started it)."""
        out = subprocess.run(
            ["ss", "-Hltnp", f"src 127.0.0.{node}:9043"], capture_output=True, text=True, check=True, timeout=10
        ).stdout
        match = re.search(r"pid=(\d+)", out)
        if match is None:
            raise RuntimeError(f"no process listens on 127.0.0.{node}:9043: {out!r}")
        return int(match.group(1))

    def freeze(self, node: int) -> None:
        """SIGSTOP the node: it stops answering (peers and clients time out) but keeps its data and
        its place in the ring, so SIGCONT ends the outage at a known instant (no restart time)."""
        os.kill(self.node_pid(node), signal.SIGSTOP)

    def thaw(self, node: int) -> None:
        os.kill(self.node_pid(node), signal.SIGCONT)


def cluster_overrides() -> dict[str, str]:
    return {
        "NOTEE_CASSANDRA_HOSTS": ",".join(f"127.0.0.{n}" for n in range(1, CLUSTER_SIZE + 1)),
        "NOTEE_CASSANDRA_PORT": "9043",
        "NOTEE_CASSANDRA_REPLICATION": "{'class': 'SimpleStrategy', 'replication_factor': 3}",
        "NOTEE_CASSANDRA_CONSISTENCY": "QUORUM",
        "NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION": "notification_fault",
        "NOTEE_CASSANDRA_KEYSPACE_NUMBERING": "numbering_fault",
    }


@pytest.fixture(scope="session")
def fault_cluster(migrated) -> Iterator[FaultCluster]:
    """Start the 3-node cluster (reused if already running), migrate its keyspaces at RF 3, stop it
    at the end of the session. ``cluster.sh start`` returns only once every node sees the others UP
    and NORMAL with one schema version (notee/store/ring.py): answering CQL is not enough, a node
    that has not gossiped yet believes it is alone (issue 14, item 9)."""
    from notee.usecases import migrate

    log_path = log_dir() / "cassandra-cluster.log"
    env = subprocess_env(**cluster_overrides())
    settings = settings_from(env)
    runtime = Runtime(settings)
    try:
        # Inside the try: a start that fails (or a ring that never forms) still stops the nodes it started.
        with open(log_path, "ab") as log:
            subprocess.run(
                [str(CLUSTER_SH), "start", str(CLUSTER_SIZE)],
                check=True,
                timeout=900,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "CASSANDRA_HEAP": "768M"},
            )
        deadline = time.monotonic() + 120
        while len([h for h in runtime.cql.cluster.metadata.all_hosts() if h.is_up]) < CLUSTER_SIZE:
            if time.monotonic() > deadline:
                raise RuntimeError("the driver does not see 3 live nodes")
            time.sleep(1)
        migrate.migrate_cassandra(runtime.cql, settings)
        yield FaultCluster(settings, runtime, env)
    finally:
        runtime.close()
        with open(log_path, "ab") as log:
            subprocess.run(
                [str(CLUSTER_SH), "stop", str(CLUSTER_SIZE)], timeout=300, stdout=log, stderr=subprocess.STDOUT
            )


# --- a second, killable MariaDB ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def killable_mariadb() -> Iterator[MariaDB]:
    """A fresh second MariaDB (chaos.stack's, the chaos run's own kind) on 127.0.0.1:3307, datadir
    under .run/mariadb-fault, with the notee user and a migrated ``notee_fault`` database."""
    from notee.usecases import migrate

    db = MariaDB(
        REPO / ".run" / "mariadb-fault",
        database="notee_fault",
        port=3307,
        log=log_dir() / "mariadb-fault.log",
        buffer_pool="64M",
        max_connections=300,
    )
    try:
        db.install()
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


# --- outage tests (issue 14) ----------------------------------------------------------------------------


def wait_sent(runtime: Runtime, job_id: str, sent: int, timeout: float = 300) -> int:
    """Poll until the job has sent at least ``sent`` (fails if it ended first); returns its sent count."""
    from notee.store import jobs_sql

    deadline = time.monotonic() + timeout
    while True:
        with runtime.sessions() as session:
            job, progress = jobs_sql.get_job(session, job_id), jobs_sql.progress(session, job_id)
        assert job is not None
        if progress.sent >= sent:
            assert job.state == "running", f"the publish ended before the fault could start: {job.state} {progress}"
            return progress.sent
        assert job.state in ("queued", "running"), f"job {job.state}: {job.error}"
        assert time.monotonic() < deadline, f"publish made no progress: {progress}"
        time.sleep(0.2)


def outage_releases(processes: list[NoteeProcess]) -> int:
    """How many times the workers released a task for an outage (their log lines): proves the fault
    reached them."""
    return sum(
        p.log_path.read_text(errors="replace").count("released without advancing")
        for p in processes
        if p.log_path is not None and p.log_path.exists()
    )


def task_attempts(runtime: Runtime, job_id: str) -> list[int]:
    from notee.store import jobs_sql

    with runtime.sessions() as session:
        return [t.attempts for t in jobs_sql.tasks(session, job_id)]


def dead_letters_of(runtime: Runtime, job_id: str) -> int:
    with runtime.engine.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM dead_letter WHERE job_id = :j"), {"j": job_id}).scalar())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The node-loss test runs last, so no other test runs on a ring with a node that was SIGKILLed
    and restarted: once, the schema-agreement test's first read after it timed out on the server
    (``ReadTimeout``, LOCAL_ONE, 0 responses; docs/RELIABILITY.md). The quorum-loss test needs no
    place of its own: its reads blocking through the freeze (0 outage releases) was the driver's
    paging, which started no timer for a next page (fixed: ``notee.store.cassandra.pages``), not
    the node-loss test's restart. The receipts' node-loss test kills a node too: it runs beside it. The chaos run (which stops and restarts nodes too) runs after it."""
    items.sort(
        key=lambda item: (
            2
            if "test_chaos_run" in item.nodeid
            else 1
            if "test_cassandra_node_loss" in item.nodeid or "test_receipts_node_loss" in item.nodeid
            else 0
        )
    )
