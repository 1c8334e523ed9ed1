"""Pure fan-out logic: slot ranges and one page's messages (table-driven). Rendering: tests/integration/test_render_one.py."""

from __future__ import annotations

import pytest

from notee.core.vocabulary import Recipient, slot_ranges
from notee.worker.messages import messages_for


@pytest.mark.parametrize(
    "max_slot, per_task, expected",
    [
        (0, 1, [(0, 0)]),
        (-1, 1, [(0, 0)]),
        (2, 1, [(0, 0), (1, 1), (2, 2)]),
        (4, 2, [(0, 1), (2, 3), (4, 4)]),
        (3, 10, [(0, 3)]),
    ],
)
def test_slot_ranges(max_slot, per_task, expected):
    assert slot_ranges(max_slot, per_task) == expected


def test_messages_for_renders_one_message_per_recipient():
    payload = {"title": "T", "body": "B", "data": {"k": "v"}, "ttl_seconds": None, "priority": "high"}
    msgs = messages_for([Recipient("t1", "AOS", "u1"), Recipient("t2", "IOS", "u2")], payload)
    assert [(m.device_token, m.device_os, m.title, m.body, m.data) for m in msgs] == [
        ("t1", "AOS", "T", "B", {"k": "v"}),
        ("t2", "IOS", "T", "B", {"k": "v"}),
    ]
