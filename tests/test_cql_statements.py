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
