"""Every Cassandra page read ends within its request timeout, the second and later pages too.

A Cassandra node that stops answering while its TCP connections stay open (SIGSTOP, a GC pause,
a partition) is made here with a TCP switch in front of the real single node, frozen between two
pages. The driver's own paging (``ResultSet.fetch_next_page``) starts no timer for a next page, so
such a read waited until the node answered again: the quorum-loss fault test's workers blocked
through a 60 s freeze instead of releasing their tasks (docs/RELIABILITY.md, "Quorum loss").
Each page now being its own request (``notee.store.cassandra.pages``), the read must fail with the
client request timeout (``OperationTimedOut``, an outage) while the node is still frozen, and the
read resumed from the first page's paging state afterwards must return every other row. (Without
that timer the driver's heartbeat ends such a read too, but 30-60 s later and as a connection
error: the assertion on the exception tells the two apart.)
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from cassandra import OperationTimedOut

from notee.core.settings import Settings
from notee.core.vocabulary import TOKEN, TopicTarget
from notee.store.cassandra import rows
from notee.store.cql.recipients import stream_recipients
from notee.store.outage import is_store_outage
from notee.store.runtime import Runtime
from tests.support.fanout import seed_topic
from tests.support.tcp_switch import TcpSwitch

DEVICES = 30
PAGE = 10
# How long the frozen node is given to make the read fail: far above the 2 s request timeout used
# here. Not a performance bound: a read still waiting then waits for the thaw (and succeeds).
FROZEN_FOR_AT_MOST_S = 90


@pytest.fixture()
def frozen_link(settings: Settings) -> Iterator[tuple[TcpSwitch, Runtime]]:
    """A runtime whose only Cassandra contact is a TCP switch in front of the single test node."""
    with TcpSwitch(settings.cassandra_hosts[0], settings.cassandra_port) as switch:
        linked = Runtime(
            settings.model_copy(update={"cassandra_port": switch.port, "cassandra_request_timeout_s": 2.0})
        )
        try:
            yield switch, linked
        finally:
            switch.thaw()
            linked.close()


def _read_while_frozen(switch: TcpSwitch, read: Callable[[], Any]) -> BaseException | None:
    """Run ``read`` with the switch frozen; thaw once it ended (or the cap passed). Its exception,
    or None when it returned (it waited for the thaw)."""
    switch.freeze()
    with ThreadPoolExecutor(1) as pool:
        future: Future[Any] = pool.submit(read)
        try:
            future.exception(timeout=FROZEN_FOR_AT_MOST_S)
        except TimeoutError:
            pass
        finally:
            switch.thaw()
        return future.exception()


def test_a_fan_out_page_after_the_first_fails_while_the_node_is_frozen(
    frozen_link: tuple[TcpSwitch, Runtime], runtime: Runtime, service_id: str
) -> None:
    switch, linked = frozen_link
    key, topic = "k" + secrets.token_hex(4), "frozen"
    tokens = seed_topic(runtime, service_id, "news", key, topic, DEVICES)
    target = TopicTarget(topic)

    pages = stream_recipients(linked.statements, key, target, 0, PAGE)
    first, state = next(pages)
    assert len(first) == PAGE and state is not None

    error = _read_while_frozen(switch, lambda: next(pages))
    assert error is not None, "the second page waited for the frozen node instead of failing"
    assert isinstance(error, OperationTimedOut), f"not ended by the request timeout: {error!r}"
    assert is_store_outage(error)  # so the worker releases its task

    # The outage passed: the task's checkpoint (the first page's state) still reads the rest.
    rest = [r[TOKEN] for page, _ in stream_recipients(linked.statements, key, target, 0, PAGE, state) for r in page]
    assert [r[TOKEN] for r in first] + rest == tokens


def test_a_scan_page_after_the_first_fails_while_the_node_is_frozen(
    frozen_link: tuple[TcpSwitch, Runtime], runtime: Runtime, service_id: str
) -> None:
    """``rows`` (the reconcile and insight scans) pages the same way."""
    switch, linked = frozen_link
    key, topic = "k" + secrets.token_hex(4), "scan"
    tokens = seed_topic(runtime, service_id, "news", key, topic, DEVICES)
    stmt = linked.statements.topic_page.bind((0, key, topic))
    stmt.fetch_size = PAGE

    scan = rows(linked.cql, stmt)
    read = [next(scan) for _ in range(PAGE)]  # the whole first page

    error = _read_while_frozen(switch, lambda: next(scan))
    assert error is not None, "the scan's second page waited for the frozen node instead of failing"
    assert isinstance(error, OperationTimedOut), f"not ended by the request timeout: {error!r}"
    assert len(read) == PAGE and len(tokens) == DEVICES
