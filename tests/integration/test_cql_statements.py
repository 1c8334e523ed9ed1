"""The prepared statements' retry safety: counters are never resent, everything else may be."""

from cassandra.query import PreparedStatement


def test_only_counter_increments_are_not_idempotent(runtime):
    st = runtime.statements
    prepared = {name: s for name, s in vars(st).items() if isinstance(s, PreparedStatement)}
    assert {n for n, s in prepared.items() if not s.is_idempotent} == {
        "counter_add_no",
        "counter_add_count",
        "counter_add_version",
        "counter_add_topic",
    }
    bound = st.topic_insert.bind((0, "k", "t", 1, "tok", "AOS", "u", 1, ""))
    assert bound.is_idempotent
    assert not st.counter_add_no.bind((1, "S", "TOPIC", "t")).is_idempotent


def test_rows_bound_by_the_binder_equal_the_drivers(runtime):
    """``RowBinder`` appends what ``BatchStatement.add`` appends (a private list of the locked driver
    version): a driver upgrade that changes it fails here, not in production. Every statement the
    subscribe writes bind that way, with real rows (a user with two devices and its user-level row)."""
    from cassandra.query import BatchStatement, BatchType

    from notee.store.cql import RowBinder

    st = runtime.statements
    rows = st.topic_subscription_rows(
        user_id="u-1",
        service="S",
        type_="news",
        topic="sports",
        notification_key="k-1",
        devices=[(30_001, "tok-a", "AOS"), (30_002, "tok-b", "IOS")],
        registered_at=1_700_000_000_000,
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
    assert ours._statements_and_parameters == theirs._statements_and_parameters
    assert (ours.routing_key, ours.keyspace) == (theirs.routing_key, theirs.keyspace)
    assert ours.routing_key is not None
