"""Occupancy: which (slot, block) of a target hold rows (target_slots, schema/cql/0005), and which
templates have every slot row recorded there (target_slots_known). A job walks only the occupied
slots of a target whose template is known; `notee backfill-occupancy` and the prune keep it true."""

from __future__ import annotations

from collections.abc import Iterator

from cassandra.cluster import ResponseFuture, Session

from notee.core.vocabulary import BLOCK_SIZE, CycleTarget, TopicTarget, block_of, slot_of
from notee.store.cassandra import Keyspaces
from notee.store.cql.rows import TUPLE_ROWS, parse_target_name, target_name


class Occupancy:
    """target_slots, one partition per (template, target), and target_slots_known; with the reads
    of a slot partition's rows in one block (the prune's check of a block)."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        p = session.prepare
        self.occupancy_insert = p(
            f"INSERT INTO {n}.target_slots (notification_key, target, slot, block, noted) VALUES (?, ?, ?, ?, true)"
        )
        self.occupancy_select = p(f"SELECT slot, block FROM {n}.target_slots WHERE notification_key = ? AND target = ?")
        self.occupancy_scan_from = p(
            f"SELECT token(notification_key, target) AS t, notification_key, target, slot, block, writetime(noted)"
            f" AS w FROM {n}.target_slots WHERE token(notification_key, target) > ?"
        )
        self.occupancy_delete = p(
            f"DELETE FROM {n}.target_slots USING TIMESTAMP ? WHERE notification_key = ? AND target = ? AND slot = ?"
            " AND block = ?"
        )
        self.occupancy_delete_target = p(
            f"DELETE FROM {n}.target_slots USING TIMESTAMP ? WHERE notification_key = ? AND target = ?"
        )
        self.known_insert = p(
            f"INSERT INTO {n}.target_slots_known (notification_key, source, since) VALUES (?, ?, toTimestamp(now()))"
        )
        self.known_select = p(f"SELECT source FROM {n}.target_slots_known WHERE notification_key = ?")
        self.known_scan = p(f"SELECT notification_key FROM {n}.target_slots_known")
        self.known_delete = p(f"DELETE FROM {n}.target_slots_known WHERE notification_key = ?")
        # Does a slot partition still hold a row in a block's numbers (reconcile's check of a block)?
        self.topic_any_in = p(
            f"SELECT no FROM {n}.topic_notification WHERE slot = ? AND notification_key = ? AND topic = ?"
            " AND no >= ? AND no < ? LIMIT 1"
        )
        self.cycle_any_in = p(
            f"SELECT no FROM {n}.cycle_notification WHERE slot = ? AND notification_key = ? AND timezone = ?"
            " AND day = ? AND hour = ? AND minute = ? AND no >= ? AND no < ? LIMIT 1"
        )

    def mark_occupancy_known(self, notification_key: str, source: str) -> None:
        """Record that every slot row of this template has its target_slots row (``source``: "created"
        for a new template, "backfill" once ``notee backfill-occupancy`` recorded an older one's)."""
        self.session.execute(self.known_insert, (notification_key, source))

    def occupancy_known_keys(self) -> set[str]:
        return {r.notification_key for r in self.session.execute(self.known_scan)}

    def forget_occupancy_known(self, notification_key: str) -> None:
        self.session.execute(self.known_delete, (notification_key,))

    def occupancy(self, notification_key: str, target: TopicTarget | CycleTarget) -> dict[int, int] | None:
        """slot -> number of occupied blocks of one target, or None when the template's occupancy is not
        known (created before target_slots and not backfilled: the caller walks every slot). Two
        reads, in flight together: the template's marker and the target's partition."""
        known = self.session.execute_async(self.known_select, (notification_key,), execution_profile=TUPLE_ROWS)
        stmt = self.occupancy_select.bind((notification_key, target_name(target)))
        stmt.fetch_size = 5000  # a dense target of 10 M numbers has 10,000 rows: two pages
        rows = self.session.execute_async(stmt, execution_profile=TUPLE_ROWS)
        blocks: dict[int, int] = {}
        for slot, _block in rows.result():
            blocks[slot] = blocks.get(slot, 0) + 1
        return blocks if known.result().one() is not None else None

    def note_occupancy(self, notification_key: str, target: TopicTarget | CycleTarget, no: int) -> ResponseFuture:
        """Record (idempotently) that ``no``'s slot and block of a target hold a row (the backfill)."""
        return self.session.execute_async(
            self.occupancy_insert, (notification_key, target_name(target), slot_of(no), block_of(no))
        )

    def scan_occupancy_from(self, after_token: int, fetch_size: int) -> Iterator[tuple[int, str, str, int, int, int]]:
        """(partition token, notification_key, target, slot, block, writetime µs) after ``after_token``,
        in token order."""
        stmt = self.occupancy_scan_from.bind((after_token,))
        stmt.fetch_size = fetch_size
        for r in self.session.execute(stmt):
            yield int(r.t), r.notification_key, r.target, int(r.slot), int(r.block), int(r.w or 0)

    def block_has_rows_async(
        self, notification_key: str, method: str, target: str, slot: int, block: int
    ) -> ResponseFuture:
        """Start reading whether a target's slot partition holds a row numbered in ``block`` (LIMIT 1);
        ``method``: its template's (how ``target`` is spelled)."""
        low, high = block * BLOCK_SIZE, (block + 1) * BLOCK_SIZE
        parsed = parse_target_name(target, method)
        if isinstance(parsed, TopicTarget):
            return self.session.execute_async(self.topic_any_in, (slot, notification_key, parsed.topic, low, high))
        b = parsed
        return self.session.execute_async(
            self.cycle_any_in, (slot, notification_key, b.timezone, b.day, b.hour, b.minute, low, high)
        )

    def delete_occupancy(self, timestamp_us: int, notification_key: str, target: str, slot: int, block: int) -> None:
        self.session.execute(self.occupancy_delete, (timestamp_us, notification_key, target, slot, block))

    def delete_occupancy_target(self, timestamp_us: int, notification_key: str, target: str) -> None:
        self.session.execute(self.occupancy_delete_target, (timestamp_us, notification_key, target))
