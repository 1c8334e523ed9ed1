"""What a publish job addresses: a topic of a TOPIC template, or one cycle bucket of a CYCLE
template (local wall-clock day/hour/minute in one IANA timezone). Shared by the subscription
store (which rows to read), the fan-out engine (what a job walks) and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True, slots=True)
class TopicTarget:
    topic: str


@dataclass(frozen=True, slots=True)
class CycleTarget:
    timezone: str  # IANA name, e.g. "Asia/Seoul"
    day: str  # MON..SUN, local to timezone
    hour: int  # 0-23, local
    minute: int  # 0-59, local


Target = Union[TopicTarget, CycleTarget]

SLOT_SIZE = 30_000  # seed: ~300 B rows, ~10 MB partitions -> 30,000 rows per slot


def slot_of(no: int) -> int:
    return no // SLOT_SIZE
