"""The slot rows: topic_notification and cycle_notification, one partition per slot of a (template,
topic) or (template, tz, day, hour, minute) bucket. The fan-out reads them (``recipients``), a
subscribe writes them with their index rows (``statements``)."""

from __future__ import annotations

from collections.abc import Iterable

from cassandra.cluster import ResponseFuture, Session

from notee.core.vocabulary import CycleTarget
from notee.store.cassandra import Keyspaces
from notee.store.cql.rows import IndexRow, slot_ref


class TopicSlots:
    """topic_notification: a topic's rows, slot by slot."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        p = session.prepare
        # ``zone``: the recipient's time zone ('' = the service's; CQL 0004, docs/FANOUT.md).
        self.topic_insert = p(
            f"INSERT INTO {n}.topic_notification (slot, notification_key, topic, no, device_token, device_os,"
            " user_id, registered_at, zone) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        # The *_at variants carry the request's own write timestamp (last value; the deletes' first), so a
        # withdrawal of rows a failed batch wrote can be applied at any later time just after it
        # (notee/domain/withdrawals.py).
        self.topic_insert_at = p(
            f"INSERT INTO {n}.topic_notification (slot, notification_key, topic, no, device_token, device_os,"
            " user_id, registered_at, zone) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        # A rotated row: same key as a fresh one plus the device's first token (issue 14.6).
        self.topic_insert_moved = p(
            f"INSERT INTO {n}.topic_notification (slot, notification_key, topic, no, device_token, device_os,"
            " user_id, registered_at, zone, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        # A user's zone changed: rewrite it on one of its rows (under the user's exclusive row lock).
        self.topic_set_zone = p(
            f"UPDATE {n}.topic_notification SET zone = ? WHERE slot = ? AND notification_key = ? AND topic = ?"
            " AND no = ? AND device_token = ?"
        )
        self.topic_delete = p(
            f"DELETE FROM {n}.topic_notification WHERE slot = ? AND notification_key = ? AND topic = ?"
            " AND no = ? AND device_token = ?"
        )
        self.topic_delete_at = p(
            f"DELETE FROM {n}.topic_notification USING TIMESTAMP ? WHERE slot = ? AND notification_key = ?"
            " AND topic = ? AND no = ? AND device_token = ?"
        )
        # Columns in Recipient's field order (a RecipientRow). The *_after variants resume a slot after a row's
        # clustering key (no, device_token) when the server rejects a checkpointed paging state.
        self.topic_page = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.topic_notification"
            " WHERE slot = ? AND notification_key = ? AND topic = ?"
        )
        self.topic_page_after = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.topic_notification"
            " WHERE slot = ? AND notification_key = ? AND topic = ? AND (no, device_token) > (?, ?)"
        )
        # One zone's rows of a slot (a part of a local-time job): the server scans the one partition
        # and ships only the matching rows (a filter on a regular column, hence ALLOW FILTERING).
        self.topic_page_zone = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.topic_notification"
            " WHERE slot = ? AND notification_key = ? AND topic = ? AND zone = ? ALLOW FILTERING"
        )
        self.topic_page_zone_after = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.topic_notification"
            " WHERE slot = ? AND notification_key = ? AND topic = ? AND (no, device_token) > (?, ?) AND zone = ?"
            " ALLOW FILTERING"
        )

    def set_zone(self, row: IndexRow, zone: str) -> ResponseFuture | None:
        """Rewrite the zone of the topic slot row a device index row points at (None: no slot row)."""
        ref = slot_ref(row)
        if ref is None or row.method != "TOPIC":
            return None
        return self.session.execute_async(
            self.topic_set_zone, (zone, ref.slot, ref.notification_key, row.target, ref.no, row.device_token)
        )


class CycleSlots:
    """cycle_notification: a cycle bucket's rows, slot by slot."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        p = session.prepare
        self.cycle_insert = p(
            f"INSERT INTO {n}.cycle_notification (slot, notification_key, timezone, day, hour, minute, no,"
            " device_token, device_os, user_id, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self.cycle_insert_at = p(
            f"INSERT INTO {n}.cycle_notification (slot, notification_key, timezone, day, hour, minute, no,"
            " device_token, device_os, user_id, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " USING TIMESTAMP ?"
        )
        self.cycle_insert_moved = p(
            f"INSERT INTO {n}.cycle_notification (slot, notification_key, timezone, day, hour, minute, no,"
            " device_token, device_os, user_id, registered_at, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self.cycle_delete = p(
            f"DELETE FROM {n}.cycle_notification WHERE slot = ? AND notification_key = ? AND timezone = ?"
            " AND day = ? AND hour = ? AND minute = ? AND no = ? AND device_token = ?"
        )
        self.cycle_delete_at = p(
            f"DELETE FROM {n}.cycle_notification USING TIMESTAMP ? WHERE slot = ? AND notification_key = ?"
            " AND timezone = ? AND day = ? AND hour = ? AND minute = ? AND no = ? AND device_token = ?"
        )
        # Does a cycle bucket still have a row in this slot (reconcile's check of a cycle_due row)?
        self.cycle_any = p(
            f"SELECT no FROM {n}.cycle_notification WHERE slot = ? AND notification_key = ? AND timezone = ?"
            " AND day = ? AND hour = ? AND minute = ? LIMIT 1"
        )
        self.cycle_page = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.cycle_notification WHERE slot = ?"
            " AND notification_key = ? AND timezone = ? AND day = ? AND hour = ? AND minute = ?"
        )
        self.cycle_page_after = p(
            f"SELECT device_token, device_os, user_id, no, origin FROM {n}.cycle_notification WHERE slot = ?"
            " AND notification_key = ? AND timezone = ? AND day = ? AND hour = ? AND minute = ?"
            " AND (no, device_token) > (?, ?)"
        )
        # The cycle calendar: how many slot rows one bucket of a template has in one slot.
        self.cycle_count = p(
            f"SELECT COUNT(*) FROM {n}.cycle_notification WHERE slot = ? AND notification_key = ? AND timezone = ?"
            " AND day = ? AND hour = ? AND minute = ?"
        )

    def cycle_bucket_has_rows(
        self, notification_key: str, timezone: str, day: str, hour: int, minute: int, slots: Iterable[int]
    ) -> bool:
        """Whether any of ``slots`` of a cycle bucket holds a live row (one LIMIT 1 read per slot)."""
        futures = [
            self.session.execute_async(self.cycle_any, (slot, notification_key, timezone, day, hour, minute))
            for slot in slots
        ]
        return any(f.result().one() is not None for f in futures)

    def cycle_rows_async(self, notification_key: str, bucket: CycleTarget, slot: int) -> ResponseFuture:
        """Start counting one slot's rows of a (template, local bucket): ``count_of`` reads the answer."""
        return self.session.execute_async(
            self.cycle_count, (slot, notification_key, bucket.timezone, bucket.day, bucket.hour, bucket.minute)
        )

    @staticmethod
    def count_of(future: ResponseFuture) -> int:
        row = future.result().one()
        return int(row[0]) if row is not None else 0
