"""All SQL of the web console's sessions (table ``console_session``, schema/mysql/0016). Functions
take the caller's Session and never commit. Times come from the database clock (UTC)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from notee.store.mysql import AnyRow, affected


def insert_session(
    session: Session,
    *,
    session_hash: str,
    service: str | None,
    key_id: str | None,
    admin_fingerprint: str | None,
    csrf_token: str,
    ttl_s: int,
) -> None:
    session.execute(
        text(
            "INSERT INTO console_session (session_hash, service, key_id, admin_fingerprint, csrf_token,"
            " created_at, expires_at) VALUES (:h, :s, :k, :a, :c, UTC_TIMESTAMP(6),"
            " UTC_TIMESTAMP(6) + INTERVAL :ttl SECOND)"
        ),
        {"h": session_hash, "s": service, "k": key_id, "a": admin_fingerprint, "c": csrf_token, "ttl": ttl_s},
    )


def live_session(session: Session, session_hash: str) -> AnyRow | None:
    """The unexpired session with this hash; for a service session only while its API key is not
    revoked (``key_revoked_at`` is read with it so the check is one primary-key join)."""
    return session.execute(
        text(
            "SELECT s.service, s.key_id, s.admin_fingerprint, s.csrf_token, s.expires_at, k.revoked_at AS key_revoked_at,"
            " k.service AS key_service"
            " FROM console_session s LEFT JOIN api_key k ON k.key_id = s.key_id"
            " WHERE s.session_hash = :h AND s.expires_at > UTC_TIMESTAMP(6)"
        ),
        {"h": session_hash},
    ).one_or_none()


def delete_session(session: Session, session_hash: str) -> int:
    return affected(session.execute(text("DELETE FROM console_session WHERE session_hash = :h"), {"h": session_hash}))


def prune_expired(session: Session, *, batch: int) -> int:
    """Delete up to ``batch`` expired sessions (retention)."""
    return affected(
        session.execute(
            text("DELETE FROM console_session WHERE expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT :n"),
            {"n": batch},
        )
    )
