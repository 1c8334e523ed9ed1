# over 400 lines: one invariant per function, all read by check_all; the pure checker is one concern and is read best whole
"""The independent checker: the invariants of issue 31, proved from two records only.

- The workload's ledger (``ledger.jsonl``): one JSON object a line, written by the chaos run as it
  asks Notee for something and gets an acknowledgement (``kind`` says what: ``population``,
  ``publish``, ``cancel``, ``revoke``, ``cycle_sub``, ``fault``, ``dead_letter``, ``invalid_token``,
  ``job_final``, ``webhook``, ``process_left``, ``hostile``, ``req``).
- The emulator's delivery journal (``NOTEE_EMULATOR_JOURNAL``): one line per push the provider
  accepted: ``{"t", "api", "token", "data"}``; ``data["chaos"]`` is the mark of the publish, send or
  cycle template that carried it.

Notee's own counters are read only to be reconciled with these (``job_final``), never to decide
whether a push arrived. Everything here is pure: tests/unit/test_chaos_ledger.py.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Event = dict[str, Any]
# faults that can interrupt a page in flight (a re-sent page is their documented cost)
INTERRUPTIONS = frozenset(
    {"sigkill", "sigterm", "cassandra_node", "mariadb_restart", "goaway", "reset", "latency", "token_expiry"}
)


@dataclass(frozen=True)
class Violation:
    invariant: str
    t: float  # when it happened (epoch s): the report shows the log lines around it
    detail: str
    cause: str = ""


@dataclass
class Result:
    invariant: str
    checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    measured: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass(frozen=True)
class Bounds:
    """What the documentation allows: one page per lane per interruption (docs/RELIABILITY.md)."""

    page_size: int = 1000
    lanes: int = 6  # every worker's lanes together
    cycle_grace_s: float = 600.0  # NOTEE_SCHEDULER_GRACE_MINUTES
    early_tolerance_s: float = 0.0  # one host, one clock: nothing may arrive before its instant

    @property
    def in_flight(self) -> int:
        return self.page_size * self.lanes


@dataclass
class Ledger:
    """The ledger's events, indexed the ways the checks read them."""

    publishes: dict[str, Event] = field(default_factory=dict)  # mark -> publish
    populations: dict[str, list[str]] = field(default_factory=dict)
    cancels: dict[str, Event] = field(default_factory=dict)  # mark -> cancel
    revokes: list[Event] = field(default_factory=list)
    cycle_subs: list[Event] = field(default_factory=list)
    faults: list[Event] = field(default_factory=list)
    dead_letters: set[tuple[str, str]] = field(default_factory=set)  # (job_id or mark, token)
    invalid: set[str] = field(default_factory=set)
    jobs_final: dict[str, Event] = field(default_factory=dict)  # mark -> final job state
    webhooks: list[Event] = field(default_factory=list)
    processes_left: list[Event] = field(default_factory=list)
    hostile: list[Event] = field(default_factory=list)
    reconciles: list[Event] = field(default_factory=list)  # each run's report, in order
    summaries: list[Event] = field(default_factory=list)  # each tenant's delivery summary at the end
    quiet: list[Event] = field(default_factory=list)  # each tenant's quiet users and their window
    setups: list[Event] = field(default_factory=list)  # each tenant's set-up: stable subscribers, cycle users
    sub_states: list[Event] = field(default_factory=list)  # churn users' subscription, as answered, in order
    sub_counts: list[Event] = field(default_factory=list)  # subscriber counters, before and after reconcile
    letters: list[Event] = field(default_factory=list)  # the dead letters listed at the end (not the workload's)
    metrics: list[Event] = field(default_factory=list)  # each scrape of a process's Prometheus counters
    gaps: list[Event] = field(default_factory=list)  # each incarnation's end: its last scrape and its exit
    reqs: list[Event] = field(default_factory=list)  # every request attempt (status, API, latency)

    @classmethod
    def of(cls, events: Iterable[Event]) -> Ledger:
        led = cls()
        for e in events:
            kind = e.get("kind")
            if kind == "publish":
                led.publishes[e["mark"]] = e
            elif kind == "population":
                led.populations[e["name"]] = list(e["tokens"])
            elif kind == "cancel":
                led.cancels[e["mark"]] = e
            elif kind == "dead_letter":
                led.dead_letters.add((e["job"], e["token"]))
                if e.get("reason") != "single send answer":  # the workload's copy of a listed one
                    led.letters.append(e)
            elif kind == "invalid_token":
                led.invalid.add(e["token"])
            elif kind == "job_final":
                led.jobs_final[e["mark"]] = e
            elif str(kind) in _LISTS:
                _LISTS[str(kind)](led, e)
        return led

    def expected(self, pub: Event) -> list[str]:
        tokens = list(pub.get("expect") or [])
        for name in pub.get("populations") or []:
            tokens += self.populations.get(name, [])
        return tokens


