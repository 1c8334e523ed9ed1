"""Audience filters (docs/AUDIENCES.md "Filters"): a list of groups of predicates over tags and
built-in attributes, ORed between groups and ANDed inside one; and ``Audience``, what a filter or a
choice of saved segments (included, excluded) selects.

``parse_filter`` validates what a request gave (every problem a 422 whose ``loc`` names the part) and
normalises each value to what the store compares: a timestamp as epoch seconds, a version as its
sortable key (``notee.domain.versions.version_key``, the key a device stores). Pure: the SQL is
notee/store/audience_sql.py; the parsed form and its JSON (a job's snapshot) notee/core/audience.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from notee.core.audience import (
    ATTRIBUTES,
    BOOLEAN,
    ELAPSED,
    MEMBERSHIP,
    NUMBER,
    OPS,
    OPS_OF,
    PLATFORM,
    PLATFORMS,
    PRESENCE,
    STRING,
    TIMESTAMP,
    VERSION,
    Filter,
    Predicate,
    Scalar,
    Value,
)
from notee.core.errors import InvalidInput
from notee.domain.rules import control_free
from notee.domain.versions import APP_VERSION_RE, version_key

MAX_GROUPS = 10
MAX_PREDICATES = 50
MAX_IN_VALUES = 100
MAX_STRING = 255
TAG_KEY_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def _problem(loc: Sequence[str | int], msg: str, type_: str = "value_error") -> InvalidInput:
    return InvalidInput(f"filter: {msg}", details=[{"loc": list(loc), "type": type_, "msg": msg}])


def parse_filter(raw: Any, loc: Sequence[str | int] = ("body", "filter")) -> Filter:
    """A request's filter, validated and normalised; InvalidInput (422) naming the offending part."""
    if not isinstance(raw, list) or not raw:
        raise _problem(loc, "must be a non-empty list of groups (each a list of predicates)", "filter_shape")
    if len(raw) > MAX_GROUPS:
        raise _problem(loc, f"at most {MAX_GROUPS} groups", "filter_too_large")
    total = sum(len(g) for g in raw if isinstance(g, list))
    if total > MAX_PREDICATES:
        raise _problem(loc, f"at most {MAX_PREDICATES} predicates in all (got {total})", "filter_too_large")
    groups = []
    for i, group in enumerate(raw):
        if not isinstance(group, list) or not group:
            raise _problem([*loc, i], "a group must be a non-empty list of predicates", "filter_shape")
        groups.append(tuple(parse_predicate(p, [*loc, i, j]) for j, p in enumerate(group)))
    return tuple(groups)


def parse_predicate(raw: Any, loc: Sequence[str | int]) -> Predicate:
    """One predicate: ``{"tag"|"attribute": name, "op": op, "value": ...}``."""
    if not isinstance(raw, dict):
        raise _problem(loc, "a predicate must be an object", "filter_shape")
    unknown = sorted(set(raw) - {"tag", "attribute", "op", "value"})
    if unknown:
        raise _problem([*loc, unknown[0]], f"unknown field {unknown[0]!r}", "extra_forbidden")
    if ("tag" in raw) == ("attribute" in raw):
        raise _problem(loc, "name exactly one of 'tag' or 'attribute'", "filter_shape")
    op = raw.get("op")
    if op not in OPS:
        raise _problem([*loc, "op"], f"unknown op {op!r}; one of {', '.join(OPS)}", "unknown_op")
    if "tag" in raw:
        key = raw["tag"]
        if not isinstance(key, str) or not TAG_KEY_RE.match(key):
            raise _problem([*loc, "tag"], "a tag key is 1-64 of A-Z a-z 0-9 _ . : -", "tag_key")
        kind = _tag_kind(op, raw, loc)
        return Predicate(key, None, op, kind, _value(op, kind, raw, loc))
    name = raw["attribute"]
    if name not in ATTRIBUTES:
        raise _problem(
            [*loc, "attribute"], f"unknown attribute {name!r}; one of {', '.join(ATTRIBUTES)}", "unknown_attribute"
        )
    kind = ATTRIBUTES[name][0]
    if op not in OPS_OF[kind]:
        raise _problem([*loc, "op"], f"op {op!r} does not apply to {name}", "op_mismatch")
    return Predicate(None, name, op, kind, _value(op, kind, raw, loc))


