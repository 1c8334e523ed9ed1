"""The SQL of an audience job besides the filter's (notee/store/audience_sql.py): a publish to a list
of users (docs/AUDIENCES.md "User lists": their service user ids resolved to platform ids, kept
beside the job in ``job_audience_user``, and the walk of their devices in (user_id, device_token)
order, one slot of audience_sql's at a time), the segment definitions a job snapshots, and which
user of a filter's audience holds a shared token first (each device is sent once)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, bindparam, func, select, text
from sqlalchemy.orm import Session

from notee.store.audience_sql import AudienceQuery, audience_condition, d, slot_bounds, u

CHUNK = 1000  # ids per IN (...) / rows per INSERT: well inside max_allowed_packet


def resolve_users(session: Session, service: str, service_user_ids: Sequence[str]) -> list[str]:
    """The platform ids of the service's users among ``service_user_ids`` (unknown ids are left
    out), in no particular order. Primary-key lookups, ``CHUNK`` ids per query."""
    found: list[str] = []
    stmt = text("SELECT user_id FROM `user` WHERE service = :s AND service_user_id IN :ids").bindparams(
        bindparam("ids", expanding=True)
    )
    for i in range(0, len(service_user_ids), CHUNK):
        chunk = list(service_user_ids[i : i + CHUNK])
        found += [r.user_id for r in session.execute(stmt, {"s": service, "ids": chunk})]
    return found


def insert_job_users(session: Session, job_id: str, user_ids: Sequence[str]) -> None:
    """Keep a job's users beside it (the caller's transaction: the job's)."""
    stmt = text("INSERT INTO job_audience_user (job_id, user_id) VALUES (:j, :u)")
    for i in range(0, len(user_ids), CHUNK):
        session.execute(stmt, [{"j": job_id, "u": u} for u in user_ids[i : i + CHUNK]])


def user_list_page(
    session: Session,
    service: str,
    job_id: str,
    slot: int,
    after: tuple[str, str] | None,
    limit: int,
    platforms: Sequence[str] = (),
) -> list[tuple[str, str, str]]:
    """(user_id, device_token, device_os) of the job's users' devices in one slot, after the
    ``after`` key, in (user_id, device_token) order, at most ``limit``. A token several listed users
    hold is read once, with the lowest of their ids (each device gets a publish at most once).
    Index use: job_audience_user's primary key (job_id, user_id) for the slot's range, device's
    primary key per user, ix_device_token for the shared-token check."""
    low, high = slot_bounds(slot)
    after_user, after_token = after if after is not None else ("", "")
    narrow = " AND d.device_os IN :os" if platforms else ""
    narrow2 = " AND d2.device_os IN :os" if platforms else ""
    # Binary comparisons throughout: device's ascii columns compare case-insensitively by default,
    # and slot 'A' must not meet the ids of slot 'a'.
    sql = (
        "SELECT j.user_id, d.device_token, d.device_os FROM job_audience_user j"
        " JOIN device d ON d.service = :s AND d.user_id = j.user_id"
        " WHERE j.job_id = :j AND j.user_id >= CONVERT(:low USING ascii) COLLATE ascii_bin"
        + " AND j.user_id < CONVERT(:high USING ascii) COLLATE ascii_bin"
        + " AND (j.user_id > CONVERT(:au USING ascii) COLLATE ascii_bin OR (j.user_id = CONVERT(:au USING ascii)"
        " COLLATE ascii_bin AND d.device_token COLLATE ascii_bin > CONVERT(:at USING ascii) COLLATE ascii_bin))"
        + narrow
        + " AND NOT EXISTS (SELECT 1 FROM device d2 JOIN job_audience_user j2 ON j2.job_id = :j"
        " AND j2.user_id = d2.user_id WHERE d2.service = :s AND d2.device_token = d.device_token"
        " AND j2.user_id < j.user_id" + narrow2 + ")"
        " ORDER BY j.user_id, d.device_token COLLATE ascii_bin LIMIT :n"
    )
    stmt = text(sql)
    params: dict[str, object] = {
        "s": service,
        "j": job_id,
        "low": low,
        "high": high,
        "au": after_user,
        "at": after_token,
        "n": limit,
    }
    if platforms:
        stmt = stmt.bindparams(bindparam("os", expanding=True))
        params["os"] = list(platforms)
    return [(r.user_id, r.device_token, r.device_os) for r in session.execute(stmt, params)]


def first_holders(session: Session, service: str, query: AudienceQuery, tokens: Sequence[str]) -> dict[str, str]:
    """token -> the lowest user id of the audience's (and platforms') devices holding it, for
    ``tokens`` (those of a walk's rows its page marked as held by several users,
    audience_sql.marked_page): a device several matching users share is sent with that user only.
    ix_device_token per token; the audience's condition per matching row."""
    if not tokens:
        return {}
    where = [d.c.service == service, d.c.device_token.in_(list(tokens))]
    if query.platforms is not None:
        where.append(d.c.device_os.in_(query.platforms))
    if query.audience is not None:
        where.append(audience_condition(query.audience, query.now))
    joined = d.join(u, and_(u.c.service == d.c.service, u.c.user_id == d.c.user_id))
    stmt = select(d.c.device_token, func.min(d.c.user_id)).select_from(joined).where(*where).group_by(d.c.device_token)
    return {str(t): str(first) for t, first in session.execute(stmt)}
