"""What of a page held in a provider outage its next claim sends (``notee.worker.messages.not_yet_sent``):
not the devices done before, nor a push whose ``ttl_seconds`` passed since the page was first tried
(counted ``ttl_expired``, docs/FANOUT.md "Outages")."""

from __future__ import annotations

import pytest

from notee.providers.base import Message
from notee.store.page_holds_sql import PageHold
from notee.worker.messages import not_yet_sent


def _page(ttl: int | None) -> list[Message]:
    return [Message(f"t{i}", "AOS", "t", "b", {}, ttl) for i in range(4)]


@pytest.mark.parametrize(
    ("ttl", "done", "held_for", "sent", "expired"),
    [
        (None, set(), 10_000.0, ["t0", "t1", "t2", "t3"], 0),  # no TTL: waits for its provider however long
        (None, {"t0", "t2"}, 1.0, ["t1", "t3"], 0),  # the done are skipped
        (60, {"t0"}, 59.9, ["t1", "t2", "t3"], 0),  # within its TTL
        (60, {"t0"}, 60.0, [], 3),  # past it: not sent, counted; the done one is not counted again
        (0, set(), 0.001, [], 4),  # a TTL of 0 (now or never): any hold ends it
        (60, {"t0", "t1", "t2", "t3"}, 120.0, [], 0),  # nothing left
    ],
)
def test_the_next_claim_sends_what_is_not_done_and_still_worth_sending(
    ttl: int | None, done: set[str], held_for: float, sent: list[str], expired: int
) -> None:
    left, n = not_yet_sent(_page(ttl), PageHold(frozenset(done), held_for))
    assert [m.device_token for m in left] == sent and n == expired
