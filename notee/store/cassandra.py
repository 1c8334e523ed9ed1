"""The Cassandra cluster and session: one per process, created after fork, token-aware.

The DataStax driver silently falls back from token-aware to round-robin routing when its murmur3
extension is missing; ``connect`` refuses to run in that state, because every fan-out page would
then take an extra network hop through a coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass

from cassandra import ConsistencyLevel
from cassandra import metadata as cassandra_metadata
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import DCAwareRoundRobinPolicy, FallthroughRetryPolicy, TokenAwarePolicy
from cassandra.query import tuple_factory

from notee.settings import Settings
from notee.store.outage import count_cassandra_error, watch_cassandra

# Named execution profile for counter updates: same routing, but the default retry policy could
# resend a timed-out write, and counters are not idempotent (DATA-RULES.md). The driver's
# ``FallthroughRetryPolicy`` never retries (it answers RETHROW to read/write timeouts, unavailable
# and request errors alike: tests/test_cassandra_profiles.py);
# the caller decides.
COUNTER_PROFILE = "counter"
# Named execution profile for the fan-out's page reads: rows come back as plain tuples, which the
# read turns into ``Recipient``s without building a namedtuple per row first.
PAGE_PROFILE = "pages"


class NotTokenAware(RuntimeError):
    """The driver is not routing by token (missing murmur3 extension or wrong policy)."""


@dataclass(frozen=True)
class Keyspaces:
    notification: str
    numbering: str


def keyspaces(settings: Settings) -> Keyspaces:
    return Keyspaces(settings.cassandra_keyspace_notification, settings.cassandra_keyspace_numbering)


def _routing(settings: Settings) -> TokenAwarePolicy:
    return TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.cassandra_local_dc), shuffle_replicas=True)


def make_cluster(settings: Settings) -> Cluster:
    consistency = ConsistencyLevel.name_to_value[settings.cassandra_consistency.upper()]
    profiles = {
        EXEC_PROFILE_DEFAULT: ExecutionProfile(
            load_balancing_policy=_routing(settings),
            consistency_level=consistency,
            request_timeout=settings.cassandra_request_timeout_s,
        ),
        COUNTER_PROFILE: ExecutionProfile(
            load_balancing_policy=_routing(settings),
            retry_policy=FallthroughRetryPolicy(),
            consistency_level=consistency,
            request_timeout=settings.cassandra_request_timeout_s,
        ),
        PAGE_PROFILE: ExecutionProfile(
            load_balancing_policy=_routing(settings),
            consistency_level=consistency,
            request_timeout=settings.cassandra_request_timeout_s,
            row_factory=tuple_factory,
        ),
    }
    return Cluster(
        contact_points=settings.cassandra_hosts,
        port=settings.cassandra_port,
        execution_profiles=profiles,
        protocol_version=settings.cassandra_protocol_version,
        connect_timeout=10,
    )


def assert_token_aware(session: Session) -> None:
    if cassandra_metadata.murmur3 is None:
        raise NotTokenAware("cassandra-driver was installed without its murmur3 extension")
    policy = session.cluster.profile_manager.default.load_balancing_policy
    if not isinstance(policy, TokenAwarePolicy):
        raise NotTokenAware(f"default load-balancing policy is {type(policy).__name__}")
    if session.cluster.metadata.token_map is None:
        raise NotTokenAware("the driver built no token map (token metadata disabled?)")


def connect(settings: Settings) -> tuple[Cluster, Session]:
    """Open the process's cluster connection. Call once per process, after any fork."""
    cluster = make_cluster(settings)
    try:
        session = cluster.connect()
    except Exception as exc:
        count_cassandra_error(exc)
        cluster.shutdown()
        raise
    try:
        assert_token_aware(session)
    except Exception:
        cluster.shutdown()
        raise
    watch_cassandra(session)  # notee_store_errors_total{store="cassandra"}
    return cluster, session