def _tag_kind(op: str, raw: dict[str, Any], loc: Sequence[str | int]) -> str:
    """The kind of stored value a tag predicate compares with, from its value's JSON type."""
    if op in PRESENCE:
        return ""  # any kind
    if op in ELAPSED:
        return TIMESTAMP
    if "value" not in raw:
        raise _problem([*loc, "value"], f"{op} needs a value", "missing")
    value = raw["value"]
    if op in MEMBERSHIP:
        if not isinstance(value, list) or not value:
            raise _problem([*loc, "value"], f"{op} takes a non-empty list", "type_mismatch")
        value = value[0]
    kind = _json_kind(value)
    if kind is None:
        raise _problem([*loc, "value"], 'a string, number, boolean or {"timestamp": ...}', "type_mismatch")
    if op not in OPS_OF[kind]:
        raise _problem([*loc, "op"], f"op {op!r} does not apply to a {_KIND_NAMES[kind]}", "op_mismatch")
    return kind


_KIND_NAMES = {
    STRING: "string",
    NUMBER: "number",
    BOOLEAN: "boolean",
    TIMESTAMP: "timestamp",
    VERSION: "version",
    PLATFORM: "platform",
}


def _json_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, (int, float)):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, dict) and set(value) == {"timestamp"}:
        return TIMESTAMP
    return None


def _value(op: str, kind: str, raw: dict[str, Any], loc: Sequence[str | int]) -> Value:
    """The predicate's value, checked against its op and kind and normalised."""
    where = [*loc, "value"]
    if op in PRESENCE:
        if "value" in raw:
            raise _problem(where, f"{op} takes no value", "type_mismatch")
        return None
    if "value" not in raw:
        raise _problem(where, f"{op} needs a value", "missing")
    value = raw["value"]
    if op in ELAPSED:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 3_153_600_000:
            raise _problem(where, f"{op} takes a number of seconds (0 to 100 years)", "type_mismatch")
        return float(value)
    if op in MEMBERSHIP:
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_IN_VALUES:
            raise _problem(where, f"{op} takes a list of 1-{MAX_IN_VALUES} values", "type_mismatch")
        return tuple(_scalar(v, kind, [*where, i]) for i, v in enumerate(value))
    return _scalar(value, kind, where)


def _scalar(value: Any, kind: str, where: Sequence[str | int]) -> Scalar:
    """One value of ``kind``, normalised, or a 422 naming it."""
    if kind == BOOLEAN and isinstance(value, bool):
        return value
    if kind == NUMBER and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if kind == TIMESTAMP:
        text = value.get("timestamp") if isinstance(value, dict) and set(value) == {"timestamp"} else value
        return _epoch(text, where)
    if kind == VERSION and isinstance(value, str) and APP_VERSION_RE.match(value):
        return version_key(value)
    if kind == PLATFORM and value in PLATFORMS:
        return str(value)
    if kind == STRING and isinstance(value, str) and len(value) <= MAX_STRING and control_free(value):
        return value
    expected = {
        STRING: f"a string of at most {MAX_STRING} characters without control characters",
        NUMBER: "a finite number",
        BOOLEAN: "true or false",
        TIMESTAMP: 'an RFC 3339 time with its offset, or {"timestamp": ...}',
        VERSION: "a version such as 5.2 or 5.2.1-beta",
        PLATFORM: f"one of {', '.join(PLATFORMS)}",
    }[kind]
    raise _problem(where, f"expected {expected}", "type_mismatch")


def _epoch(text: Any, where: Sequence[str | int]) -> float:
    if isinstance(text, str) and len(text) <= 40:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return moment.astimezone(UTC).timestamp()
    raise _problem(where, "expected an RFC 3339 time with its offset, e.g. 2026-12-31T00:00:00Z", "type_mismatch")
