"""The SQL of a publish to a list of users (docs/AUDIENCES.md "User lists"): their service user ids
resolved to platform ids, kept beside the job (``job_audience_user``), and the walk of their devices
in (user_id, device_token) order, one slot (the first byte of the user id) at a time."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

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


def slot_bounds(slot: int) -> tuple[str, str | None] | None:
    """The user ids of a slot: those from chr(slot) up to (not including) chr(slot + 1); None for a
    slot past ASCII (user ids are ASCII: nothing there)."""
    if slot >= 128:
        return None
    return chr(slot), chr(slot + 1) if slot < 127 else None


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
    bounds = slot_bounds(slot)
    if bounds is None:
        return []
    low, high = bounds
    after_user, after_token = after if after is not None else ("", "")
    narrow = " AND d.device_os IN :os" if platforms else ""
    narrow2 = " AND d2.device_os IN :os" if platforms else ""
    # Binary comparisons throughout: device's ascii columns compare case-insensitively by default,
    # and slot 'A' must not meet the ids of slot 'a'.
    sql = (
        "SELECT j.user_id, d.device_token, d.device_os FROM job_audience_user j"
        " JOIN device d ON d.service = :s AND d.user_id = j.user_id"
        " WHERE j.job_id = :j AND j.user_id >= CONVERT(:low USING ascii) COLLATE ascii_bin"
        + (" AND j.user_id < CONVERT(:high USING ascii) COLLATE ascii_bin" if high is not None else "")
        + " AND (j.user_id > CONVERT(:au USING ascii) COLLATE ascii_bin OR (j.user_id = CONVERT(:au USING ascii)"
        " COLLATE ascii_bin AND d.device_token COLLATE ascii_bin > CONVERT(:at USING ascii) COLLATE ascii_bin))"
        + narrow
        + " AND NOT EXISTS (SELECT 1 FROM device d2 JOIN job_audience_user j2 ON j2.job_id = :j"
        " AND j2.user_id = d2.user_id WHERE d2.service = :s AND d2.device_token = d.device_token"
        " AND j2.user_id < j.user_id" + narrow2 + ")"
        " ORDER BY j.user_id, d.device_token COLLATE ascii_bin LIMIT :n"
    )
    stmt = text(sql)
    params: dict[str, object] = {"s": service, "j": job_id, "low": low, "au": after_user, "at": after_token, "n": limit}
    if high is not None:
        params["high"] = high
    if platforms:
        stmt = stmt.bindparams(bindparam("os", expanding=True))
        params["os"] = list(platforms)
    return [(r.user_id, r.device_token, r.device_os) for r in session.execute(stmt, params)]
