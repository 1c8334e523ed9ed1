"""The fan-out's read: one slot of a target's recipients, page by page, resumable from a checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cassandra.protocol import ProtocolException

from notee.core.vocabulary import CycleTarget, RecipientRow, TopicTarget
from notee.store.cassandra import PAGE_PROFILE, pages
from notee.store.cql.statements import Statements


class PagingStateRejected(Exception):
    """The server refused a paging state (a protocol error: e.g. written by another server version).
    Resume the slot from the last checkpointed key instead (``after=``)."""


def stream_recipients(
    cql_statements: Statements,
    notification_key: str,
    target: TopicTarget | CycleTarget,
    slot: int,
    fetch_size: int,
    paging_state: bytes | None = None,
    *,
    after: tuple[int, str] | None = None,
    zone: str | None = None,
) -> Iterator[tuple[list[RecipientRow], bytes | None]]:
    """Yield the recipients of one slot of (template, topic) or (template, cycle bucket), one page of at
    most ``fetch_size`` rows at a time (``RecipientRow``s: the driver's tuples, read by position),
    with the paging state *after* that page (None once the slot is exhausted). Resume from a checkpoint by passing the paging state back, or, when the server
    rejected it (``PagingStateRejected``), by passing ``after=(no, device_token)`` of the last row
    already sent. Reads Cassandra only and never holds more than one page. A page may be empty
    (tombstones, or rows of other zones) while the state is not None. ``zone`` (a topic): only the
    rows that carry that zone (CQL 0004; '' = the service's)."""
    st = cql_statements
    if isinstance(target, TopicTarget) and zone is not None:
        key: tuple[Any, ...] = (slot, notification_key, target.topic)
        stmt = st.topic_page_zone_after.bind((*key, *after, zone)) if after else st.topic_page_zone.bind((*key, zone))
    elif isinstance(target, TopicTarget):
        key = (slot, notification_key, target.topic)
        stmt = st.topic_page_after.bind(key + after) if after else st.topic_page.bind(key)
    else:
        key = (slot, notification_key, target.timezone, target.day, target.hour, target.minute)
        stmt = st.cycle_page_after.bind(key + after) if after else st.cycle_page.bind(key)
    stmt.fetch_size = fetch_size
    # One request per page, each with its own timeout (``pages``): never ``fetch_next_page``, which
    # can wait for a frozen coordinator for as long as it stays frozen.
    results = pages(st.session, stmt, paging_state, PAGE_PROFILE)
    while True:
        try:
            result = next(results, None)
        except ProtocolException as exc:
            if "paging state" in str(exc):
                raise PagingStateRejected(str(exc)) from exc
            raise
        if result is None:
            return
        # The driver's own rows, handed on as they are: an object built per row (a ``Recipient``)
        # cost ~0.5 µs per row, most of it in the garbage collector (docs/BENCHMARKS.md, slot walk).
        yield result.current_rows, result.paging_state
