"""Withdrawing the rows of a subscription write that failed (issue 31, docs/RELIABILITY.md "Found by
the chaos run").

A write that adds rows under fresh numbers (topic subscribe single and bulk, cycle subscribe, a new
device's copy of its user's subscriptions) writes its slot and index rows in logged batches with one
explicit timestamp (``NewRows.written_at``, ``USING TIMESTAMP``). A logged batch that timed out is
still applied later (the batchlog replays it, with that timestamp), while the request is answered as
failed; its retry reads no row yet and writes the subscription again under fresh numbers, and the
late batch would leave a second slot row that no index row names (every publish twice, the topic
after an unsubscribe). So when a batch fails the writer deletes what it wrote ``USING TIMESTAMP
written_at + 1``: that shadows the late batch whenever it lands, and never a newer write (a retry,
a resubscribe), so the deletion can be applied at any time later, by anyone.

When the deletion fails too (the same outage), three times, the rows are kept in MySQL
(``subscription_withdrawal``) before the request answers, and applied later (``settle_users``) by
whoever next removes the user's rows (unsubscribe, device removal or rotation, user deletion), by
the next topic subscribe of the user (``settle_locked``: a client's retry) and by the scheduled
``notee reconcile`` (``settle_pending``). The window of a process that dies while a
batch is unanswered is closed the same way: a batch still unanswered after ``INTENT_AFTER_S`` is
recorded before the writer waits on (a healthy batch answers in milliseconds, so the happy path pays
nothing); a death within that first quarter second is the remaining bound.

Applying a kept withdrawal leaves alone what is in effect: an index row naming the same slot row as
the write (the batch landed and nothing replaced it: a request that died after writing, whose retry
found the rows and answered ``already_subscribed``) and a user-level row that is visible (the write's
or a newer one). Everything else is deleted at ``written_at + 1``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy.orm import Session

from notee.core.clock import now_utc
from notee.domain.subscription_rows import NewRows, buckets_of
from notee.store import withdrawals_sql
from notee.store.cql.rows import IndexRow, slot_ref
from notee.store.cql.statements import Statements
from notee.store.withdrawals_sql import KeptRow, Pending

log = logging.getLogger(__name__)

# The outage that failed the write often fails the first withdrawal too (a node not yet convicted
# times the request out); by the next try the driver routes around it. The users' locks are still
# held meanwhile, so no newer write of these rows can come between two tries.
WITHDRAW_WAITS_S = (1.0, 3.0)
# A batch unanswered this long is recorded before the writer waits on: a process killed later than
# this leaves its rows to settle. Healthy batches answer in milliseconds.
INTENT_AFTER_S = 0.25
# An ``unanswered`` record older than this has no writer waiting any more (a writer waits at most the
# driver's 10 s per statement on its batches and its three withdrawals, plus 4 s between these): from
# then on anyone may apply it, not only a remover holding the user exclusively.
UNANSWERED_FOR = timedelta(minutes=5)


def write_or_withdraw(st: Statements, service: str, new: NewRows) -> None:
    """Write ``new`` and wait; if any batch failed, withdraw every row ``new`` writes before raising
    (module doc), keeping the withdrawal in MySQL when it cannot be written now."""
    kept = False
    try:
        futures = [f for start in new.starts for f in start()]
        if not _answered_within(futures, INTENT_AFTER_S):
            kept = _keep(st, service, new, withdrawals_sql.UNANSWERED)
        st.run(futures)
    except Exception:
        if _withdraw_retried(st, service, new):
            _forget(st, service, new, kept)
        elif kept:
            _mark_failed(st, service, new)
        else:
            _keep(st, service, new, withdrawals_sql.FAILED)
        raise
    _forget(st, service, new, kept)


def _answered_within(futures: Sequence[object], seconds: float) -> bool:
    """Have all ``futures`` (ResponseFutures) answered within ``seconds``?"""
    left = [len(futures)]
    done = threading.Event()
    lock = threading.Lock()

    def one(_: object) -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    if not futures:
        return True
    for f in futures:
        f.add_callbacks(one, one)  # type: ignore[attr-defined]
    return done.wait(seconds)


def _users(new: NewRows) -> list[str]:
    return sorted({u for u, _ in new.rows})


def _keep(st: Statements, service: str, new: NewRows, state: str) -> bool:
    """Record ``new``'s rows for a later withdrawal; False (logged) when MySQL refused too."""
    by_user: dict[str, list[KeptRow]] = {}
    for user_id, row in new.rows:
        by_user.setdefault(user_id, []).append((row.method, row.type_, row.target, row.device_token, row.data))
    try:
        if st.journal_sessions is None:
            raise RuntimeError("no MySQL to keep withdrawals in")
        withdrawals_sql.record(st.journal_sessions, withdrawals_sql.Write(service, new.written_at, by_user), state)
        return True
    except Exception:
        log.exception(
            "service=%s: %d row(s) written at %d may be left behind: their withdrawal could not be kept",
            service,
            len(new.rows),
            new.written_at,
        )
        return False


