"""Audience bench data: a service of ``n`` users, each with tags and one device, bulk-loaded straight
into MySQL (multi-row INSERTs, no API), for the audience benchmarks (``estimate_s``; any other that
needs a large tagged population may reuse it).

The population is deterministic in ``i`` (user ``i`` of ``n``) so a figure knows what a filter
matches without counting it first:

- ``user_id``: ascending in ``i`` and spread evenly over the 256 slots (its first byte is
  ``i * 256 // n``), so every insert appends to the primary keys;
- tags: ``plan`` (string: ``pro`` when ``i % 10 == 0``, ``team`` when ``i % 10 == 1``, else
  ``free``), ``score`` (number ``i % 100``), ``beta`` (boolean, true when ``i % 20 == 0``);
- one device: ``IOS`` when ``i % 3 == 0`` else ``AOS``; region from ``REGIONS`` by ``i % 4``;
  app_version ``5.{i % 12}``; updated_at spread over the last 90 days;
- the user's locale ``ko-KR`` / ``en-US`` by parity.

``load_users`` loads a service once: a service that already holds ``n`` users is kept (its
data is made the same way every time), so re-runs of a bench at one size do not load again.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from notee.domain.filters import version_key

REGIONS = ("KR", "JP", "US", "DE")
BATCH = 5_000  # users per INSERT statement (three statements a batch: users, devices, tags)


def service_for(n: int) -> str:
    """The dedicated service of a population of ``n`` users."""
    return f"BAUD{n}"


def user_id_of(i: int, n: int) -> str:
    """User ``i``'s id: a UUID-shaped string ascending in ``i``, its first byte ``i * 256 // n``."""
    head = i * (1 << 32) // n
    return f"{head:08x}-0000-4000-8000-{i:012x}"


def plan_of(i: int) -> str:
    return "pro" if i % 10 == 0 else "team" if i % 10 == 1 else "free"


def _quote(value: str) -> str:
    # every value is generated here (hex, digits, fixed words): quoting is only for form's sake
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _batch_sql(service: str, lo: int, hi: int, n: int, now: datetime) -> tuple[str, str, str]:
    svc = _quote(service)
    stamp = _quote(now.strftime("%Y-%m-%d %H:%M:%S"))
    users, devices, tags = [], [], []
    for i in range(lo, hi):
        uid = _quote(user_id_of(i, n))
        locale = "'ko-KR'" if i % 2 else "'en-US'"
        users.append(f"({svc},'u{i:09d}','',{locale},{uid},{stamp},{stamp})")
        os_ = "IOS" if i % 3 == 0 else "AOS"
        version = f"5.{i % 12}"
        seen = _quote((now - timedelta(seconds=(i * 7919) % (90 * 86400))).strftime("%Y-%m-%d %H:%M:%S"))
        devices.append(
            f"({svc},{uid},'tok{i:012d}','{os_}','{REGIONS[i % 4]}','{version}','{version_key(version)}',{stamp},{seen})"
        )
        tags.append(f"({svc},{uid},'plan','s',{_quote(plan_of(i))},NULL,{stamp})")
        tags.append(f"({svc},{uid},'score','n',NULL,{i % 100},{stamp})")
        tags.append(f"({svc},{uid},'beta','b',NULL,{1 if i % 20 == 0 else 0},{stamp})")
    return (
        "INSERT INTO `user` (service, service_user_id, service_user_name, locale, user_id, created_at, updated_at)"
        " VALUES " + ",".join(users),
        "INSERT INTO device (service, user_id, device_token, device_os, region, app_version, app_version_key,"
        " created_at, updated_at) VALUES " + ",".join(devices),
        "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, value_num, updated_at) VALUES "
        + ",".join(tags),
    )


def _users_of(runtime: Any, service: str) -> int:
    with runtime.engine.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM `user` WHERE service = :s"), {"s": service}).scalar_one())


def load_users(runtime: Any, n: int, service: str | None = None, *, batch: int = BATCH) -> dict[str, Any]:
    """Make ``service`` (default ``service_for(n)``) hold the population of ``n`` users described
    above; load it unless it already does. Answers {service, users, loaded (bool), load_s}."""
    from bench.tenant import make_tenant

    service = service or service_for(n)
    with runtime.engine.connect() as conn:
        exists = conn.execute(text("SELECT 1 FROM service WHERE service = :s"), {"s": service}).first()
    if exists is not None and _users_of(runtime, service) == n:
        return {"service": service, "users": n, "loaded": False, "load_s": 0.0}
    if exists is not None:  # a partial load (interrupted): start over
        with runtime.engine.begin() as conn:
            conn.execute(text("DELETE FROM service WHERE service = :s"), {"s": service})
    make_tenant(runtime, service)
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    t0 = time.perf_counter()
    with runtime.engine.connect() as conn:
        # generated rows that satisfy every key: the server need not check them one by one
        conn.exec_driver_sql("SET SESSION foreign_key_checks = 0, unique_checks = 0")
        try:
            for lo in range(0, n, batch):
                for stmt in _batch_sql(service, lo, min(n, lo + batch), n, now):
                    conn.exec_driver_sql(stmt)
                conn.commit()
        finally:
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 1, unique_checks = 1")
    if n >= 100_000:  # fresh statistics after a large load (a small one, a test's, changes no plan)
        with runtime.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE TABLE `user`, device, user_tag")
    return {"service": service, "users": n, "loaded": True, "load_s": time.perf_counter() - t0}
