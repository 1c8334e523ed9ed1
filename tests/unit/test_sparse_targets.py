"""Sparse targets cost what they hold (issue 19.3, docs/FANOUT.md "Occupancy"): a job walks only the
slots its topic or cycle bucket occupies (target_slots), packed into few tasks, and still reaches
every subscriber exactly once; a template whose occupancy is unknown is walked slot by slot; the
backfill and the prune keep that true. Real stores, real subscriptions through the API, a real
worker, the emulator.

Here, the rules that need no server; tests/integration/test_sparse_targets.py has the rest."""

from __future__ import annotations

import pytest

from notee.core.vocabulary import BLOCKS_PER_SLOT, pack_slots
from notee.usecases.planning import task_slots


@pytest.mark.parametrize(
    "blocks, ranges",
    [
        ({}, [(0, 0)]),  # nothing occupied: one (empty) task on slot 0
        ({s: BLOCKS_PER_SLOT for s in range(4)}, [(0, 0), (1, 1), (2, 2), (3, 3)]),  # dense: a slot a task
        ({0: 1, 10: 1, 20: 1, 99: 1}, [(0, 99)]),  # sparse: one task over the occupied slots
        ({0: 20, 5: 10, 6: 1, 9: 29, 12: 2}, [(0, 5), (6, 9), (12, 12)]),  # packed up to one slot's worth
        ({3: 40}, [(3, 3)]),  # an over-full slot (overlapping numbers) is still one task
    ],
)
def test_pack_slots(blocks, ranges):
    assert pack_slots(blocks) == ranges


def test_a_task_walks_only_the_listed_slots_of_its_range():
    assert task_slots({"topic": "t"}, 3, 6) == [3, 4, 5, 6]  # no occupancy: every slot
    target = {"topic": "t", "slots": [0, 10, 20, 99]}
    assert task_slots(target, 0, 99) == [0, 10, 20, 99]
    assert task_slots(target, 20, 99) == [20, 99]  # resumed from a checkpoint at slot 20
