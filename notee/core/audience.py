"""The vocabulary of audiences (docs/AUDIENCES.md): a filter is groups of ``Predicate``s (ORed
groups of ANDed predicates) over tags and built-in attributes; an ``Audience`` is the filters a
publish includes and excludes. Parsed and validated by notee/domain/filters.py, compiled to SQL by
notee/store/audience_sql.py, kept in a job's target as JSON (``audience_to_json``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from notee.core.vocabulary import Os

PLATFORMS: tuple[str, ...] = get_args(Os)

# Value kinds, as user_tag.kind stores them, plus 'v' (a version) for app_version and 'p' (a platform).
STRING, NUMBER, BOOLEAN, TIMESTAMP, VERSION, PLATFORM = "s", "n", "b", "t", "v", "p"

# attribute -> (its kind, whether it is the device's rather than the user's)
ATTRIBUTES: dict[str, tuple[str, bool]] = {
    "locale": (STRING, False),
    "timezone": (STRING, False),
    "created_at": (TIMESTAMP, False),
    "platform": (PLATFORM, True),
    "app_version": (VERSION, True),
    "country": (STRING, True),
    "last_seen": (TIMESTAMP, True),
}

EQUALITY = ("=", "!=")
ORDER = ("<", "<=", ">", ">=")
MEMBERSHIP = ("in", "not_in")
PRESENCE = ("exists", "not_exists")
ELAPSED = ("elapsed_gt", "elapsed_lt")
OPS = (*EQUALITY, *ORDER, *MEMBERSHIP, *PRESENCE, *ELAPSED)

# The ops each kind of value can be compared with (a boolean has no order; a platform no order).
OPS_OF: dict[str, tuple[str, ...]] = {
    STRING: (*EQUALITY, *ORDER, *MEMBERSHIP, *PRESENCE),
    NUMBER: (*EQUALITY, *ORDER, *MEMBERSHIP, *PRESENCE),
    BOOLEAN: (*EQUALITY, *PRESENCE),
    TIMESTAMP: (*EQUALITY, *ORDER, *PRESENCE, *ELAPSED),
    VERSION: (*EQUALITY, *ORDER, *MEMBERSHIP, *PRESENCE),
    PLATFORM: (*EQUALITY, *MEMBERSHIP),
}

Scalar = str | float | bool
Value = Scalar | tuple[Scalar, ...] | None


@dataclass(frozen=True, slots=True)
class Predicate:
    """One test: a tag (``tag``) or a built-in attribute (``attribute``), exactly one of them; the op;
    the kind of value compared (for a tag: the kind a stored value must have to match); the value,
    normalised (epoch seconds for a timestamp, ``version_key`` for a version, a tuple for in/not_in,
    seconds for elapsed_*, None for exists/not_exists)."""

    tag: str | None
    attribute: str | None
    op: str
    kind: str
    value: Value


Group = tuple[Predicate, ...]
Filter = tuple[Group, ...]


@dataclass(frozen=True, slots=True)
class Audience:
    """Users in any of the ``include`` filters and in none of the ``exclude`` ones (a filter target
    is one included filter; a segments target, each segment's filter)."""

    include: tuple[Filter, ...]
    exclude: tuple[Filter, ...] = ()


# ---------------------------------------------------------------------------- job snapshot (JSON)
def filter_to_json(parsed: Filter) -> list[list[dict[str, Any]]]:
    """A parsed filter as JSON a job target keeps (normalised values: ``filter_from_json`` reads it
    back without parsing again)."""
    return [
        [
            {
                "tag": p.tag,
                "attribute": p.attribute,
                "op": p.op,
                "kind": p.kind,
                "value": list(p.value) if isinstance(p.value, tuple) else p.value,
            }
            for p in group
        ]
        for group in parsed
    ]


def filter_from_json(stored: list[list[dict[str, Any]]]) -> Filter:
    return tuple(
        tuple(
            Predicate(
                p["tag"],
                p["attribute"],
                p["op"],
                p["kind"],
                tuple(p["value"]) if isinstance(p["value"], list) else p["value"],
            )
            for p in group
        )
        for group in stored
    )


def audience_to_json(audience: Audience) -> dict[str, Any]:
    return {
        "include": [filter_to_json(f) for f in audience.include],
        "exclude": [filter_to_json(f) for f in audience.exclude],
    }


def audience_from_json(stored: dict[str, Any]) -> Audience:
    return Audience(
        tuple(filter_from_json(f) for f in stored["include"]),
        tuple(filter_from_json(f) for f in stored.get("exclude", [])),
    )
