"""The counter profile never resends: a timed-out counter increment resent would count twice."""

from __future__ import annotations

from cassandra import ConsistencyLevel, WriteType
from cassandra.policies import RetryPolicy

from notee.core.settings import Settings
from notee.store.cassandra import COUNTER_PROFILE, make_cluster


def test_counter_profile_never_retries(settings: Settings) -> None:
    cluster = make_cluster(settings)  # builds profiles only; connects nothing
    policy = cluster.profile_manager.profiles[COUNTER_PROFILE].retry_policy
    one = ConsistencyLevel.ONE
    answers = [
        policy.on_read_timeout(None, one, 1, 0, False, 0),
        policy.on_write_timeout(None, one, WriteType.COUNTER, 1, 0, 0),
        policy.on_unavailable(None, one, 1, 0, 0),
        policy.on_request_error(None, one, OSError("connection reset"), 0),
    ]
    assert [decision for decision, _ in answers] == [RetryPolicy.RETHROW] * 4
    # The default profile does retry a read timeout once: the check above can tell the two apart.
    default = cluster.profile_manager.default.retry_policy
    assert default.on_read_timeout(None, one, 1, 1, False, 0)[0] == RetryPolicy.RETRY


def test_the_control_connection_waits_as_long_as_a_request(settings: Settings) -> None:
    """Its first schema read covers every keyspace on the cluster (a shared CI cluster keeps every
    run's): the driver's 2 s default is not enough there under load."""
    cluster = make_cluster(settings)
    assert cluster.control_connection_timeout == settings.cassandra_request_timeout_s >= 10