_LISTS: dict[str, Callable[[Ledger, Event], None]] = {
    "revoke": lambda led, e: led.revokes.append(e),
    "cycle_sub": lambda led, e: led.cycle_subs.append(e),
    "fault": lambda led, e: led.faults.append(e),
    "webhook": lambda led, e: led.webhooks.append(e),
    "process_left": lambda led, e: led.processes_left.append(e),
    "hostile": lambda led, e: led.hostile.append(e),
    "reconcile": lambda led, e: led.reconciles.append(e),
    "summary": lambda led, e: led.summaries.append(e),
    "quiet": lambda led, e: led.quiet.append(e),
    "setup": lambda led, e: led.setups.append(e),
    "sub_state": lambda led, e: led.sub_states.append(e),
    "sub_counts": lambda led, e: led.sub_counts.append(e),
    "metrics": lambda led, e: led.metrics.append(e),
    "metrics_gap": lambda led, e: led.gaps.append(e),
    "req": lambda led, e: led.reqs.append(e),
}
# what a second `notee reconcile` in a row must find nothing of: an orphan row left by the run
ORPHANS = ("counts_fixed", "topic_counts_fixed", "dead_rows_removed", "due_buckets_removed")


def mark_of(delivery: Event) -> str | None:
    data = delivery.get("data")
    mark = data.get("chaos") if isinstance(data, dict) else None
    return mark if isinstance(mark, str) else None


