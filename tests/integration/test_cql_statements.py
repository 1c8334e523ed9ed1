"""The prepared statements' retry safety: counters are never resent, everything else may be."""

from cassandra.query import PreparedStatement

from notee.store.cql.rows import SubscriptionRef
from tests.support.pins import ROW_BINDER


def test_only_counter_increments_are_not_idempotent(runtime):
    st = runtime.statements
    prepared = {name: s for name, s in vars(st).items() if isinstance(s, PreparedStatement)}
    assert {n for n, s in prepared.items() if not s.is_idempotent} == {
        "counter_add_no",
        "counter_add_count",
        "counter_add_version",
        "counter_add_topic",
        "counter_add_engagement_job",
        "counter_add_engagement_scope",
        "counter_add_engagement_day",
    }
    bound = st.topic_insert.bind((0, "k", "t", 1, "tok", "AOS", "u", 1, ""))
    assert bound.is_idempotent
    assert not st.counter_add_no.bind((1, "S", "TOPIC", "t")).is_idempotent


def test_rows_bound_by_the_binder_equal_the_drivers(runtime):
    """``RowBinder`` appends what ``BatchStatement.add`` appends (a private list of the pinned driver
    version: a performance detour, docs/BENCHMARKS.md "Performance detours"): a driver upgrade that
    changes it fails here, naming the detour and the versions, not in production. Every statement the
    subscribe writes bind that way, with real rows (a user with two devices and its user-level row)."""
    from cassandra.query import BatchStatement, BatchType

    from notee.store.cql.binder import RowBinder

    st = runtime.statements
    rows = st.topic_subscription_rows(
        SubscriptionRef("S", "u-1", "news", "k-1", "sports", 1_700_000_000_000),
        [(30_001, "tok-a", "AOS"), (30_002, "tok-b", "IOS")],
        with_user_level=True,
        zone="Europe/Berlin",
    )
    rows.append((st.topic_insert_moved, (1, "k-1", "sports", 30_003, "tok-c", "AOS", "u-1", 1, "", "tok-0")))
    assert {id(s) for s, _ in rows} >= {id(st.topic_insert), id(st.occupancy_insert), id(st.index_insert)}
    theirs, ours = BatchStatement(batch_type=BatchType.LOGGED), BatchStatement(batch_type=BatchType.LOGGED)
    binder = RowBinder(runtime.cql.cluster.protocol_version)
    for stmt, params in rows:
        theirs.add(stmt, params)
        binder.add(ours, stmt, params)
    assert ours._statements_and_parameters == theirs._statements_and_parameters, ROW_BINDER.loud(
        "the rows RowBinder appends differ from BatchStatement.add's"
    )
    assert (ours.routing_key, ours.keyspace) == (theirs.routing_key, theirs.keyspace), ROW_BINDER.loud(
        "the batch's routing key or keyspace differs from the driver's"
    )
    assert ours.routing_key is not None
