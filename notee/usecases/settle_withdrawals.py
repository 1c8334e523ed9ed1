"""`notee reconcile`'s step 0 (full run and scheduled batch): apply every kept withdrawal of a failed
subscription write that no remover has applied yet (notee/domain/withdrawals.py; issue 31,
docs/RELIABILITY.md "Found by the chaos run").

Applied without the users' locks: a ``failed`` record's writer is done, and an ``unanswered`` one is
taken only once older than ``withdrawals.UNANSWERED_FOR`` (no writer waits that long). Each record is
deleted once its withdrawal is written; one that fails (Cassandra down) stays for the next run.
"""

from __future__ import annotations

from notee.core.clock import now_utc
from notee.domain.withdrawals import UNANSWERED_FOR, apply
from notee.store import withdrawals_sql
from notee.store.runtime import Runtime

PAGE = 200  # records read, applied and deleted at a time


def settle_pending(runtime: Runtime, service: str | None = None) -> dict[str, int]:
    """Apply the kept withdrawals (one service's, or every service's); returns how many records were
    settled and how many rows their withdrawals deleted (rows in effect are left: the domain's rule)."""
    st = runtime.statements
    before = now_utc() - UNANSWERED_FOR
    after, settled, withdrawn = 0, 0, 0
    while True:
        with runtime.sessions() as session:
            page = withdrawals_sql.pending_after(session, after, PAGE, before, service)
        if not page:
            break
        done: list[int] = []
        try:
            for pending in page:
                withdrawn += apply(st, pending)
                done.append(pending.withdrawal_id)
        finally:
            with runtime.sessions.begin() as session:
                settled += withdrawals_sql.delete(session, done)
        after = page[-1].withdrawal_id
    return {"withdrawals_settled": settled, "withdrawal_rows_deleted": withdrawn}
