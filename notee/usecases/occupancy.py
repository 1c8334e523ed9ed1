"""Target occupancy (``target_slots``, schema/cql/0005): its backfill for older templates and its pruning.

A job walks only the occupied slots of its target when its template's occupancy is known
(``target_slots_known``; docs/FANOUT.md "Occupancy"). A template created since target_slots existed
is known from its creation; an older one is walked slot by slot until ``backfill`` has recorded the
(slot, block) of every slot row it has, read from the per-user index (every slot row has its index
row, written in the same logged batch), and then marked it known. Rows written while the backfill
runs record their own occupancy, so the backfill is complete once every API process writes
target_slots (run it after the upgrade has reached all of them; it is idempotent).

``prune`` deletes, in bounded batches from a cursor (``reconcile_cursor``, walk ``target_slots``),
the rows of deleted templates and the blocks whose slot partition holds no row numbered in them
any more. A block is deleted only when its row was last written more than ``PRUNE_AFTER_S`` ago, with
``USING TIMESTAMP <that writetime>``: a subscribe that writes the block again meanwhile has a newer
timestamp and keeps it, and a logged batch still being replayed (written before the check, landing
after it) would have to be a day old. A stale block only costs a job one empty read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from cassandra.cluster import ResponseFuture

from notee.core.vocabulary import CycleTarget, TopicTarget
from notee.domain.schedule import parse_canonical
from notee.store import subscription_sql as subsql
from notee.store import templates_sql
from notee.store.runtime import Runtime

log = logging.getLogger(__name__)

WALK = "target_slots"  # the prune's cursor in reconcile_cursor
PRUNE_BATCH_ROWS = 20_000  # target_slots rows one scheduled prune checks
PRUNE_AFTER_S = 86_400  # a block nobody wrote for this long may be deleted once found empty
CHECKS_IN_FLIGHT = 64  # block checks (LIMIT 1 reads) in flight at once
MIN_TOKEN = -(2**63)
# Template keys the marker check looks up per MySQL query: the markers are every template ever
# created, so one query per key grew with every tenant's history.
KEYS_PER_LOOKUP = 500


def backfill(runtime: Runtime, service: str | None = None, fetch_size: int = 1000) -> dict[str, int]:
    """Record the occupancy of every template not yet known (of one service, or all), from one scan
    of the per-user index, then mark them known. Returns counts: templates marked, rows noted."""
    st = runtime.statements
    with runtime.sessions() as s:
        keys = subsql.live_template_keys(s, service)
    todo = keys - st.occupancy_known_keys()
    noted = 0
    pending: list[ResponseFuture] = []
    if todo:
        for _user_id, _svc, row in st.scan_index(fetch_size):
            key = row.data.get("key")
            if row.is_user_level or key not in todo or "no" not in row.data:
                continue
            no = int(row.data["no"])
            targets: list[TopicTarget | CycleTarget] = [TopicTarget(row.target)]
            if row.method == "CYCLE":
                sch = parse_canonical(row.target)
                targets = [CycleTarget(sch.timezone, d, sch.hour, sch.minute) for d in sch.days]
            for target in targets:
                pending.append(st.note_occupancy(key, target, no))
                noted += 1
            if len(pending) >= CHECKS_IN_FLIGHT:
                st.run(pending)
                pending = []
        st.run(pending)
    for key in sorted(todo):  # only once every row it had is recorded
        st.mark_occupancy_known(key, "backfill")
    report = {"templates_marked": len(todo), "templates_already_known": len(keys) - len(todo), "rows_noted": noted}
    log.info("occupancy backfill%s: %s", f" of {service}" if service else "", report)
    return report


def prune(
    runtime: Runtime,
    *,
    max_rows: int | None = PRUNE_BATCH_ROWS,
    fetch_size: int = 1000,
    now_us: int | None = None,
    prune_after_s: float = PRUNE_AFTER_S,
) -> dict[str, int]:
    """Check at most ``max_rows`` target_slots rows from the cursor (None: the whole table from the
    start, cursor untouched); delete those of deleted templates and the empty blocks (module doc).
    Also drops the known-markers of deleted templates. Returns counts of what it really deleted."""
    st = runtime.statements
    now_us = now_us if now_us is not None else time.time_ns() // 1000
    old_before = now_us - int(prune_after_s * 1_000_000)
    methods: dict[str, str | None] = {}  # notification_key -> its template's method; None: deleted

    def method_of(key: str) -> str | None:
        if key not in methods:
            with runtime.sessions() as s:
                tpl = templates_sql.get_template_by_key(s, key)
            methods[key] = None if tpl is None else str(tpl.notification_method)
        return methods[key]

    after = None if max_rows is None else st.reconcile_cursor(WALK)
    checked = dead = empty = 0
    dead_targets: set[tuple[str, str]] = set()
    candidates: list[tuple[str, str, str, int, int, int]] = []  # (key, method, target, slot, block, writetime)
    last_token: int | None = None
    current: int | None = None
    for token, key, target, slot, block, written in st.scan_occupancy_from(
        MIN_TOKEN if after is None else after, fetch_size
    ):
        if token != current:
            if max_rows is not None and checked >= max_rows:
                break  # at a partition boundary after the budget: resume here next run
            current = last_token = token
        checked += 1
        method = method_of(key)
        if method is None:
            if (key, target) not in dead_targets:
                dead_targets.add((key, target))
                st.delete_occupancy_target(now_us, key, target)  # nothing can address a dead key any more
            dead += 1
        elif written < old_before:
            candidates.append((key, method, target, slot, block, written))
    else:
        last_token = None  # the walk reached the end: the next run starts from the first partition
    for i in range(0, len(candidates), CHECKS_IN_FLIGHT):
        empty += _delete_empty(runtime, candidates[i : i + CHECKS_IN_FLIGHT])
    if max_rows is not None:
        st.set_reconcile_cursor(WALK, last_token)
    markers = 0
    known = sorted(st.occupancy_known_keys())  # every template ever marked: looked up a batch per query
    for i in range(0, len(known), KEYS_PER_LOOKUP):
        batch = [k for k in known[i : i + KEYS_PER_LOOKUP] if k not in methods]
        with runtime.sessions() as s:
            found = templates_sql.methods_of_keys(s, batch)
        methods.update({k: found.get(k) for k in batch})
    for key in known:
        if methods[key] is None:
            st.forget_occupancy_known(key)
            markers += 1
    report = {
        "occupancy_rows_checked": checked,
        "occupancy_walk_done": int(last_token is None),
        "occupancy_dead_rows_removed": dead,
        "occupancy_empty_blocks_removed": empty,
        "occupancy_markers_removed": markers,
    }
    log.info("occupancy prune: %s", report)
    return report


def _delete_empty(runtime: Runtime, candidates: Sequence[tuple[str, str, str, int, int, int]]) -> int:
    """Delete the candidates whose block holds no row (one LIMIT 1 read each, all in flight)."""
    st = runtime.statements
    reads = [(c, st.block_has_rows_async(c[0], c[1], c[2], c[3], c[4])) for c in candidates]
    removed = 0
    for (key, _method, target, slot, block, written), future in reads:
        if future.result().one() is None:
            st.delete_occupancy(written, key, target, slot, block)
            removed += 1
    return removed
