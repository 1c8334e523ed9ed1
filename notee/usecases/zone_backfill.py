"""`notee backfill-zones`: the zone of each user on its topic slot rows written before they carried
one (CQL 0004), so a local-time publish reads each zone's rows alone (docs/FANOUT.md)."""

from __future__ import annotations

import logging

from notee.domain import subscriptions
from notee.store import services_sql, users_sql
from notee.store.runtime import Runtime

log = logging.getLogger(__name__)

BACKFILL_USERS = 500  # users whose slot rows one backfill transaction rewrites


def backfill_zones(runtime: Runtime, service: str | None = None) -> dict[str, int]:
    """`notee backfill-zones`: write every user's zone on its topic slot rows (CQL 0004) for the
    services not yet marked (``service.slot_zones`` = 0, those that existed before the column), then
    mark each: from then on its local-time jobs read each zone's rows alone (docs/FANOUT.md). Users
    are done ``BACKFILL_USERS`` at a time, each batch under its users' shared row locks; safe to run
    again (it rewrites the same values). Run it once the API, workers and scheduler all run a
    version that stores the zone (rows an older process writes after the walk would carry none)."""
    st = runtime.statements
    counts = {"services": 0, "users": 0, "rows": 0}
    with runtime.sessions() as s:
        if service is None:
            services = services_sql.list_services(s)
        else:  # its own row: not a read of every service's to keep one
            services = [r for r in [services_sql.get_service(s, service)] if r is not None]
    for svc in services:
        if svc.slot_zones:
            continue
        after: str | None = None
        while True:
            with runtime.sessions.begin() as s:  # the caller owns the commit: it ends the batch's locks
                users = users_sql.user_ids_page(s, svc.service, after, BACKFILL_USERS)
                if not users:
                    services_sql.set_slot_zones(s, svc.service)
                    break
                counts["rows"] += subscriptions.backfill_zones(s, st, svc.service, users)
            counts["users"] += len(users)
            after = users[-1]
        counts["services"] += 1
        log.info("backfill-zones: %s done (its slot rows carry their zone)", svc.service)
    return counts
