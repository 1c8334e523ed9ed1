"""The Cassandra cluster and session: one per process, created after fork, token-aware.

The DataStax driver silently falls back from token-aware to round-robin routing when its murmur3
extension is missing; ``connect`` refuses to run in that state, because every fan-out page would
then take an extra network hop through a coordinator.

Multi-page reads go through ``pages`` / ``rows``: each page is its own request with its own
timeout. The driver's own paging (``ResultSet.fetch_next_page``, or iterating a ``ResultSet``
past its first page) has none (see ``pages``). A page read this way is freed by reference
counting, not left to the garbage collector (see ``pages``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cassandra import ConsistencyLevel
from cassandra import metadata as cassandra_metadata
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, ResultSet, Session
from cassandra.policies import DCAwareRoundRobinPolicy, FallthroughRetryPolicy, TokenAwarePolicy
from cassandra.query import Statement, tuple_factory

from notee.core.settings import Settings
from notee.store.outage import count_cassandra_error, watch_cassandra

# Named execution profile for counter updates: same routing, but the default retry policy could
# resend a timed-out write, and counters are not idempotent (DATA-RULES.md). The driver's
# ``FallthroughRetryPolicy`` never retries (it answers RETHROW to read/write timeouts, unavailable
# and request errors alike: tests/unit/test_cassandra_profiles.py);
# the caller decides.
COUNTER_PROFILE = "counter"
# Named execution profile for the fan-out's page reads: rows come back as plain tuples, which the
# read hands on as they are (``RecipientRow``), without building a namedtuple per row.
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
        # The control connection reads the schema of every keyspace on the cluster when it connects
        # (and refreshes it on schema changes): its cost grows with the cluster's keyspaces, not ours.
        # The driver's 2 s default failed a loaded test machine's connect (NoHostAvailable).
        control_connection_timeout=settings.cassandra_request_timeout_s,
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


def pages(
    session: Session,
    statement: Statement,
    paging_state: bytes | None = None,
    execution_profile: object = EXEC_PROFILE_DEFAULT,
) -> Iterator[ResultSet]:
    """Every page of ``statement`` (from ``paging_state``), each read by its own ``session.execute``
    with the previous page's paging state, so each page waits at most the profile's
    ``request_timeout`` and then raises ``OperationTimedOut``. Use only a page's ``current_rows``:
    iterating a ``ResultSet`` past its first page would fetch the next one the driver's way.

    The driver's way (``ResultSet.fetch_next_page``) starts no client-side timer for a next page
    (cassandra-driver 3.30: the first page's timer, cancelled but still set, makes
    ``ResponseFuture._start_timer`` a no-op). A page whose coordinator is frozen (GC pause, network
    partition with the TCP connection still open) then waits until that node answers again: in the
    quorum-loss fault test, a worker's read blocked through the whole 60 s freeze instead of
    failing and releasing its task (docs/RELIABILITY.md, "Quorum loss")."""
    while True:
        result = session.execute(statement, paging_state=paging_state, execution_profile=execution_profile)
        # The request's timer (cancelled once the page arrived) and its future point at each other
        # (``Timer.callback`` is the future's bound ``_on_timeout``): a cycle that only the garbage
        # collector frees, the page's rows with it. Dropped here, the page is freed as soon as its
        # reader lets go; kept, every page cost a collection (~0.3 µs per row). A private attribute
        # of the pinned driver: docs/BENCHMARKS.md "Performance detours"; tests/integration/test_cassandra_pins.py.
        result.response_future._timer = None
        yield result
        paging_state = result.paging_state
        if paging_state is None:
            return


def rows(session: Session, statement: Statement, execution_profile: object = EXEC_PROFILE_DEFAULT) -> Iterator[Any]:
    """Every row of ``statement``, ``statement.fetch_size`` at a time, each page bounded by the
    request timeout (``pages``)."""
    for page in pages(session, statement, execution_profile=execution_profile):
        yield from page.current_rows