def by_mark(deliveries: Iterable[Event]) -> dict[str, dict[str, list[float]]]:
    """mark -> token -> the times it was delivered (sorted)."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for d in deliveries:
        mark = mark_of(d)
        if mark is not None:
            out[mark][d["token"]].append(float(d["t"]))
    for tokens in out.values():
        for times in tokens.values():
            times.sort()
    return out


def faults_between(led: Ledger, start: float, end: float) -> list[Event]:
    """The faults active at some moment of [start, end]."""
    return [f for f in led.faults if f["t_start"] <= end and (f.get("t_end") or f["t_start"]) >= start]


def _fault_names(faults: list[Event]) -> str:
    return ", ".join(sorted({f"{f['name']}({f.get('target', '')})" for f in faults})) or "none"


def check_lost(led: Ledger, idx: dict[str, dict[str, list[float]]]) -> Result:
    """0 acknowledged pushes lost: every expected token of every acknowledged publish, send and
    scheduled send got it, or is accounted for (dead letter, invalid token, cancelled in time)."""
    res = Result("no acknowledged push lost")
    accounted: Counter[str] = Counter()
    for mark, pub in led.publishes.items():
        cancelled = led.cancels.get(mark, {}).get("state") == "cancelled"
        got = idx.get(mark, {})
        for token in led.expected(pub):
            res.checked += 1
            if got.get(token):
                continue
            if cancelled:
                accounted["cancelled"] += 1
            elif (pub.get("job_id") or "single", token) in led.dead_letters or (mark, token) in led.dead_letters:
                accounted["dead letter"] += 1
            elif token in led.invalid:
                accounted["invalid token"] += 1
            else:
                state = led.jobs_final.get(mark, {}).get("state", "?")
                res.violations.append(
                    Violation(
                        res.invariant, pub["t_ack"], f"{mark} (job {pub.get('job_id')}, {state}): {token} never got it"
                    )
                )
    res.measured["accounted"] = dict(accounted)
    return res


def check_duplicates(led: Ledger, idx: dict[str, dict[str, list[float]]], bounds: Bounds) -> Result:
    """Duplicates at most one page per lane per interruption, each reported with its cause."""
    res = Result("duplicates bounded, each with its cause")
    total = 0
    for mark, tokens in idx.items():
        extra = {t: len(times) - 1 for t, times in tokens.items() if len(times) > 1}
        res.checked += len(tokens)
        if not extra or mark.startswith("cycle:"):
            continue  # a cycle mark repeats by design: check_cycles counts per subscription
        first = min(times[0] for times in tokens.values())
        last = max(times[-1] for times in tokens.values())
        causes = [f for f in faults_between(led, first, last) if f["name"] in INTERRUPTIONS]
        n = sum(extra.values())
        total += n
        bound = bounds.in_flight * len(causes)
        detail = f"{mark}: {n} extra deliveries to {len(extra)} tokens (bound {bound})"
        res.measured.setdefault("groups", []).append(f"{detail}; cause: {_fault_names(causes)}")
        if n > bound:
            res.violations.append(Violation(res.invariant, first, detail, _fault_names(causes)))
    res.measured["extra_deliveries"] = total
    return res


def _in_scope(revoke: Event, pub: Event | None) -> bool:
    scope = revoke.get("scope", "*")
    return scope == "*" or (pub is not None and pub.get("scope") == scope)


def check_revocations(led: Ledger, deliveries: Iterable[Event], bounds: Bounds) -> Result:
    """No push to a token after its rotation, deletion or unsubscribe was acknowledged, beyond the
    pages already in flight then: a publish asked for after the acknowledgement never reaches it."""
    res = Result("nothing after an acknowledged rotation/deletion/unsubscribe")
    revokes: dict[str, list[Event]] = defaultdict(list)
    for r in led.revokes:
        revokes[r["token"]].append(r)
        res.checked += 1
    in_flight: Counter[str] = Counter()
    for d in deliveries:
        mark = mark_of(d)
        pub = led.publishes.get(mark) if mark else None
        for r in revokes.get(d["token"], []):
            if d["t"] <= r["t_ack"] or not _in_scope(r, pub):
                continue
            if pub is not None and pub["t_req"] >= r["t_ack"]:
                res.violations.append(
                    Violation(
                        res.invariant, d["t"], f"{d['token']} got {mark} (asked after its {r['why']} was acknowledged)"
                    )
                )
            else:
                in_flight[f"{r['why']}:{mark}"] += 1
    worst = max(in_flight.values(), default=0)
    res.measured.update(in_flight_deliveries=sum(in_flight.values()), worst_per_publish=worst, bound=bounds.in_flight)
    if worst > bounds.in_flight:
        res.violations.append(Violation(res.invariant, 0.0, f"{worst} in-flight deliveries after one revocation"))
    return res


def check_cancels(led: Ledger, idx: dict[str, dict[str, list[float]]], bounds: Bounds) -> Result:
    """Nothing sent after a cancel was acknowledged beyond the pages in flight."""
    res = Result("nothing after an acknowledged cancel beyond in-flight pages")
    for mark, cancel in led.cancels.items():
        res.checked += 1
        after = sum(1 for times in idx.get(mark, {}).values() for t in times if t > cancel["t_ack"])
        res.measured["most_after_a_cancel"] = max(after, res.measured.get("most_after_a_cancel", 0))
        if cancel.get("state") == "cancelled" and after > bounds.in_flight:
            res.violations.append(Violation(res.invariant, cancel["t_ack"], f"{mark}: {after} pushes after the cancel"))
    return res


def check_not_early(led: Ledger, idx: dict[str, dict[str, list[float]]], bounds: Bounds) -> Result:
    """No send_at or local-time publish delivered before its instant."""
    res = Result("no send_at / local-time push early")
    for mark, pub in led.publishes.items():
        not_before = pub.get("not_before")
        if not_before is None:
            continue
        res.checked += 1
        times = [t for ts in idx.get(mark, {}).values() for t in ts]
        if times and min(times) < not_before - bounds.early_tolerance_s:
            early = not_before - min(times)
            res.violations.append(Violation(res.invariant, min(times), f"{mark}: first push {early:.3f} s early"))
    return res


def job_of(delivery: Event) -> str | None:
    """The job a push came from: the part of Notee's notification id (``data.notee_id``) before its dot."""
    data = delivery.get("data")
    nid = data.get("notee_id") if isinstance(data, dict) else None
    return nid.split(".", 1)[0] if isinstance(nid, str) and nid else None


