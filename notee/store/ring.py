"""Is a multi-node Cassandra cluster really one ring? ``notee cassandra-ready``.

A node answering CQL is not a cluster member yet: until gossip has run, each freshly started node
believes it is alone, creates a keyspace with "replication factor 3 is higher than the number of
nodes 1", and the next statement on another node finds no such keyspace. Ready therefore means,
asked of *each* node as its own coordinator (a session whitelisted to that node):

* its gossip state (``system_views.gossip_info``) lists every expected node as ``NORMAL`` (joined
  the ring with its tokens), and every other node's heartbeat advances between two looks (it is
  gossiping, i.e. alive);
* (rings of 3 or more nodes) a full-range read of ``system_distributed.repair_history`` (RF 3) at
  consistency ``ALL`` succeeds: every range's replicas — on a 3-node ring, every node — are UP in
  this node's failure detector (a down replica makes the coordinator answer ``Unavailable``);
* it and all its peers report the same schema version (schema agreement).

No ``nodetool`` is needed (the local nodes run without JMX).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement

log = logging.getLogger(__name__)

# system_distributed is created with SimpleStrategy RF 3: on a ring of 3 or more nodes an ALL read
# needs 3 live replicas per range (a node that believes it is alone answers "required 3, alive 1").
_DISTRIBUTED_RF = 3
_ALL_READ = SimpleStatement(
    "SELECT keyspace_name FROM system_distributed.repair_history LIMIT 1", consistency_level=ConsistencyLevel.ALL
)


@dataclass
class NodeView:
    """What one node says about the ring."""

    address: str
    normal: set[str] = field(default_factory=set)  # endpoints gossip shows as NORMAL
    heartbeats: dict[str, int] = field(default_factory=dict)
    schema_versions: set[str] = field(default_factory=set)  # its own and its peers'
    error: str | None = None


class _Nodes:
    """One driver ``Cluster`` per node, whitelisted to it, so each statement is coordinated (and
    each system table answered) by that node. Connected lazily and rebuilt after a failed connect
    (the driver shuts a cluster down when its first connection fails): a node may not answer yet."""

    def __init__(self, port: int, protocol_version: int) -> None:
        self.port = port
        self.protocol_version = protocol_version
        self.clusters: dict[str, Cluster] = {}
        self.sessions: dict[str, Session] = {}

    def session(self, host: str) -> Session:
        if host not in self.sessions:
            profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]), request_timeout=10)
            cluster = Cluster(
                contact_points=[host],
                port=self.port,
                protocol_version=self.protocol_version,
                connect_timeout=5,
                execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            )
            try:
                self.sessions[host] = cluster.connect()
            except Exception:
                cluster.shutdown()
                raise
            self.clusters[host] = cluster
        return self.sessions[host]

    def close(self) -> None:
        for cluster in self.clusters.values():
            cluster.shutdown()


def _look(session: Session, address: str, *, check_all: bool) -> NodeView:
    view = NodeView(address)
    # Nodes of 4.0+ gossip STATUS_WITH_PORT; the legacy STATUS column is set for the local node only.
    for row in session.execute("SELECT address, status, status_with_port, heartbeat FROM system_views.gossip_info"):
        addr = str(row.address)
        view.heartbeats[addr] = int(row.heartbeat or 0)
        if (row.status_with_port or row.status or "").startswith("NORMAL"):
            view.normal.add(addr)
    local = session.execute("SELECT schema_version FROM system.local").one()
    view.schema_versions.add(str(local.schema_version))
    for row in session.execute("SELECT schema_version FROM system.peers"):
        view.schema_versions.add(str(row.schema_version))
    if not check_all:
        return view
    try:
        session.execute(_ALL_READ)
    except Exception as exc:  # Unavailable: a replica is down in this node's view
        view.error = f"ALL read: {type(exc).__name__}"
    return view


def problems(before: dict[str, NodeView], after: dict[str, NodeView], hosts: list[str]) -> list[str]:
    """What still keeps the ring from being ready (empty: ready). Pure, from two looks at each node."""
    found = []
    expected = set(hosts)
    for host in hosts:
        view = after.get(host)
        if view is None:
            found.append(f"{host}: does not answer CQL")
            continue
        if view.error:
            found.append(f"{host}: {view.error}")
        missing = expected - view.normal
        if missing:
            found.append(f"{host}: does not see {sorted(missing)} as NORMAL")
        earlier = before.get(host)
        stale = [
            peer
            for peer in sorted(expected - {host})
            if earlier is None or view.heartbeats.get(peer, 0) <= earlier.heartbeats.get(peer, 0)
        ]
        if stale:
            found.append(f"{host}: no gossip heartbeat from {stale}")
        if len(view.schema_versions) != 1:
            found.append(f"{host}: schema versions disagree ({len(view.schema_versions)})")
    versions = {v for h in hosts if h in after for v in after[h].schema_versions}
    if len(versions) > 1 and not found:
        found.append(f"nodes report {len(versions)} schema versions")
    return found


def wait_ready(
    hosts: list[str], port: int, *, protocol_version: int = 5, timeout_s: float = 300, interval_s: float = 2.0
) -> float:
    """Block until every node in ``hosts`` sees all of them UP, NORMAL and agreeing on the schema;
    returns the seconds waited. Raises ``TimeoutError`` naming what was still wrong."""
    started = time.monotonic()
    deadline = started + timeout_s
    before: dict[str, NodeView] = {}
    nodes = _Nodes(port, protocol_version)
    try:
        while True:
            after: dict[str, NodeView] = {}
            for host in hosts:
                try:
                    after[host] = _look(nodes.session(host), host, check_all=len(hosts) >= _DISTRIBUTED_RF)
                except Exception as exc:  # not answering (or not connectable) yet: keep waiting
                    log.debug("ring check: %s: %s", host, exc)
            last = problems(before, after, hosts) if before else ["first look"]
            if not last:
                waited = time.monotonic() - started
                log.info("cassandra ring of %d node(s) ready after %.1f s", len(hosts), waited)
                return waited
            if time.monotonic() > deadline:
                raise TimeoutError(f"cassandra ring not ready after {timeout_s:.0f} s: " + "; ".join(last))
            before = after
            time.sleep(interval_s)
    finally:
        nodes.close()
