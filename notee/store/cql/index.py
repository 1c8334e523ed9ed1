"""The reverse indexes: notification_per_user (a user's subscriptions and where each device's slot
rows are) and notification_per_token (which users may hold rows of a device token)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from cassandra.cluster import ResponseFuture, Session

from notee.store.cassandra import Keyspaces, rows
from notee.store.cql.rows import TUPLE_ROWS, USER_LEVEL, IndexRow, index_rows, user_level_data

IN_USERS = 50  # partitions per IN read


class UserIndex:
    """notification_per_user: one partition per (user, service)."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        p = session.prepare
        self.index_insert = p(
            f"INSERT INTO {n}.notification_per_user (user_id, service, notification_method, notification_type,"
            " target, device_token, data) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        self.index_insert_at = p(  # the request's write timestamp last (slots.py, the *_at variants)
            f"INSERT INTO {n}.notification_per_user (user_id, service, notification_method, notification_type,"
            " target, device_token, data) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        self.index_delete_at = p(
            f"DELETE FROM {n}.notification_per_user USING TIMESTAMP ? WHERE user_id = ? AND service = ?"
            " AND notification_method = ? AND notification_type = ? AND target = ? AND device_token = ?"
        )
        self.index_delete = p(
            f"DELETE FROM {n}.notification_per_user WHERE user_id = ? AND service = ? AND notification_method = ?"
            " AND notification_type = ? AND target = ? AND device_token = ?"
        )
        self.index_delete_user = p(f"DELETE FROM {n}.notification_per_user WHERE user_id = ? AND service = ?")
        self.index_user = p(
            f"SELECT notification_method, notification_type, target, device_token, data"
            f" FROM {n}.notification_per_user WHERE user_id = ? AND service = ?"
        )
        self.index_user_type = p(
            f"SELECT notification_method, notification_type, target, device_token, data"
            f" FROM {n}.notification_per_user WHERE user_id = ? AND service = ? AND notification_method = ?"
            " AND notification_type = ?"
        )
        # Many users' rows of one type in one request (the bulk subscribe): IN over the partition key.
        self.index_users_type = p(
            f"SELECT user_id, notification_method, notification_type, target, device_token, data"
            f" FROM {n}.notification_per_user WHERE user_id IN ? AND service = ? AND notification_method = ?"
            " AND notification_type = ?"
        )
        # Maintenance only (notee reconcile): a full token-range scan, paged.
        self.index_scan = p(
            f"SELECT user_id, service, notification_method, notification_type, target, device_token, data"
            f" FROM {n}.notification_per_user"
        )
        # Maintenance (the scheduled reconcile batch): the index walked from a partition token on.
        self.index_scan_from = p(
            f"SELECT token(user_id, service) AS t, user_id, service, notification_method, notification_type,"
            f" target, device_token, data FROM {n}.notification_per_user WHERE token(user_id, service) > ?"
        )

    def user_rows(self, user_id: str, service: str) -> list[IndexRow]:
        """Every index row of one user (one partition; a user's subscriptions x devices)."""
        return index_rows(self.session.execute(self.index_user, (user_id, service), execution_profile=TUPLE_ROWS))

    def user_rows_async(self, user_id: str, service: str) -> ResponseFuture:
        return self.session.execute_async(self.index_user, (user_id, service), execution_profile=TUPLE_ROWS)

    def user_type_rows(self, user_id: str, service: str, method: str, type_: str) -> list[IndexRow]:
        return self.index_rows_of(self.user_type_rows_async(user_id, service, method, type_))

    def user_type_rows_async(self, user_id: str, service: str, method: str, type_: str) -> ResponseFuture:
        return self.session.execute_async(
            self.index_user_type, (user_id, service, method, type_), execution_profile=TUPLE_ROWS
        )

    def index_rows_of(self, future: ResponseFuture) -> list[IndexRow]:
        return index_rows(future.result())

    def users_type_rows_async(
        self, user_ids: Sequence[str], service: str, method: str, type_: str
    ) -> list[ResponseFuture]:
        """Start reading many users' index rows of one type, ``IN_USERS`` partitions per request (one
        request per user cost ~20x more on a single node: each is queued and dispatched on its own)."""
        return [
            self.session.execute_async(
                self.index_users_type,
                (list(user_ids[i : i + IN_USERS]), service, method, type_),
                execution_profile=TUPLE_ROWS,
            )
            for i in range(0, len(user_ids), IN_USERS)
        ]

    @staticmethod
    def users_rows_of(futures: Sequence[ResponseFuture]) -> dict[str, list[IndexRow]]:
        """user_id -> IndexRows of ``users_type_rows_async`` (users without rows are absent)."""
        out: dict[str, list[IndexRow]] = {}
        for f in futures:
            for user_id, method, type_, target, token, data in f.result():
                out.setdefault(user_id, []).append(
                    IndexRow(method, type_, target, token, json.loads(data) if data else {})
                )
        return out

    def scan_index(self, fetch_size: int = 1000) -> Iterator[tuple[str, str, IndexRow]]:
        """(user_id, service, row) over the whole index, in token order: a partition's rows are
        contiguous. For `notee reconcile` only."""
        stmt = self.index_scan.bind(())
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield r.user_id, r.service, _index_row(r)

    def scan_index_from(self, after_token: int, fetch_size: int) -> Iterator[tuple[int, str, str, IndexRow]]:
        """(partition token, user_id, service, row) of the index after ``after_token``, in token order."""
        stmt = self.index_scan_from.bind((after_token,))
        stmt.fetch_size = fetch_size
        for r in rows(self.session, stmt):
            yield int(r.t), r.user_id, r.service, _index_row(r)

    def write_user_level(
        self,
        user_id: str,
        service: str,
        method: str,
        type_: str,
        target: str,
        notification_key: str,
        registered_at: int,
    ) -> ResponseFuture:
        data = user_level_data(notification_key, registered_at)
        return self.session.execute_async(
            self.index_insert, (user_id, service, method, type_, target, USER_LEVEL, data)
        )

    def delete_index_row(self, user_id: str, service: str, row: IndexRow) -> ResponseFuture:
        return self.session.execute_async(
            self.index_delete, (user_id, service, row.method, row.type_, row.target, row.device_token)
        )

    def delete_user_index(self, user_id: str, service: str) -> None:
        self.session.execute(self.index_delete_user, (user_id, service))