def check_cycles(led: Ledger, deliveries: Iterable[Event], bounds: Bounds) -> Result:
    """Every due cycle minute fired exactly once for each subscriber (one job), late ones within the
    grace. A second push of the same job is a page re-sent after an interruption (its checkpoint
    lost: at-least-once), allowed like any duplicate when an interrupting fault overlaps it; a push
    from a second job is the minute fired twice."""
    res = Result("each due cycle minute exactly once")
    owed = {(sub["mark"], sub["token"]) for sub in led.cycle_subs}
    got: dict[tuple[str, str], list[tuple[float, str | None]]] = defaultdict(list)
    for d in deliveries:
        key = (mark_of(d) or "", d["token"])
        if key in owed:
            got[key].append((float(d["t"]), job_of(d)))
    late, resent = 0, []
    for sub in led.cycle_subs:
        res.checked += 1
        pushes = sorted(got.get((sub["mark"], sub["token"]), []))
        minute = float(sub["minute"])
        label = f"{sub['mark']} {sub['token']} due {minute:.0f}"
        jobs = {job for _, job in pushes}
        if not pushes or len(jobs) > 1 or (None in jobs and len(pushes) > 1):
            res.violations.append(Violation(res.invariant, minute, f"{label}: {len(pushes)} pushes, {len(jobs)} jobs"))
            continue
        first, last = pushes[0][0], pushes[-1][0]
        if len(pushes) > 1:
            causes = [f for f in faults_between(led, first, last) if f["name"] in INTERRUPTIONS]
            if not causes:
                detail = f"{label}: {len(pushes)} pushes of one job, no interruption"
                res.violations.append(Violation(res.invariant, last, detail))
                continue
            resent.append(f"{label}: {len(pushes) - 1} re-sent ({_fault_names(causes)})")
        if first < minute - bounds.early_tolerance_s:
            res.violations.append(Violation(res.invariant, first, f"{label}: {minute - first:.1f} s early"))
        elif first > minute + 60 + bounds.cycle_grace_s:
            res.violations.append(Violation(res.invariant, first, f"{label}: {first - minute:.0f} s late"))
        late = max(late, int(first - minute))
    res.measured["latest_s"] = late
    if resent:
        res.measured["re-sent after an interruption"] = resent
    return res


def check_counters(led: Ledger, idx: dict[str, dict[str, list[float]]], bounds: Bounds) -> Result:
    """A finished job's ``sent`` is at most its deliveries (a re-sent page is delivered twice and
    counted once at most) and at least the tokens the emulator delivered it to, less the pages whose
    checkpoint an interruption lost (their pushes arrived, their count did not: one page per lane per
    interruption overlapping the job, as for duplicates)."""
    res = Result("job counters reconcile with the emulator")
    for mark, job in led.jobs_final.items():
        if job.get("state") != "done" or job.get("sent") is None:
            continue
        res.checked += 1
        tokens = idx.get(mark, {})
        distinct, total = len(tokens), sum(len(t) for t in tokens.values())
        pub = led.publishes.get(mark, {})
        last = max((times[-1] for times in tokens.values()), default=pub.get("t_ack", 0.0))
        causes = [f for f in faults_between(led, pub.get("t_req", last), last) if f["name"] in INTERRUPTIONS]
        if job["sent"] > total or job["sent"] < distinct - bounds.in_flight * len(causes):
            detail = (
                f"{mark} (job {job.get('job_id')}): sent {job['sent']}, emulator {distinct} tokens / {total} pushes"
            )
            res.violations.append(Violation(res.invariant, last, detail, _fault_names(causes)))
        elif job["sent"] < distinct:
            res.measured.setdefault("uncounted", []).append(
                f"{mark}: {distinct - job['sent']} ({_fault_names(causes)})"
            )
    return res


