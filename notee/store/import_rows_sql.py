"""Bulk reads and writes of users, devices and tags for import and export: multi-row upserts (one
statement per batch, however many lines) and page reads in ``service_user_id`` order. The tables are
``user``, ``device`` (schema/mysql/0001_core.sql, 0026_audiences.sql) and ``user_tag`` (0026).
Every function takes the caller's Session and never commits.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, column, delete, select, table, tuple_
from sqlalchemy.orm import Session

from notee.store.mysql import AnyRow
from notee.store.sql_literals import Literals

user_t = table(
    "user",
    column("service"),
    column("service_user_id"),
    column("service_user_name"),
    column("locale"),
    column("timezone"),
    column("user_id"),
    column("created_at"),
    column("updated_at"),
)
device_t = table(
    "device",
    column("service"),
    column("user_id"),
    column("device_token"),
    column("device_os"),
    column("region"),
    column("app_version"),
    column("app_version_key"),
    column("created_at"),
    column("updated_at"),
)
tag_t = table(
    "user_tag",
    column("service"),
    column("user_id"),
    column("tag_key"),
    column("kind"),
    column("value_str"),
    column("value_num"),
    column("updated_at"),
)


# A statement of many rows stays well under MariaDB's max_allowed_packet (16 MiB by default).
STATEMENT_MAX_BYTES = 2 * 1024 * 1024


def _upsert(session: Session, table_name: str, columns: Sequence[str], given: Sequence[str], rows: _Rows) -> None:
    """``INSERT … VALUES (…), (…) … ON DUPLICATE KEY UPDATE`` of ``rows.rows`` (dicts of ``columns``)
    and ``rows.fixed`` (the columns of the same value on every row, rendered once) updating those
    ``given`` and ``updated_at``, which moves only when one of them changes (the same file imported
    twice changes nothing); it comes first, since MariaDB assigns left to right and it compares the
    old values. The VALUES are rendered here with the driver's escaping (``notee.store.sql_literals``), a statement
    per ``STATEMENT_MAX_BYTES``: SQLAlchemy's parameters and PyMySQL's ``executemany`` cost more CPU
    per row than the server's work (docs/BENCHMARKS.md, "import_users_per_s")."""
    if not rows.rows:
        return
    same = " AND ".join(f"{c} <=> VALUES({c})" for c in given) or "TRUE"
    updates = ", ".join(
        [f"updated_at = IF({same}, updated_at, VALUES(updated_at))", *(f"{c} = VALUES({c})" for c in given)]
    )
    varying = [c for c in columns if c not in rows.fixed]
    head = f"INSERT INTO {table_name} ({', '.join([*varying, *rows.fixed])}) VALUES "
    tail = f" ON DUPLICATE KEY UPDATE {updates}"
    conn = session.connection()
    lit = Literals(conn)
    string, other = lit.string, lit.other
    end = "".join("," + (string(v) if isinstance(v, str) else other(v)) for v in rows.fixed.values()) + ")"
    parts: list[str] = []
    size = 0
    for row in rows.rows:
        # A chunk has ~6,000 rows of ~5 varying values: the common cases without a look-up.
        values = [
            string(v) if v.__class__ is str else "NULL" if v is None else other(v)
            for v in map(row.__getitem__, varying)
        ]
        part = "(" + ",".join(values) + end
        if parts and size + len(part) > STATEMENT_MAX_BYTES:
            conn.exec_driver_sql(head + ",".join(parts) + tail, execution_options={"no_parameters": True})
            parts, size = [], 0
        parts.append(part)
        size += len(part) + 1
    conn.exec_driver_sql(head + ",".join(parts) + tail, execution_options={"no_parameters": True})


@dataclass(frozen=True, slots=True)
class _Rows:
    rows: Sequence[dict[str, Any]]
    fixed: dict[str, Any]  # column -> its value on every row


@contextmanager
def parents_locked(session: Session) -> Iterator[None]:
    """Run the block's statements without foreign-key checks (``foreign_key_checks = 0``, this
    connection only), for rows whose parent rows the caller's transaction has locked or written, so
    the check could only find them. Restored after the block; a connection that cannot be restored
    is invalidated, never handed back to the pool with the checks off."""
    conn = session.connection()
    conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")
    try:
        yield
    finally:
        try:
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 1")
        except Exception:
            conn.invalidate()
            raise


def users_by_service_id(session: Session, service: str, service_user_ids: Collection[str]) -> dict[str, AnyRow]:
    """service_user_id -> (user_id, timezone) of those that exist (the primary key)."""
    if not service_user_ids:
        return {}
    conn = session.connection()
    # The literals rendered here, as _upsert's (SQLAlchemy's expanding IN of 1,000 ids cost more CPU
    # than the query); no_parameters: a '%' in an id is text, not a placeholder.
    lit = Literals(conn)
    ids = ",".join(map(lit.string, sorted(service_user_ids)))
    rows = conn.exec_driver_sql(
        f"SELECT service_user_id, user_id, timezone FROM `user` WHERE service = {lit.string(service)}"
        f" AND service_user_id IN ({ids})",
        execution_options={"no_parameters": True},
    )
    return {r.service_user_id: r for r in rows}


