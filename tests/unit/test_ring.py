"""When a multi-node Cassandra cluster counts as ready (notee/store/ring.py, issue 14 item 9): the
decision from two looks at every node, table-driven. The live check runs in the fault suite, whose
cluster start waits for it (tests/faults/test_schema_agreement.py)."""

from __future__ import annotations

import pytest

from notee.store.ring import NodeView, problems

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def view(
    host: str,
    *,
    normal: set[str] | None = None,
    beat: int = 10,
    schema: set[str] | None = None,
    error: str | None = None,
    stale: set[str] = frozenset(),
) -> NodeView:
    return NodeView(
        host,
        normal=set(HOSTS) if normal is None else normal,
        heartbeats={h: (0 if h in stale else beat) for h in HOSTS},
        schema_versions={"v1"} if schema is None else schema,
        error=error,
    )


BEFORE = {h: view(h, beat=5) for h in HOSTS}


@pytest.mark.parametrize(
    "after, expected",
    [
        ({h: view(h) for h in HOSTS}, []),
        # each node answers CQL but believes it is alone (the failure of the issue)
        ({h: view(h, normal={h}) for h in HOSTS}, [f"{h}: does not see" for h in HOSTS]),
        # node 3 has not answered yet
        ({h: view(h) for h in HOSTS[:2]}, ["127.0.0.3: does not answer CQL"]),
        # node 1 sees no heartbeat from node 2 (not gossiping: down or paused)
        (
            {**{h: view(h) for h in HOSTS}, "127.0.0.1": view("127.0.0.1", stale={"127.0.0.2"})},
            ["127.0.0.1: no gossip heartbeat from ['127.0.0.2']"],
        ),
        # a replica down in node 2's failure detector
        (
            {**{h: view(h) for h in HOSTS}, "127.0.0.2": view("127.0.0.2", error="ALL read: Unavailable")},
            ["127.0.0.2: ALL read: Unavailable"],
        ),
        # node 3 disagrees on the schema with its peers, or the nodes each agree with themselves only
        (
            {**{h: view(h) for h in HOSTS}, "127.0.0.3": view("127.0.0.3", schema={"v1", "v2"})},
            ["127.0.0.3: schema versions disagree (2)"],
        ),
        (
            {**{h: view(h) for h in HOSTS[:2]}, "127.0.0.3": view("127.0.0.3", schema={"v2"})},
            ["nodes report 2 schema versions"],
        ),
    ],
)
def test_ready_only_when_every_node_sees_every_other_up_normal_and_agreeing(after, expected):
    found = problems(BEFORE, after, HOSTS)
    assert len(found) == len(expected), found
    for line, prefix in zip(found, expected, strict=True):
        assert line.startswith(prefix), (line, prefix)