def _index_row(r: Any) -> IndexRow:
    """An IndexRow of a scan's row (the driver's named tuple)."""
    return IndexRow(
        r.notification_method, r.notification_type, r.target, r.device_token, json.loads(r.data) if r.data else {}
    )


class TokenIndex:
    """notification_per_token: who may hold rows of a device token (schema/cql/0003; a superset)."""

    def __init__(self, session: Session, keyspaces: Keyspaces) -> None:
        self.session = session
        n = keyspaces.notification
        self.token_insert = session.prepare(
            f"INSERT INTO {n}.notification_per_token (service, device_token, user_id) VALUES (?, ?, ?)"
        )
        self.token_delete = session.prepare(
            f"DELETE FROM {n}.notification_per_token WHERE service = ? AND device_token = ? AND user_id = ?"
        )
        self.token_users = session.prepare(
            f"SELECT user_id FROM {n}.notification_per_token WHERE service = ? AND device_token = ?"
        )

    def token_holders_async(self, service: str, device_token: str) -> ResponseFuture:
        return self.session.execute_async(self.token_users, (service, device_token))

    @staticmethod
    def holders_of(future: ResponseFuture) -> list[str]:
        return [r.user_id for r in future.result()]

    def token_holders(self, service: str, device_token: str) -> list[str]:
        """Users that may hold rows of ``device_token`` (the token index; a superset)."""
        return self.holders_of(self.token_holders_async(service, device_token))

    def forget_token_holder(self, service: str, device_token: str, user_id: str) -> ResponseFuture:
        return self.session.execute_async(self.token_delete, (service, device_token, user_id))

    def note_token_holder(self, service: str, device_token: str, user_id: str) -> ResponseFuture:
        return self.session.execute_async(self.token_insert, (service, device_token, user_id))
