"""reconcile_cursor: where each maintenance walk (the reconcile batch, the target_slots prune)
stopped, by name, so the next run resumes after it."""

from __future__ import annotations

from cassandra.cluster import Session

from notee.store.cassandra import Keyspaces


class WalkCursors:
    """reconcile_cursor: one row per walk, its last partition token done."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        self.cursor_select = session.prepare(f"SELECT last_token FROM {n}.reconcile_cursor WHERE name = ?")
        self.cursor_update = session.prepare(
            f"INSERT INTO {n}.reconcile_cursor (name, last_token, updated_at) VALUES (?, ?, toTimestamp(now()))"
        )

    def reconcile_cursor(self, name: str) -> int | None:
        row = self.session.execute(self.cursor_select, (name,)).one()
        return None if row is None or row.last_token is None else int(row.last_token)

    def set_reconcile_cursor(self, name: str, last_token: int | None) -> None:
        self.session.execute(self.cursor_update, (name, last_token))
