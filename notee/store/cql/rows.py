"""The rows of Cassandra's subscription tables as Notee reads and writes them: the per-user index row,
where a device's slot rows live, what one subscription's rows carry, and how a target is named in
target_slots. Pure values and helpers: nothing here touches a session."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cassandra.query import PreparedStatement

from notee.core.vocabulary import CycleTarget, TopicTarget
from notee.store.cassandra import PAGE_PROFILE

# Reads whose rows are unpacked by position: plain tuples. The driver's default row factory builds
# a namedtuple *class* per result, which cost ~8 % of the API's CPU on the subscribe path.
TUPLE_ROWS = PAGE_PROFILE

USER_LEVEL = ""  # device_token of the per-user index row that records the subscription itself

# (statement, bound values) of one row to write in a batch.
Row = tuple[PreparedStatement, tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One row of notification_per_user. ``device_token == USER_LEVEL`` is the subscription itself
    (it exists even when the user has no device); other rows point at one device's slot rows."""

    method: str
    type_: str
    target: str
    device_token: str
    data: dict[str, Any]

    @property
    def is_user_level(self) -> bool:
        return self.device_token == USER_LEVEL


def index_rows(result: Iterable[tuple[str, str, str, str, str | None]]) -> list[IndexRow]:
    """IndexRows from tuple rows (index_user / index_user_type column order)."""
    return [
        IndexRow(method, type_, target, token, json.loads(data) if data else {})
        for method, type_, target, token, data in result
    ]


@dataclass(frozen=True, slots=True)
class SlotRef:
    """Where one device's slot rows of one subscription live."""

    notification_key: str
    slot: int
    no: int


def slot_ref(row: IndexRow) -> SlotRef | None:
    d = row.data
    if row.is_user_level or "slot" not in d:
        return None
    return SlotRef(d["key"], int(d["slot"]), int(d["no"]))


@dataclass(frozen=True, slots=True)
class SubscriptionRef:
    """One user's subscription of one template to one target: what each of its rows carries."""

    service: str
    user_id: str
    type_: str
    notification_key: str
    target: str  # the topic, or a cycle subscription's canonical schedule (its index rows' target)
    registered_at: int  # ms since the epoch


@dataclass(frozen=True, slots=True)
class DeviceSlot:
    """One device's slot rows of a subscription: its number (``slot_of(no)``), token and OS.
    ``origin``: a rotated device's first token (the row keeps the old row's ``no``; docs/SCHEMA.md,
    races), None for a fresh row."""

    no: int
    device_token: str
    device_os: str
    origin: str | None = None


def device_data(
    notification_key: str, slot: int, no: int, device_os: str, registered_at: int, origin: str | None = None
) -> str:
    """The ``data`` of a device's index row: where its slot rows are. The text ``json.dumps`` of the
    dict writes (tests/unit/test_cql_rows.py), rendered directly for the usual types: a bulk subscribe
    writes one per device, and the encoder's call chain was ~3 µs of each."""
    if origin is None and int is slot.__class__ is no.__class__ is registered_at.__class__:
        return (
            f'{{"key": {_quoted(notification_key)}, "slot": {slot}, "no": {no},'
            f' "os": {_quoted(device_os)}, "at": {registered_at}}}'
        )
    data: dict[str, Any] = {"key": notification_key, "slot": slot, "no": no, "os": device_os, "at": registered_at}
    if origin is not None:
        data["origin"] = origin  # the device's first token: a later rotation carries it on
    return json.dumps(data)


def user_level_data(notification_key: str, registered_at: int) -> str:
    """The ``data`` of a user-level index row (as ``json.dumps`` writes it, like ``device_data``)."""
    if registered_at.__class__ is int:
        return f'{{"key": {_quoted(notification_key)}, "at": {registered_at}}}'
    return json.dumps({"key": notification_key, "at": registered_at})


# A process writes a few template keys and OS names over and over: each quoted once.
_quoted = lru_cache(maxsize=1024)(json.dumps)


def slot_zone(timezone: str | None) -> str:
    """The ``zone`` a topic slot row stores for a user of ``timezone``: '' for none (the service's,
    whatever it is when a job runs, so a service's zone change rewrites no row)."""
    return timezone or ""


def target_name(target: TopicTarget | CycleTarget) -> str:
    """A target's key in target_slots: the topic, or the cycle bucket "<timezone> <DAY> <HH:MM>"."""
    if isinstance(target, TopicTarget):
        return target.topic
    return f"{target.timezone} {target.day} {target.hour:02d}:{target.minute:02d}"


def parse_target_name(name: str, method: str) -> TopicTarget | CycleTarget:
    """Inverse of ``target_name`` for a template of ``method`` (a topic may contain spaces)."""
    if method != "CYCLE":
        return TopicTarget(name)
    zone, day, at = name.rsplit(" ", 2)
    hour, minute = at.split(":")
    return CycleTarget(zone, day, int(hour), int(minute))
