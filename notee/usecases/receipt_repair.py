"""The automatic recount of jobs whose receipt counters may have missed events (issue 36
Reliability, docs/ENGAGEMENT.md "Storage, and counting once"): every job kept in ``receipt_recount``
by a batch whose counting failed, timed out or was still unanswered (``receipt_counting``) gets its
counters set to its raw rows, the truth, by the scheduler (one run a minute, one process at a time).

Exact, never counting twice, although apps may still be posting for the job: the repair reads the
job's counters first, then its rows with the newest ``received``; it adds the difference only when
that newest row is older than ``QUIET``. A batch sends its counter writes at most
``receipt_counting.COUNT_DEADLINE_S`` after it stamped its rows' ``received`` (plus Cassandra's
write timeout for them to land), so then every batch whose rows were read has its counter writes
settled (applied or lost) before the counters were read, and a batch whose rows were not read yet
has sent none of its counter writes before that read either (rows first, then counters): the
difference is exactly what was lost. A job still taking receipts waits for a quiet ``QUIET`` (its
records stay; the next runs try again).

Counters and rows are read at ``ALL``, so a recount waits while a replica is down: a counter write
whose leader replica applied it and died before passing it on is invisible to a ``QUORUM`` read
until that node is back (the node-loss fault run saw exactly this: the type and day counters 200
short at ``QUORUM`` with the node down), and adding it again then would count it twice once the
node returns.

A job's share of its day's, type's and topic's figures is a counter cell of its own
(``engagement_day``), read with the job's counters and set to the same raw rows by its own
difference: a counter request Cassandra applied to the job's partition and not to its day's (or the
other way round) is repaired exactly. A single send is kept and recounted the same way: its own
cell sits beside the figure cell the day's single sends of its type share, in one partition, and
both always move in one counter request, so the send's own difference is the shared cell's too.
"Job" below means either.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta

from notee.core.clock import naive_utc, now_utc
from notee.store import receipt_recount_sql
from notee.store.cql.engagement import ScopeKeys
from notee.store.cql.engagement_counts import Held
from notee.store.outage import is_store_outage
from notee.store.runtime import Runtime
from notee.usecases import receipt_counting
from notee.usecases.receipts import SourceCache, find_sources

log = logging.getLogger(__name__)

# A job is recounted once its newest receipt row is this old: longer than a batch may take to send its
# counter writes (COUNT_DEADLINE_S) plus the driver's and Cassandra's timeouts for them to land.
QUIET = timedelta(seconds=receipt_counting.COUNT_DEADLINE_S * 4)
PAGE = 200  # records read at a time


def repair_kept(
    runtime: Runtime, now: datetime | None = None, service: str | None = None, wait_s: int = 0
) -> dict[str, int]:
    """Recount every job (of every service, or of ``service``) kept for a recount before
    ``now - QUIET`` (module doc), unless another process is doing it after ``wait_s``. Returns what
    happened: jobs recounted, jobs still taking receipts (kept for the next run), jobs gone (their
    records dropped), jobs that failed (kept), events added and removed, runs skipped (locked)."""
    report: Counter[str] = Counter(
        jobs_recounted=0,
        jobs_waiting=0,
        jobs_gone=0,
        jobs_failed=0,
        jobs_unreachable=0,
        events_added=0,
        events_removed=0,
        figure_events_added=0,
        figure_events_removed=0,
        runs_skipped=0,
    )
    with receipt_recount_sql.repair_lock(runtime.engine, wait_s) as mine:
        if not mine:
            report["runs_skipped"] += 1
            return dict(report)
        before = (now or now_utc()) - QUIET
        after = 0
        while True:
            with runtime.sessions() as session:
                page = receipt_recount_sql.due(session, after, PAGE, before, service)
            if not page:
                break
            after = page[-1].recount_id
            jobs: dict[tuple[str, str], list[int]] = {}
            for kept in page:
                jobs.setdefault((kept.service, kept.source), []).append(kept.recount_id)
            for (service, source), ids in jobs.items():
                outcome = _repair_one(runtime, service, source, report)
                if outcome:
                    with runtime.sessions.begin() as session:
                        receipt_recount_sql.delete(session, ids)
    return dict(report)


def _repair_one(runtime: Runtime, service: str, source: str, report: Counter[str]) -> bool:
    """Recount one job into ``report``; True when its records may go."""
    try:
        found = find_sources(runtime, SourceCache(ttl_s=0), service, {source}).get(source)
        if found is None:  # the job was pruned (or its service deleted): nothing left to count
            report["jobs_gone"] += 1
            return True
        added = recount_when_quiet(runtime, service, source, found.keys)
    except Exception as exc:
        if not is_store_outage(exc):
            log.exception("service=%s source=%s: the receipts' recount failed; kept for the next run", service, source)
            report["jobs_failed"] += 1
            return False
        # A replica down (the reads are at ALL) or a store briefly away: the next run tries again.
        log.warning("service=%s source=%s: receipts' recount waits for every replica: %s", service, source, exc)
        report["jobs_unreachable"] += 1
        return False
    if added is None:
        report["jobs_waiting"] += 1
        return False
    report["jobs_recounted"] += 1
    report["events_added"] += sum(n for n in added.own.values() if n > 0)
    report["events_removed"] += -sum(n for n in added.own.values() if n < 0)
    report["figure_events_added"] += sum(n for n in added.figure.values() if n > 0)
    report["figure_events_removed"] += -sum(n for n in added.figure.values() if n < 0)
    if added.own or added.figure:
        log.info(
            "service=%s source=%s: receipt counters recounted from the rows: own %s, figure cell %s",
            service,
            source,
            added.own,
            added.figure,
        )
    return True


def recount_when_quiet(runtime: Runtime, service: str, source: str, keys: ScopeKeys) -> Held | None:
    """Set the source's counters and its day cell (its day's, type's and topic's share) to its raw
    rows if its newest row is older than ``QUIET``, each counter by its own difference; the
    differences added per event (to its own counters, to its day cell), or None (not quiet: nothing
    changed).
    Counters first, then rows (module doc)."""
    quiet_before = naive_utc(now_utc() - QUIET)
    st = runtime.statements
    held = st.held(service, source, keys, everywhere=True)
    truth, newest = st.raw_tally(service, source)
    if newest is not None and newest >= quiet_before:
        return None
    return st.add_differences(service, source, keys, truth, held)
