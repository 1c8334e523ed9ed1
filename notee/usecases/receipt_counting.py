"""Keeping the jobs of a receipts batch whose counting may have failed (issue 36 Reliability,
docs/ENGAGEMENT.md "Storage, and counting once").

A batch writes its rows, then adds the new ones to the counters. A counter write that fails (or
times out: it may have been applied or not) after the rows landed answers 503; the retry finds the
rows and counts nothing, so the counters would miss those events for good. So before that 503 the
batch's jobs are kept in MySQL (``receipt_recount``), and the scheduler sets each kept job's counters
to its raw rows (notee/usecases/receipt_repair.py). A process that dies between its rows and its
counters is covered the same way as in notee/domain/withdrawals.py: a batch still unanswered after
``INTENT_AFTER_S`` keeps its jobs first (forgotten again when it does count: the happy path pays
nothing); a death within that first quarter second is the remaining bound.

A batch that read another request's claim on a row it wrote (two copies of a batch at once,
notee/store/cql/engagement.py) keeps its sources too, whatever happens next: neither copy may have
counted that row, and the recount settles it.

A batch never sends its counter writes later than ``COUNT_DEADLINE_S`` after it started (it keeps its
jobs and answers 503 instead): the repair relies on a job whose newest row is older than its quiet
window having no counter write still on its way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from types import TracebackType

from sqlalchemy.orm import Session, sessionmaker

from notee.store import receipt_recount_sql

log = logging.getLogger(__name__)

# A batch unanswered this long keeps its jobs before it goes on (healthy batches answer in ms).
INTENT_AFTER_S = 0.25
# The latest a batch sends its counter writes after it started (then: kept, 503). The repair's quiet
# window (receipt_repair.QUIET) is longer than this plus Cassandra's write timeouts.
COUNT_DEADLINE_S = 30.0


class CountedLate(TimeoutError):
    """A batch's rows took longer than ``COUNT_DEADLINE_S``: its counters are left to the repair (an
    outage: the request answers 503)."""


class IntentWatch:
    """The one thread per process that keeps the jobs of batches still unanswered after
    ``after_s`` (a timer thread per batch cost its start on every request). Held by the process
    (``receipts.Caches``); the thread starts with the first batch."""

    def __init__(self, after_s: float = INTENT_AFTER_S) -> None:
        self.after_s = after_s
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, KeepUnlessCounted]] = {}  # in deadline order (one after_s)
        self._thread: threading.Thread | None = None

    def arm(self, guard: KeepUnlessCounted) -> None:
        with self._cond:
            self._armed[id(guard)] = (time.monotonic() + self.after_s, guard)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="receipt-intents", daemon=True)
                self._thread.start()
            self._cond.notify()

    def disarm(self, guard: KeepUnlessCounted) -> bool:
        """True when ``guard`` was still waiting (no intent taken); False: it was taken, and its
        ``taken`` event is set once the intent is written (or failed)."""
        with self._cond:
            return self._armed.pop(id(guard), None) is not None

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._armed:
                    self._cond.wait()
                    continue
                deadline, guard = next(iter(self._armed.values()))
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                del self._armed[id(guard)]
            try:
                guard.keep()
            finally:
                guard.taken.set()


class KeepUnlessCounted:
    """``with KeepUnlessCounted(...) as guard:`` around a batch's writes: keeps ``sources`` for a
    recount if the block raises, or (as an intent, from ``watch``'s thread) if it runs longer than
    ``INTENT_AFTER_S``; the intent is forgotten when the block ends normally. Jobs and single sends
    alike (each has counters of its own)."""

    def __init__(
        self, watch: IntentWatch, sessions: sessionmaker[Session], service: str, sources: Iterable[str]
    ) -> None:
        self.watch, self.sessions, self.service = watch, sessions, service
        self.sources = sorted(set(sources))
        self.started = time.monotonic()
        self.taken = threading.Event()
        self._kept: list[int] | None = None
        self._anyway = False

    def __enter__(self) -> KeepUnlessCounted:
        if self.sources:
            self.watch.arm(self)
        return self

    def keep_anyway(self) -> None:
        """Keep the sources for the recount even when the block ends normally (another request wrote
        some of the batch's rows at the same moment: neither may have counted them)."""
        self._anyway = True

    def check_deadline(self) -> None:
        """Raise ``CountedLate`` when it is too late to send counter writes."""
        if time.monotonic() - self.started > COUNT_DEADLINE_S:
            raise CountedLate(f"receipts: rows took over {COUNT_DEADLINE_S:.0f} s; counting left to the repair")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if not self.sources:
            return
        if not self.watch.disarm(self):
            self.taken.wait()  # the intent is being written: known before this answers
        if kind is None and not self._anyway:
            if self._kept:
                self._forget()
        elif self._kept is None:
            self.keep()

    def keep(self) -> None:
        """Record the sources (logged, not raised, when MySQL refuses)."""
        try:
            self._kept = receipt_recount_sql.record(self.sessions, self.service, self.sources)
        except Exception:
            log.exception(
                "service=%s: %d job(s) may miss counted receipts: their recount could not be kept",
                self.service,
                len(self.sources),
            )

    def _forget(self) -> None:
        assert self._kept is not None
        try:
            receipt_recount_sql.forget(self.sessions, self._kept)
        except Exception:  # recounted later for nothing: the counts are right already
            log.warning("service=%s: a kept recount of %d job(s) stays", self.service, len(self._kept))
