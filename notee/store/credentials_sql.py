"""Provider credentials SQL: the ``provider_credentials`` table (each service's FCM and APNs
credentials and VAPID key, encrypted by ``notee/domain/credentials.py``; this module never sees them in clear).

SQLAlchemy Core over the table of ``schema/mysql/0001_core.sql``. Every function takes the caller's
Session and never commits: the domain function that owns the unit of work does.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, DateTime, LargeBinary, MetaData, String, Table, select
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.orm import Session

from notee.store.mysql import AnyRow

metadata = MetaData()

credentials_t = Table(
    "provider_credentials",
    metadata,
    Column("service", String(32), primary_key=True),
    Column("fcm_encrypted", LargeBinary, nullable=True),
    Column("apns_encrypted", LargeBinary, nullable=True),
    Column("webpush_encrypted", LargeBinary, nullable=True),  # schema/mysql/0031_web_push.sql
    Column("updated_at", DateTime),
)


BLOB_COLUMNS = ("fcm_encrypted", "apns_encrypted", "webpush_encrypted")


def upsert_credential(session: Session, *, service: str, column: str, blob: bytes | None, now: datetime) -> None:
    """Set (or clear, with None) one provider's encrypted blob; ``column`` is one of ``BLOB_COLUMNS``."""
    if column not in BLOB_COLUMNS:
        raise ValueError(column)
    stmt = mysql_insert(credentials_t).values(service=service, updated_at=now, **{column: blob})
    stmt = stmt.on_duplicate_key_update({column: stmt.inserted[column], "updated_at": stmt.inserted.updated_at})
    session.execute(stmt)


def get_credentials(session: Session, service: str) -> AnyRow | None:
    return session.execute(select(credentials_t).where(credentials_t.c.service == service)).one_or_none()


def lock_all_credentials(session: Session) -> list[AnyRow]:
    """Every credentials row, locked until the caller's transaction ends (key rotation)."""
    return list(session.execute(select(credentials_t).order_by(credentials_t.c.service).with_for_update()).all())


def replace_credential_blobs(session: Session, *, service: str, blobs: dict[str, bytes | None], now: datetime) -> None:
    """Every blob column of ``service`` (``BLOB_COLUMNS`` -> its new value) at once (key rotation)."""
    if set(blobs) != set(BLOB_COLUMNS):
        raise ValueError(sorted(blobs))
    session.execute(credentials_t.update().where(credentials_t.c.service == service).values(**blobs, updated_at=now))
