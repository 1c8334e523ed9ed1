"""`notee migrate` on a multi-node cluster waits for schema agreement after each DDL statement
(issue 14, item 9).

A schema change is applied by the node that coordinates it and spread by gossip; a next statement
coordinated elsewhere must not race it. The runner waits after each DDL statement until every live
node reports one schema version, and fails the file when that does not happen in time. Proved on the
real 3-node cluster: with the driver's own implicit wait switched off (``max_schema_agreement_wait=0``),
every node knows every table the moment ``migrate_cassandra`` returns; with node 3 paused (SIGSTOP:
still counted live, applying nothing) the run fails with "no schema agreement" and records nothing
for that file; resumed, the same run completes.
"""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import WhiteListRoundRobinPolicy

from notee.core.settings import Settings
from notee.store import ring
from notee.usecases import migrate
from tests.faults.conftest import FaultCluster

pytestmark = pytest.mark.faults

PAUSED_NODE = 3


def _node_session(host: str) -> tuple[Cluster, Session]:
    """A session whose statements (DDL included) are coordinated by ``host`` alone, without the
    driver's implicit schema-agreement wait: only the runner's own wait remains."""
    profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]), request_timeout=30)
    cluster = Cluster(
        contact_points=[host],
        port=9043,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        max_schema_agreement_wait=0,
        connect_timeout=10,
    )
    return cluster, cluster.connect()


def _tables_per_node(keyspace: str) -> dict[str, set[str]]:
    seen = {}
    for host in FaultCluster.hosts():
        cluster, session = _node_session(host)
        try:
            rows = session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,))
            seen[host] = {r.table_name for r in rows}
        finally:
            cluster.shutdown()
    return seen


@pytest.fixture()
def agree_settings(fault_cluster: FaultCluster) -> Iterator[Settings]:
    fault_cluster.ensure_whole()  # an earlier test may have killed a node
    suffix = secrets.token_hex(3)
    settings = fault_cluster.settings.model_copy(
        update={
            "cassandra_keyspace_notification": f"agree_{suffix}",
            "cassandra_keyspace_numbering": f"agree_num_{suffix}",
            "cassandra_schema_agreement_wait_s": 5.0,
        }
    )
    yield settings
    cluster, session = _node_session("127.0.0.1")
    try:
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra_keyspace_notification}", timeout=60)
    finally:
        cluster.shutdown()


def _write(folder: Path, name: str, table: str) -> None:
    (folder / name).write_text(
        f"-- retention: test only\nCREATE TABLE IF NOT EXISTS ${{notification}}.{table} (id int PRIMARY KEY, v text);\n"
    )


def test_migrate_waits_for_schema_agreement_after_each_ddl(
    agree_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ks = agree_settings.cassandra_keyspace_notification
    folder = tmp_path / "cql"
    folder.mkdir()
    for i in range(1, 4):
        _write(folder, f"000{i}_table_{i}.cql", f"agree_{i}")
    cluster, session = _node_session("127.0.0.1")
    try:
        # A healthy ring: when the run returns, every node already knows every table it made.
        assert migrate.migrate_cassandra(session, agree_settings, folder) == [
            "0001_table_1.cql",
            "0002_table_2.cql",
            "0003_table_3.cql",
        ]
        expected = {"schema_version", "agree_1", "agree_2", "agree_3"}
        assert _tables_per_node(ks) == {host: expected for host in FaultCluster.hosts()}

        # Node 3 paused: it is still counted live but applies nothing, so no agreement is reached.
        # Paused right before the new file's DDL, not before the run: the run's first read (of
        # schema_version, a range read at LOCAL_ONE) may be served by node 3, and would then time out
        # before any DDL is tried, which is not what this test is about.
        _write(folder, "0004_table_4.cql", "agree_4")
        pid = FaultCluster.node_pid(PAUSED_NODE)
        execute_ddl = migrate._execute_ddl

        def pause_before_the_new_table(session: Session, statement: str, wait_s: float) -> None:
            if "agree_4" in statement:
                os.kill(pid, signal.SIGSTOP)
            execute_ddl(session, statement, wait_s)

        monkeypatch.setattr(migrate, "_execute_ddl", pause_before_the_new_table)
        try:
            with pytest.raises(migrate.MigrationError, match="no schema agreement 5 s after"):
                migrate.migrate_cassandra(session, agree_settings, folder)
        finally:
            os.kill(pid, signal.SIGCONT)
            monkeypatch.undo()
        applied = {r.version for r in session.execute(f"SELECT version FROM {ks}.schema_version")}
        assert applied == {1, 2, 3}  # the unfinished file is not recorded: the next run applies it

        ring.wait_ready(FaultCluster.hosts(), 9043, timeout_s=300)
        assert migrate.migrate_cassandra(session, agree_settings, folder) == ["0004_table_4.cql"]
        assert _tables_per_node(ks) == {host: expected | {"agree_4"} for host in FaultCluster.hosts()}
    finally:
        cluster.shutdown()
