"""A leased fan-out task's identity and its fence: ``Claim`` (what a claim hands its worker), the
fenced write every later statement about the task goes through (``fenced``: ``LeaseLost`` when the
lease token no longer matches), and the two fenced writes other transactions combine: adding a
page's counts (``add_counts``) and giving the task back (``release_in``). Functions take the caller's
Session and never commit; the transactions are notee/store/task_leases.py's and
notee/store/page_holds_sql.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from notee.core.vocabulary import PageCounts
from notee.store import push_minutes_sql
from notee.store.mysql import affected


class LeaseLost(RuntimeError):
    """The task's lease was taken over (it expired and another worker claimed it)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A leased task. ``lease_token`` must accompany every write about it."""

    job_id: str
    task_no: int
    slot_from: int
    slot_to: int
    current_slot: int
    paging_state: bytes | None
    attempts: int
    lease_token: str
    resume_key: tuple[int, str] | None = None  # (no, device_token) after which current_slot resumes
    taken_over: bool = False  # claimed from a worker whose lease expired (it died or stalled)
    service: str = ""  # the job's service (its pages' rows of push_minute name it)


def fenced(session: Session, claim_: Claim, sql: str, params: dict[str, Any], *, failed_too: bool = False) -> None:
    """``sql`` on the claimed task while this claim holds it (``failed_too``: or another lane failed
    its job meanwhile, keeping the token: the counts of the page this lane sent still go in)."""
    states = "state IN ('running', 'failed')" if failed_too else "state = 'running'"
    result = session.execute(
        text(sql + f" WHERE job_id = :j AND task_no = :n AND lease_token = :tok AND {states}"),
        {**params, "j": claim_.job_id, "n": claim_.task_no, "tok": claim_.lease_token},
    )
    if affected(result) != 1:
        raise LeaseLost(f"task {claim_.job_id}/{claim_.task_no} is no longer leased by this worker")


# The SET clause adding a page's counts to its task's counters (``count_params`` binds it).
ADD_COUNTS = (
    "targeted = targeted + :tg, sent = sent + :se, failed = failed + :fa, pruned = pruned + :pr,"
    " retried = retried + :re, no_credentials = no_credentials + :nc, quiet_dropped = quiet_dropped + :qd,"
    " ttl_expired = ttl_expired + :te"
)


def count_params(counts: PageCounts) -> dict[str, int]:
    """The parameters of ``ADD_COUNTS``."""
    return {
        "tg": counts.targeted,
        "se": counts.sent,
        "fa": counts.failed,
        "pr": counts.pruned,
        "re": counts.retried,
        "nc": counts.no_credentials,
        "qd": counts.quiet_dropped,
        "te": counts.ttl_expired,
    }


def add_counts(session: Session, claim_: Claim, counts: PageCounts, *, failed_too: bool = False) -> None:
    """Add what a page did to the claimed task (and its minute's row), fenced."""
    fenced(
        session,
        claim_,
        f"UPDATE fanout_task SET {ADD_COUNTS}, pages = pages + :pg",
        count_params(counts) | {"pg": 1 if counts.targeted or counts.quiet_dropped or counts.ttl_expired else 0},
        failed_too=failed_too,
    )
    push_minutes_sql.add_page(
        session, job_id=claim_.job_id, task_no=claim_.task_no, service=claim_.service, counts=counts
    )


def release_in(
    session: Session, claim_: Claim, *, delay_s: float = 0.0, error: str | None = None, counts_as_attempt: bool = False
) -> None:
    """Give the task back without advancing its checkpoint, claimable again after ``delay_s`` (see
    ``task_leases.release``), inside the caller's transaction."""
    fenced(
        session,
        claim_,
        "UPDATE fanout_task SET state = 'queued', lease_owner = NULL, lease_token = NULL, error = :e,"
        " attempts = GREATEST(attempts - :give_back, 0),"
        " lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND",
        {"e": error[:500] if error else None, "ms": int(delay_s * 1000), "give_back": 0 if counts_as_attempt else 1},
    )