def _mark_failed(st: Statements, service: str, new: NewRows) -> None:
    try:
        assert st.journal_sessions is not None  # kept: there was one
        withdrawals_sql.mark_failed(st.journal_sessions, service, new.written_at, _users(new))
    except Exception:  # still kept as unanswered: applied once older than UNANSWERED_FOR
        log.warning("service=%s: a kept withdrawal (written at %d) stays unanswered", service, new.written_at)


def _forget(st: Statements, service: str, new: NewRows, kept: bool) -> None:
    if not kept or st.journal_sessions is None:
        return
    try:
        withdrawals_sql.forget(st.journal_sessions, service, new.written_at, _users(new))
    except Exception:  # settled later: the rows in effect are left alone then (module doc)
        log.warning("service=%s: a kept withdrawal (written at %d) stays to settle", service, new.written_at)


def _withdraw_retried(st: Statements, service: str, new: NewRows) -> bool:
    """Withdraw ``new``'s rows, tried again after each of ``WITHDRAW_WAITS_S``; True when it was written."""
    for wait in (*WITHDRAW_WAITS_S, None):
        try:
            withdraw(st, service, new.rows, new.written_at + 1)
            return True
        except Exception:
            if wait is None:
                log.exception("service=%s: %d row(s) of a failed write could not be withdrawn", service, len(new.rows))
                return False
            log.warning(
                "service=%s: withdrawing %d row(s) of a failed write failed; again in %s s",
                service,
                len(new.rows),
                wait,
            )
            time.sleep(wait)
    return False


def withdraw(st: Statements, service: str, rows: Sequence[tuple[str, IndexRow]], at: int) -> None:
    """Delete ``rows`` (user id, index row) and the slot rows they name, ``USING TIMESTAMP at``:
    device rows first, user-level rows last (a failure halfway leaves the subscription listed)."""
    st.run(st.withdraw_rows(u, service, r, buckets_of(r), at) for u, r in rows if not r.is_user_level)
    st.run(st.withdraw_rows(u, service, r, (), at) for u, r in rows if r.is_user_level)


# ---------------------------------------------------------------------- applying kept withdrawals
def settle_users(session: Session, st: Statements, service: str, user_ids: Sequence[str], *, exclusive: bool) -> int:
    """Apply the kept withdrawals of these users; their records go when the caller commits. Returns
    the records applied. A remover calls it, under the users' row locks, before it reads the rows it
    removes. ``exclusive``: the caller holds the rows exclusively, so no writer of theirs still waits
    on its batch and every record may be applied; under a shared lock (a cycle subscribe or a
    device's copy may be writing), ``unanswered`` ones only once older than ``UNANSWERED_FOR``."""
    before = None if exclusive else now_utc() - UNANSWERED_FOR
    pending = withdrawals_sql.pending_of_users(session, service, user_ids, before)
    for p in pending:
        apply(st, p)
    withdrawals_sql.delete(session, [p.withdrawal_id for p in pending])
    return len(pending)


def settle_locked(st: Statements, service: str, user_ids: Sequence[str]) -> int:
    """``settle_users`` for a topic subscribe holding these users' rows exclusively, before it reads
    them: their kept withdrawals (``unanswered`` ones too: no writer of theirs still waits) are applied
    and their records deleted, each MySQL step committed on its own (the subscribe's transaction ends
    in a rollback on the API's hot path). Returns the records deleted. Without it a retry of a write
    whose process died with its batch unanswered writes fresh rows beside the batchlog's late replay,
    and the device gets every publish twice until ``notee reconcile`` settles the record (issue 31,
    docs/RELIABILITY.md)."""
    if st.journal_sessions is None:
        raise RuntimeError("no MySQL to settle kept withdrawals in")
    pending = withdrawals_sql.pending_kept(st.journal_sessions, service, user_ids)
    rows = sum(apply(st, p) for p in pending)
    settled = withdrawals_sql.forget_ids(st.journal_sessions, [p.withdrawal_id for p in pending])
    log.info(
        "service=%s: %d kept withdrawal(s) applied before a subscribe (%d row(s) withdrawn)", service, settled, rows
    )
    return settled


def apply(st: Statements, pending: Pending) -> int:
    """Withdraw ``pending``'s rows that are not in effect (module doc); returns the rows deleted."""
    current = {(r.method, r.type_, r.target, r.device_token): r for r in st.user_rows(pending.user_id, pending.service)}
    gone: list[tuple[str, IndexRow]] = []
    for method, type_, target, token, data in pending.rows:
        row = IndexRow(method, type_, target, token, data)
        now = current.get((method, type_, target, token))
        if now is not None and (row.is_user_level or slot_ref(now) == slot_ref(row)):
            continue
        gone.append((pending.user_id, row))
    withdraw(st, pending.service, gone, pending.written_at + 1)
    return len(gone)
