"""notee.core.user_ids: slot-random, time-ordered platform user ids."""

from __future__ import annotations

import uuid
from collections import Counter

from notee.core.user_ids import new_user_id


def test_an_id_is_a_version_8_rfc_9562_uuid_in_the_canonical_form():
    for _ in range(1000):
        text = new_user_id()
        parsed = uuid.UUID(text)
        assert str(parsed) == text and len(text) == 36
        assert parsed.version == 8 and parsed.variant == uuid.RFC_4122


def test_ids_of_one_slot_sort_by_their_time_and_every_slot_is_used_evenly():
    slots: Counter[str] = Counter()
    by_slot: dict[str, list[tuple[int, str]]] = {}
    for i in range(50_000):
        ms = 1_765_000_000_000 + i * 7
        text = new_user_id(ms)
        slots[text[:2]] += 1
        by_slot.setdefault(text[:2], []).append((ms, text))
    assert len(slots) == 256  # the audience walks' 256 slots (audience_sql.slot_of)
    assert max(slots.values()) < 2 * min(slots.values())
    for made in by_slot.values():
        assert [t for _, t in made] == sorted(t for _, t in made)  # as strings, as MariaDB compares them


def test_ids_of_the_same_millisecond_and_slot_differ():
    made = [new_user_id(1_765_000_000_000) for _ in range(100_000)]
    assert len(set(made)) == len(made)
    assert len({t[:2] for t in made}) == 256


def test_the_time_covers_44_bits_of_milliseconds():
    late = new_user_id((1 << 44) - 1)  # the year 2527
    early = new_user_id(0)
    assert late[2:8] == "ffffff" and early[2:8] == "000000"