def check_summaries(led: Ledger, idx: dict[str, dict[str, list[float]]]) -> Result:
    """Each tenant's delivery summary (``GET /v1/delivery-summary``) counts at least the jobs its
    publishes were acknowledged with, and no more sent pushes than the emulator delivered for its jobs
    (topic publishes, scheduled sends and cycle minutes, and requests that got no answer: their job
    may exist)."""
    res = Result("delivery summaries reconcile with the emulator")
    for summary in led.summaries:
        service, totals = summary["service"], summary.get("totals") or {}
        res.checked += 1
        jobs = [m for m, p in led.publishes.items() if p.get("service") == service and p.get("job_id")]
        # the summary counts every job made, also one whose request got no answer (seed 32: a scheduled
        # send's job created, its answer lost to the API's kill): such a mark's pushes count as its job's
        unanswered = [
            m for m in idx if m.startswith((f"topic:{service}:", f"single:{service}:")) and m not in led.publishes
        ]
        marks = [*jobs, *unanswered, *(m for m in idx if m == f"cycle:{service}")]
        delivered = sum(len(times) for m in marks for times in idx.get(m, {}).values())
        if int(totals.get("jobs", 0)) < len(jobs):
            detail = f"{service}: summary counts {totals.get('jobs')} jobs, {len(jobs)} were acknowledged"
            res.violations.append(Violation(res.invariant, summary.get("t", 0.0), detail))
        if int(totals.get("sent", 0)) > delivered:
            detail = (
                f"{service}: summary says {totals.get('sent')} sent, the emulator delivered {delivered} for its jobs"
            )
            res.violations.append(Violation(res.invariant, summary.get("t", 0.0), detail))
        res.measured[service] = (
            f"jobs {totals.get('jobs')}/{len(jobs)} acknowledged, sent {totals.get('sent')}/{delivered} delivered"
        )
    return res


def check_quiet_hours(led: Ledger, deliveries: Iterable[Event]) -> Result:
    """No topic push reaches a user inside its quiet hours: held pushes arrive at the window's end
    or later (whether they arrive at all is ``check_lost``'s: the quiet users are a population)."""
    res = Result("no quiet-hours rule broken")
    window = {token: (float(q["start"]), float(q["end"])) for q in led.quiet for token in q["tokens"]}
    held = 0
    for d in deliveries:
        span = window.get(d["token"])
        if span is None:
            continue
        res.checked += 1
        start, end = span
        mark = mark_of(d) or "?"
        if start <= d["t"] < end:
            detail = f"{d['token']} got {mark} {end - d['t']:.1f} s before its quiet hours ended"
            res.violations.append(Violation(res.invariant, d["t"], detail))
        elif d["t"] >= end and led.publishes.get(mark, {}).get("t_ack", end) < end:
            held += 1
    res.measured.update(held_then_sent=held, users=len(window))
    return res


def _sub_bounds(led: Ledger, service: str) -> tuple[int, int]:
    """The topic subscribers the answers prove (stable and quiet users, churn users last answered as
    subscribed) and at most (plus those whose last request got no trustworthy answer)."""
    last: dict[str, str] = {}
    for e in led.sub_states:
        if e["service"] == service:
            last[e["user"]] = e["state"]
    base = sum(int(s.get("stable", 0)) for s in led.setups if s["service"] == service)
    sure = base + sum(1 for v in last.values() if v == "subscribed")
    return sure, sure + sum(1 for v in last.values() if v == "unknown")


