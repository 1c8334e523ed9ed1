"""A fan-out page held during a provider outage (schema/mysql/0044_provider_outage.sql,
docs/FANOUT.md "Outages"): the devices of the page at its task's checkpoint that are done (delivered,
pruned, dead-lettered for their own reason, no credentials) and when the page was first tried. Kept
by ``task_leases.hold`` in the transaction that gives the task back, read by the next claim of the
task (which skips those devices), deleted by the checkpoint that moves the task past the page.
Functions take the caller's Session and never commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.orm import Session

from notee.core.vocabulary import PageCounts


@dataclass(frozen=True, slots=True)
class HeldPage:
    """What a page handed back during a provider outage did: the counts of its devices that are done
    (``counts.targeted`` of them), their tokens (``done``), how long the page had waited before it was
    handed back (``waited_s``: its pushes' TTL counts from the first try) and why (``error``)."""

    counts: PageCounts
    done: frozenset[str] = field(default_factory=frozenset)
    waited_s: float = 0.0
    error: str = ""


@dataclass(frozen=True, slots=True)
class PageHold:
    """The hold of the page at a task's checkpoint: its done devices, and how long ago (database
    clock) the page was first tried."""

    done: frozenset[str]
    held_for_s: float


def read(session: Session, job_id: str, task_no: int) -> PageHold | None:
    """The hold of the task's page at its checkpoint; None: the page was never held."""
    held_for = session.execute(
        text(
            "SELECT TIMESTAMPDIFF(MICROSECOND, held_since, UTC_TIMESTAMP(6)) FROM fanout_page_hold"
            " WHERE job_id = :j AND task_no = :n"
        ),
        {"j": job_id, "n": task_no},
    ).scalar_one_or_none()
    if held_for is None:
        return None
    done = session.execute(
        text("SELECT device_token FROM fanout_page_done WHERE job_id = :j AND task_no = :n"),
        {"j": job_id, "n": task_no},
    ).scalars()
    return PageHold(frozenset(str(t) for t in done), int(held_for) / 1_000_000)


def keep(session: Session, job_id: str, task_no: int, held: HeldPage) -> None:
    """Keep what a held page did: its first try's time (an earlier hold of the same page keeps its
    own) and its done devices (added to those of earlier holds)."""
    session.execute(
        text(
            "INSERT INTO fanout_page_hold (job_id, task_no, held_since)"
            " VALUES (:j, :n, UTC_TIMESTAMP(6) - INTERVAL :us MICROSECOND)"
            " ON DUPLICATE KEY UPDATE held_since = LEAST(held_since, VALUES(held_since))"
        ),
        {"j": job_id, "n": task_no, "us": int(held.waited_s * 1_000_000)},
    )
    if held.done:
        session.execute(
            text(
                "INSERT INTO fanout_page_done (job_id, task_no, device_token) VALUES (:j, :n, :t)"
                " ON DUPLICATE KEY UPDATE device_token = device_token"
            ),
            [{"j": job_id, "n": task_no, "t": token} for token in sorted(held.done)],
        )


def forget(session: Session, job_id: str, task_no: int) -> None:
    """The task's checkpoint moved past its held page: its hold goes."""
    params = {"j": job_id, "n": task_no}
    session.execute(text("DELETE FROM fanout_page_done WHERE job_id = :j AND task_no = :n"), params)
    session.execute(text("DELETE FROM fanout_page_hold WHERE job_id = :j AND task_no = :n"), params)
