"""Everything the stores hold for one service, as a comparable value: every MySQL row of every table
with a ``service`` column (found from the schema, so a new table is covered), the service's counter
rows and the per-user subscription index of its users in Cassandra. Two equal snapshots mean a request
wrote nothing. Rate-limit buckets are excluded: they count requests, not data."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from notee.runtime import Runtime

NOT_DATA = {"rate_bucket"}  # request accounting, changed by every request by design


def service_snapshot(runtime: Runtime, service: str) -> dict[str, Any]:
    snap: dict[str, Any] = {}
    with runtime.engine.connect() as conn:
        tables = conn.execute(text(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = DATABASE() "
            "AND column_name = 'service' ORDER BY table_name")).scalars().all()
        for table in tables:
            if table in NOT_DATA:
                continue
            rows = conn.execute(text(f"SELECT * FROM `{table}` WHERE service = :s"), {"s": service}).all()
            snap[f"mysql.{table}"] = sorted(repr(tuple(r)) for r in rows)
        users = conn.execute(text("SELECT user_id FROM `user` WHERE service = :s"), {"s": service}).scalars().all()
    ks = runtime.keyspaces
    counters = runtime.cql.execute(f"SELECT * FROM {ks.numbering}.notification WHERE service = %s", (service,))
    snap["cql.counters"] = sorted(repr(tuple(r)) for r in counters)
    index = []
    for user_id in users:
        rows = runtime.cql.execute(f"SELECT * FROM {ks.notification}.notification_per_user "
                                   "WHERE user_id = %s AND service = %s", (user_id, service))
        index.extend(repr(tuple(r)) for r in rows)
    snap["cql.per_user"] = sorted(index)
    return snap