def check_subscriber_counts(led: Ledger) -> Result:
    """After ``notee reconcile``, each tenant's topic and cycle subscriber counters lie within what the
    answers prove; before it, the drift (documented: a timed-out increment) is measured."""
    res = Result("subscriber counters reconcile with the ledger")
    cycles = {  # a ledger written before cycle_tried was recorded: what was made is what was tried
        s["service"]: (int(s["cycle_subs"]), int(s["cycle_tried"] if "cycle_tried" in s else s["cycle_subs"]))
        for s in led.setups
        if "cycle_subs" in s
    }
    for c in led.sub_counts:
        service, counts = c["service"], c.get("counts") or {}
        topic_lo, topic_hi = _sub_bounds(led, service)
        cyc_lo, cyc_hi = cycles.get(service, (0, 0))
        for key, lo, hi in (("TOPIC/news", topic_lo, topic_hi), ("CYCLE/daily", cyc_lo, max(cyc_lo, cyc_hi))):
            n = int(counts.get(key, 0))
            label = f"{service} {key} {c['when']}: {n} (ledger {lo}..{hi})"
            res.measured.setdefault(c["when"], []).append(label)
            if c["when"] != "after reconcile":
                continue
            res.checked += 1
            if not lo <= n <= hi:
                res.violations.append(Violation(res.invariant, c.get("t", 0.0), label))
    return res


def check_webhooks(led: Ledger) -> Result:
    """Each event id delivered at least once, never with different content; every finished job of a
    tenant with an endpoint has its event."""
    res = Result("webhook events at least once, same content")
    shas: dict[str, set[str]] = defaultdict(set)
    delivered_jobs = set()
    for w in led.webhooks:
        shas[w["event_id"]].add(w["sha"])
        if 200 <= int(w.get("status", 0)) < 300 and w.get("job_id"):
            delivered_jobs.add(w["job_id"])
    for event_id, seen in shas.items():
        res.checked += 1
        if len(seen) > 1:
            res.violations.append(Violation(res.invariant, 0.0, f"event {event_id} arrived with {len(seen)} bodies"))
    for mark, job in led.jobs_final.items():
        if job.get("webhook") and job.get("state") in ("done", "failed") and job.get("job_id"):
            res.checked += 1
            if job["job_id"] not in delivered_jobs:
                res.violations.append(
                    Violation(res.invariant, job.get("t", 0.0), f"{mark}: no event for job {job['job_id']}")
                )
    res.measured["events"] = len(shas)
    return res


def check_processes(led: Ledger) -> Result:
    res = Result("no process left running")
    for p in led.processes_left:
        res.checked += 1
        if p.get("alive"):
            res.violations.append(Violation(res.invariant, p.get("t", 0.0), f"{p['name']} (pid {p['pid']}) still runs"))
    return res


def check_reconcile(led: Ledger) -> Result:
    """After the run, ``notee reconcile`` repairs what the faults left; run again at once it finds
    nothing (no orphan rows remain)."""
    res = Result("no orphan rows after notee reconcile")
    if led.reconciles:
        res.measured["first run"] = {k: v for k, v in led.reconciles[0].get("report", {}).items() if v}
    for run in led.reconciles[1:]:
        res.checked += 1
        left = {k: run.get("report", {}).get(k, 0) for k in ORPHANS if run.get("report", {}).get(k, 0)}
        if left or run.get("error"):
            res.violations.append(
                Violation(res.invariant, run.get("t", 0.0), f"a second reconcile found {left or run['error']}")
            )
    return res


def check_all(events: Iterable[Event], deliveries: list[Event], bounds: Bounds) -> list[Result]:
    """The invariants of this module (``chaos.checker.check_all``: these and the newer ones)."""
    return check_ledger(Ledger.of(events), deliveries, bounds)


def check_ledger(led: Ledger, deliveries: list[Event], bounds: Bounds) -> list[Result]:
    idx = by_mark(deliveries)
    return [
        check_lost(led, idx),
        check_duplicates(led, idx, bounds),
        check_revocations(led, deliveries, bounds),
        check_cancels(led, idx, bounds),
        check_not_early(led, idx, bounds),
        check_cycles(led, deliveries, bounds),
        check_counters(led, idx, bounds),
        check_summaries(led, idx),
        check_quiet_hours(led, deliveries),
        check_subscriber_counts(led),
        check_webhooks(led),
        check_processes(led),
        check_reconcile(led),
    ]