def upsert_users(
    session: Session, service: str, rows: Sequence[tuple[str, str, dict[str, Any]]], now: datetime
) -> None:
    """Create or update users: (service_user_id, user_id for a new user, the columns given). Rows are
    written in batches of the same columns given (an update never touches a column not given); the
    platform user_id is only set on creation."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for service_user_id, new_id, profile in sorted(rows, key=lambda r: r[0]):
        values = {
            "service_user_id": service_user_id,
            "user_id": new_id,
            "service_user_name": "",
        } | profile
        groups.setdefault(tuple(sorted(profile)), []).append(values)
    for given, batch in groups.items():
        columns = ["service", "service_user_id", "user_id", "created_at", "updated_at", "service_user_name"]
        columns += [c for c in given if c not in columns]
        _upsert(
            session, "`user`", columns, given, _Rows(batch, {"service": service, "created_at": now, "updated_at": now})
        )


def device_keys(session: Session, service: str, user_ids: Collection[str]) -> set[tuple[str, str]]:
    """(user_id, device_token) of every device of these users (the primary key)."""
    if not user_ids:
        return set()
    rows = session.execute(
        select(device_t.c.user_id, device_t.c.device_token).where(
            and_(device_t.c.service == service, device_t.c.user_id.in_(sorted(user_ids)))
        )
    )
    return {(r[0], r[1]) for r in rows}


def upsert_devices(session: Session, service: str, rows: Sequence[dict[str, Any]], now: datetime) -> None:
    """Register devices: each row has ``user_id``, ``device_token``, ``device_os`` and the optional
    columns given (``region``, ``app_version`` + ``app_version_key``); a column not given is left as
    it is (a new device's region: '')."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["user_id"], r["device_token"])):
        given = tuple(sorted(k for k in row if k not in ("user_id", "device_token", "device_os")))
        groups.setdefault(given, []).append({"region": ""} | row)
    for given, values in groups.items():
        columns = ["service", "user_id", "device_token", "device_os", "region", "created_at", "updated_at"]
        columns += [c for c in given if c not in columns]
        fixed = {"service": service, "created_at": now, "updated_at": now}
        _upsert(session, "device", columns, ("device_os", *given), _Rows(values, fixed))


def tag_keys(session: Session, service: str, user_ids: Collection[str]) -> dict[str, set[str]]:
    """user_id -> the tag keys it holds (the primary key)."""
    if not user_ids:
        return {}
    out: dict[str, set[str]] = {}
    rows = session.execute(
        select(tag_t.c.user_id, tag_t.c.tag_key).where(
            and_(tag_t.c.service == service, tag_t.c.user_id.in_(sorted(user_ids)))
        )
    )
    for user_id, key in rows:
        out.setdefault(user_id, set()).add(key)
    return out


def upsert_tags(session: Session, service: str, rows: Sequence[dict[str, Any]], now: datetime) -> None:
    """Set tags: rows of ``user_id``, ``tag_key``, ``kind``, ``value_str``, ``value_num``."""
    if not rows:
        return
    values = sorted(rows, key=lambda r: (r["user_id"], r["tag_key"]))
    columns = ["service", "user_id", "tag_key", "kind", "value_str", "value_num", "updated_at"]
    fixed = {"service": service, "updated_at": now}
    _upsert(session, "user_tag", columns, ("kind", "value_str", "value_num"), _Rows(values, fixed))


def delete_tags(session: Session, service: str, pairs: Collection[tuple[str, str]]) -> None:
    """Remove (user_id, tag_key) tags."""
    if pairs:
        session.execute(
            delete(tag_t).where(
                and_(tag_t.c.service == service, tuple_(tag_t.c.user_id, tag_t.c.tag_key).in_(sorted(pairs)))
            )
        )


# --- export -----------------------------------------------------------------------------------------


def users_page(session: Session, service: str, after: str | None, limit: int) -> list[AnyRow]:
    """A service's users in service_user_id order after ``after`` (the primary key: keyset paging)."""
    q = select(
        user_t.c.service_user_id, user_t.c.user_id, user_t.c.service_user_name, user_t.c.locale, user_t.c.timezone
    ).where(user_t.c.service == service)
    if after is not None:
        q = q.where(user_t.c.service_user_id > after)
    return list(session.execute(q.order_by(user_t.c.service_user_id).limit(limit)))


def devices_of(session: Session, service: str, user_ids: Collection[str]) -> list[AnyRow]:
    """The devices of these users, by user and token."""
    if not user_ids:
        return []
    return list(
        session.execute(
            select(
                device_t.c.user_id,
                device_t.c.device_token,
                device_t.c.device_os,
                device_t.c.region,
                device_t.c.app_version,
            )
            .where(and_(device_t.c.service == service, device_t.c.user_id.in_(sorted(user_ids))))
            .order_by(device_t.c.user_id, device_t.c.device_token)
        )
    )


def tags_of(session: Session, service: str, user_ids: Collection[str]) -> list[AnyRow]:
    """The tags of these users, by user and key."""
    if not user_ids:
        return []
    return list(
        session.execute(
            select(tag_t.c.user_id, tag_t.c.tag_key, tag_t.c.kind, tag_t.c.value_str, tag_t.c.value_num)
            .where(and_(tag_t.c.service == service, tag_t.c.user_id.in_(sorted(user_ids))))
            .order_by(tag_t.c.user_id, tag_t.c.tag_key)
        )
    )


def tag_kinds(session: Session, service: str) -> list[tuple[str, str]]:
    """The distinct (tag_key, kind) of a service's tags, in order (a CSV export's tag columns)."""
    rows = session.execute(
        select(tag_t.c.tag_key, tag_t.c.kind).where(tag_t.c.service == service).distinct().order_by(tag_t.c.tag_key)
    )
    return [(r[0], r[1]) for r in rows]
