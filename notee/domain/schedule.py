"""Cycle schedules, quiet-hours windows and topic names: pure validation and the canonical
schedule string.

A cycle subscription fires at a local wall-clock time (days of week, hour, minute) in an IANA
timezone. The canonical string, e.g. ``"MON,WED 22:00 Asia/Seoul"``, is what the per-user index
stores as ``target`` (docs/SCHEMA.md): equal schedules give equal strings whatever order or case
the days came in, so "subscribe twice changes nothing" is a string comparison.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from notee.core.errors import InvalidInput
from notee.core.vocabulary import DAYS, CycleTarget
from notee.domain.rules import bad, is_portable_timezone

TOPIC_MAX = 50  # seed: topic is at most 50 characters
# The characters ``validate_topic`` refuses by category, listed: control (Cc) and format (Cf), as
# Python 3.11's Unicode 14.0 has them (tests/unit/test_schedule.py holds the list to the categories). The
# astral ones are the characters themselves: no escape for them reads alike in every regex dialect.
_TOPIC_REFUSED = (
    r"\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    r"\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
# What ``str.strip()`` removes that is not refused anyway: a topic of only these is empty.
_TOPIC_BLANK = r" \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def topic_pattern(also_refused: str = "") -> str:
    """``validate_topic`` as a JSON Schema pattern (its length aside: ``minLength`` 1, ``maxLength``
    TOPIC_MAX), refusing the characters of the class ``also_refused`` as well. Lone surrogates (Cs),
    refused by ``validate_topic``, are left out: no regex dialect but Python's can name them."""
    refused = _TOPIC_REFUSED + also_refused
    return f"^[{_TOPIC_BLANK}]*[^{refused}{_TOPIC_BLANK}][^{refused}]*$"


def validate_topic(topic: str) -> str:
    """Return ``topic`` if it is 1..50 characters with no control characters, else InvalidInput."""
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidInput("topic must not be empty", details=[{"field": "topic", "reason": "empty"}])
    if len(topic) > TOPIC_MAX:
        raise InvalidInput(
            f"topic must be at most {TOPIC_MAX} characters",
            details=[{"field": "topic", "reason": "too_long", "max": TOPIC_MAX}],
        )
    # isprintable() is false for every Cc/Cf/Cs character (and for others that are allowed): the
    # per-character look-up only runs for the few topics it does not clear at C speed.
    if not topic.isprintable() and any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in topic):
        raise InvalidInput(
            "topic must not contain control characters", details=[{"field": "topic", "reason": "control_character"}]
        )
    return topic


LOCAL_TIME_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
_LOCAL_TIME_RE = re.compile(LOCAL_TIME_PATTERN)


def parse_local_time(text: Any) -> tuple[int, int]:
    """``"HH:MM"`` (00:00..23:59) as (hour, minute); InvalidInput otherwise."""
    if not isinstance(text, str) or not _LOCAL_TIME_RE.fullmatch(text):
        raise InvalidInput(
            "local_time must be HH:MM, 00:00..23:59",
            details=[{"loc": ["body", "local_time"], "type": "local_time", "msg": "must be HH:MM, 00:00..23:59"}],
        )
    return int(text[:2]), int(text[3:])


def check_quiet_hours(value: Any, field_: str = "quiet_hours") -> tuple[int, int] | None:
    """``{"start": "HH:MM", "end": "HH:MM"}`` (or None) as (start, end) minutes of the day; a start
    after the end crosses midnight (22:00-07:00); equal start and end are refused."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"start", "end"}:
        raise bad(field_, 'must be {"start": "HH:MM", "end": "HH:MM"} or null', "dict_type")
    try:
        (sh, sm), (eh, em) = parse_local_time(value["start"]), parse_local_time(value["end"])
    except InvalidInput:
        raise bad(field_, "start and end must be HH:MM, 00:00..23:59", "local_time") from None
    if (sh, sm) == (eh, em):
        raise bad(field_, "start and end must differ", "value_error")
    return sh * 60 + sm, eh * 60 + em


def quiet_window(start: int | None, end: int | None) -> tuple[int, int] | None:
    """A stored window (the quiet_start, quiet_end columns of a service or a user) as (start, end)
    minutes of the day; None when either is unset."""
    return None if start is None or end is None else (int(start), int(end))


def validate_timezone(name: str) -> str:
    if not is_portable_timezone(name):
        raise InvalidInput(f"unknown timezone {name!r}", details=[{"field": "timezone", "reason": "unknown"}])
    return name


@dataclass(frozen=True, slots=True)
class Schedule:
    days: tuple[str, ...]  # distinct, in MON..SUN order
    hour: int
    minute: int
    timezone: str

    @property
    def canonical(self) -> str:
        return f"{','.join(self.days)} {self.hour:02d}:{self.minute:02d} {self.timezone}"

    @property
    def buckets(self) -> tuple[CycleTarget, ...]:
        """The local buckets it fires at: one per day (where its slot rows live)."""
        return tuple(CycleTarget(self.timezone, day, self.hour, self.minute) for day in self.days)


def make_schedule(days: list[str], hour: int, minute: int, timezone: str) -> Schedule:
    """Validate and normalise a schedule; every problem found is listed in the error's details."""
    problems: list[dict[str, Any]] = []
    if not isinstance(days, (list, tuple)) or not days:
        problems.append({"field": "days", "reason": "empty"})
        norm: tuple[str, ...] = ()
    else:
        wanted = set()
        for d in days:
            key = d.strip().upper() if isinstance(d, str) else None
            if key not in DAYS:
                problems.append({"field": "days", "reason": "unknown_day", "value": str(d)[:16]})
            else:
                wanted.add(key)
        norm = tuple(d for d in DAYS if d in wanted)
    if isinstance(hour, bool) or not isinstance(hour, int) or not 0 <= hour <= 23:
        problems.append({"field": "hour", "reason": "out_of_range", "min": 0, "max": 23})
    if isinstance(minute, bool) or not isinstance(minute, int) or not 0 <= minute <= 59:
        problems.append({"field": "minute", "reason": "out_of_range", "min": 0, "max": 59})
    if not is_portable_timezone(timezone):
        problems.append({"field": "timezone", "reason": "unknown"})
    if problems:
        raise InvalidInput("invalid schedule", details=problems)
    return Schedule(norm, hour, minute, timezone)


def parse_canonical(text: str) -> Schedule:
    """Inverse of ``Schedule.canonical`` (used to find a stored schedule's slot rows again).

    The zone is not looked up in this host's tz database: it was checked when the schedule was
    stored, and a host with older tzdata (or a zone withdrawn since) must still list, copy and above
    all delete those rows."""
    try:
        days, hm, tz = text.split(" ", 2)
        hour, minute = hm.split(":")
        parsed = make_schedule(days.split(","), int(hour), int(minute), "UTC")  # days, hour, minute checked
    except (ValueError, InvalidInput) as exc:
        raise ValueError(f"not a canonical schedule: {text!r}") from exc
    if not tz or tz != tz.strip() or " " in tz:
        raise ValueError(f"not a canonical schedule: {text!r}")
    return Schedule(parsed.days, parsed.hour, parsed.minute, tz)
