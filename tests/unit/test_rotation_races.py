"""Rotation and shared devices (issue 14.6), with real concurrent requests and the emulator counting
deliveries per device:

* tokens rotated while a publish runs: each device gets that publish at most once, through either
  token, and no page read after a rotation answered holds the old token;
* two users of one device subscribing at the same instant: each survives the other's unsubscribe.
Here, the rules that need no server; tests/integration/test_rotation_races.py has the rest.
"""

from __future__ import annotations

from notee.core.vocabulary import Recipient
from notee.worker.reader import MovedRowFilter


def test_moved_row_filter_keeps_one_row_per_device_and_no():
    moved = MovedRowFilter()
    old = Recipient("old", "AOS", "u", 5)
    new = Recipient("new", "AOS", "u", 5, origin="old")
    other = Recipient("zz", "AOS", "v", 5)  # another device that read the same no: kept
    assert moved([Recipient("a", "AOS", "w", 4), new]) == [Recipient("a", "AOS", "w", 4), new]
    assert moved([old, other, Recipient("b", "IOS", "x", 6)]) == [other, Recipient("b", "IOS", "x", 6)]
    # across a page boundary, the other way round, and after a checkpoint
    assert MovedRowFilter()([old]) == [old]
    f = MovedRowFilter()
    assert f([old]) == [old] and f([new]) == []
    assert MovedRowFilter(after=(5, "old"))([new, other]) == [other]
    # a rotated row of a later rotation carries the device's first token
    chain = Recipient("newer", "AOS", "u", 5, origin="old")
    assert MovedRowFilter(after=(5, "old"))([chain]) == []
