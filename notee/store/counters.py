"""The template cache ``version`` counter in ``numbering.notification`` (seed counters).

Counters are not idempotent: the update runs under the ``COUNTER_PROFILE`` execution profile (no
driver retry), and a timeout is raised to the caller, never retried blindly (DATA-RULES.md).

Statements are prepared once per Cassandra session: the cache below is keyed weakly by the session
object, so it holds no client and disappears with the session.
"""

from __future__ import annotations

import weakref

from cassandra.cluster import Session as CqlSession
from cassandra.query import PreparedStatement

from notee.store.cassandra import COUNTER_PROFILE, Keyspaces

_prepared: weakref.WeakKeyDictionary[CqlSession, dict[str, PreparedStatement]] = weakref.WeakKeyDictionary()


def _stmt(cql: CqlSession, query: str) -> PreparedStatement:
    per_session = _prepared.setdefault(cql, {})
    stmt = per_session.get(query)
    if stmt is None:
        stmt = per_session[query] = cql.prepare(query)
    return stmt


def bump_template_version(cql: CqlSession, keyspaces: Keyspaces, service: str, method: str, type_: str) -> None:
    """version += 1 for (service, method, type). Not retried on timeout (the caller sees the error)."""
    stmt = _stmt(cql, f"UPDATE {keyspaces.numbering}.notification SET version = version + 1 "
                      "WHERE service = ? AND notification_method = ? AND notification_type = ?")
    cql.execute(stmt, (service, method, type_), execution_profile=COUNTER_PROFILE)


def template_version(cql: CqlSession, keyspaces: Keyspaces, service: str, method: str, type_: str) -> int:
    """Current version (0 when the counter row does not exist yet)."""
    stmt = _stmt(cql, f"SELECT version FROM {keyspaces.numbering}.notification "
                      "WHERE service = ? AND notification_method = ? AND notification_type = ?")
    row = cql.execute(stmt, (service, method, type_)).one()
    return int(row.version or 0) if row is not None else 0


def template_versions(cql: CqlSession, keyspaces: Keyspaces, service: str) -> dict[tuple[str, str], int]:
    """Every (method, type) -> version of one service: one partition read (the service is the key)."""
    stmt = _stmt(cql, f"SELECT notification_method, notification_type, version FROM {keyspaces.numbering}.notification "
                      "WHERE service = ?")
    return {(r.notification_method, r.notification_type): int(r.version or 0) for r in cql.execute(stmt, (service,))}
