"""The fair order of the claim between tenants: which claimable task a worker locks next
(``next_claimable``), and whether a lane running one tenant's task should give it back to another
(``tenant_waiting``, ``live_leases``). The claim itself and every write under a lease are
notee/store/task_leases.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session, sessionmaker

# How many tasks the fair claim ranks per read. Concurrent claimers see the same ranking, so each
# locks the first candidate nobody else holds; when every candidate was taken meanwhile, the claim
# ranks the next ones (those tried left out) rather than come back empty.
FAIR_CANDIDATES = 8

_TASK_COLUMNS = (
    "job_id, task_no, slot_from, slot_to, current_slot, paging_state, attempts, resume_no, resume_token, error, state"
)
_CLAIMABLE = "t.state IN ('queued', 'running') AND t.lease_until <= UTC_TIMESTAMP(6)"
_OPEN_JOB = "j.state IN ('scheduled', 'queued', 'running')"  # with the tenant: ix_job_open (0023)
# Live leases per tenant (a derived table ``l``): running tasks whose lease has not expired (a range
# of ix_task_claim holding one row per busy lane), or, per tenant, its running jobs (ix_job_open).
_LEASES = (
    "(SELECT lj.service, COUNT(*) AS leased FROM fanout_task lt JOIN fanout_job lj ON lj.job_id = lt.job_id"
    " WHERE lt.state = 'running' AND lt.lease_until > UTC_TIMESTAMP(6) AND lj.state = 'running' GROUP BY lj.service) l"
)


def _scoped(sql: str, services: Sequence[str] | None) -> Any:
    if services is None:
        return text(sql.replace("{scope}", ""))
    return text(sql.replace("{scope}", " AND j.service IN :svc")).bindparams(bindparam("svc", expanding=True))


def _not_tried(tried: Sequence[tuple[str, int]]) -> tuple[str, dict[str, Any]]:
    """A condition leaving out the candidates a claim tried already, and its parameters."""
    if not tried:
        return "", {}
    keys = ", ".join(f"(:tj{i}, :tn{i})" for i in range(len(tried)))
    params: dict[str, Any] = {}
    for i, (job_id, task_no) in enumerate(tried):
        params |= {f"tj{i}": job_id, f"tn{i}": task_no}
    return f" AND (t.job_id, t.task_no) NOT IN ({keys})", params


def _fair_candidates(
    session: Session,
    services: Sequence[str] | None,
    *,
    unserved_only: bool = False,
    tried: Sequence[tuple[str, int]] = (),
) -> list[tuple[str, int]]:
    """The claimable tasks in the order the fair claim takes them (a plain read, no locks): first the
    tenant with the fewest live leases, within a tenant a task whose lease expired (a crashed or
    stalled worker's, resumed from its checkpoint) before its queued ones, then the longest due.
    Tenants with as many leases are served longest-due first, which rotates them. ``unserved_only``:
    only tenants without any live lease (the spare lane's work); ``tried``: left out. Of some
    services, their open jobs (ix_job_open) and those jobs' tasks: no other tenant's rows."""
    skip, skip_params = _not_tried(tried)
    rows = session.execute(
        _scoped(
            "SELECT t.job_id, t.task_no FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
            f" LEFT JOIN {_LEASES} ON l.service = j.service"
            f" WHERE {_CLAIMABLE} AND {_OPEN_JOB}{{scope}}{skip}"
            + (" AND l.leased IS NULL" if unserved_only else "")
            + " ORDER BY COALESCE(l.leased, 0), t.state = 'running' DESC, t.lease_until, t.job_id, t.task_no"
            " LIMIT :k",
            services,
        ),
        {"k": FAIR_CANDIDATES, "svc": list(services or ())} | skip_params,
    ).all()
    return [(r.job_id, int(r.task_no)) for r in rows]


def _closed_job_candidates(session: Session, tried: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Claimable tasks of jobs no longer open, in ix_task_claim order (a plain read, no locks): a dead
    worker's task of a cancelled job, which the claim closes (the fair order reads open jobs only)."""
    skip, skip_params = _not_tried(tried)
    rows = session.execute(
        text(
            "SELECT t.job_id, t.task_no FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
            f" WHERE {_CLAIMABLE} AND NOT {_OPEN_JOB}{skip}"
            " ORDER BY t.state, t.lease_until, t.job_id, t.task_no LIMIT :k"
        ),
        {"k": FAIR_CANDIDATES} | skip_params,
    ).all()
    return [(r.job_id, int(r.task_no)) for r in rows]


def _lock_claimable(session: Session, job_id: str, task_no: int) -> Any:
    """Lock one candidate if it is still claimable and no other claimer holds it (SKIP LOCKED)."""
    return session.execute(
        text(
            f"SELECT {_TASK_COLUMNS} FROM fanout_task t WHERE t.job_id = :j AND t.task_no = :n AND {_CLAIMABLE}"
            " FOR UPDATE SKIP LOCKED"
        ),
        {"j": job_id, "n": task_no},
    ).one_or_none()


def next_claimable(session: Session, services: Sequence[str] | None, unserved_only: bool) -> Any:
    """Lock the next task the fair claim takes (its row, with the task columns), or None. Candidates
    are ranked by a plain read and only the one taken is locked, by its key: a locking scan (the
    fallback of before) locked each row it passed for a moment, and a concurrent claim meeting one
    skipped it and could come back empty with tasks queued. An unscoped claim then closes the open
    tasks of jobs no longer open (``_closed_job_candidates``)."""
    row = _first_free(
        session, lambda tried: _fair_candidates(session, services, unserved_only=unserved_only, tried=tried)
    )
    if row is not None or services is not None or unserved_only:
        return row
    return _first_free(session, lambda tried: _closed_job_candidates(session, tried))


def _first_free(session: Session, rank: Callable[[Sequence[tuple[str, int]]], list[tuple[str, int]]]) -> Any:
    """The first candidate of ``rank`` (given those tried) no other claim holds, locked; when a whole
    read was taken meanwhile, the next one. None: every candidate is another claim's."""
    tried: list[tuple[str, int]] = []
    while True:
        keys = rank(tried)
        for job_id, task_no in keys:
            row = _lock_claimable(session, job_id, task_no)
            if row is not None:
                return row
        if len(keys) < FAIR_CANDIDATES:
            return None
        tried += keys


def tenant_waiting(
    sessions: sessionmaker[Session], service: str, services: Sequence[str] | None = None, *, waited_s: float = 0.0
) -> bool:
    """Should a lane running a task of ``service`` give it back at this checkpoint? True when another
    tenant (within ``services``, the worker's scope) has had a task claimable for ``waited_s`` and
    has fewer live leases than ``service`` has (this task's included): the fair claim would give
    the lane to that tenant. One read, no locks: claimable tasks and live leases (ix_task_claim)
    and their jobs' tenants."""
    with sessions() as session:
        row = session.execute(
            _scoped(
                "SELECT 1 FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
                f" LEFT JOIN {_LEASES} ON l.service = j.service"
                f" WHERE {_CLAIMABLE} AND {_OPEN_JOB} AND j.service <> :me{{scope}}"
                " AND t.lease_until <= UTC_TIMESTAMP(6) - INTERVAL :waited MICROSECOND"
                " AND COALESCE(l.leased, 0) < (SELECT COUNT(*) FROM fanout_task mt"
                " JOIN fanout_job mj ON mj.job_id = mt.job_id WHERE mj.service = :me AND mj.state = 'running'"
                " AND mt.state = 'running' AND mt.lease_until > UTC_TIMESTAMP(6))"
                " LIMIT 1",
                services,
            ),
            {"me": service, "svc": list(services or ()), "waited": int(waited_s * 1_000_000)},
        ).first()
    return row is not None


def live_leases(sessions: sessionmaker[Session], service: str) -> int:
    """How many tasks of ``service`` are under a live lease now, over every worker (its running
    jobs by ix_job_open, their running tasks)."""
    with sessions() as session:
        return int(
            session.execute(
                text(
                    "SELECT COUNT(*) FROM fanout_task t JOIN fanout_job j ON j.job_id = t.job_id"
                    " WHERE j.service = :s AND j.state = 'running' AND t.state = 'running'"
                    " AND t.lease_until > UTC_TIMESTAMP(6)"
                ),
                {"s": service},
            ).scalar_one()
        )
