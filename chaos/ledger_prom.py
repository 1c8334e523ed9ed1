"""Notee's own counters reconciled with the ledger and the emulator's journal: the jobs' ``targeted``,
``failed`` and ``pruned`` (``sent`` is ``chaos.ledger.check_counters``'), and the Prometheus push
counters summed over every process's lifetimes (``chaos.scrape`` wrote a ``metrics`` line per scrape
and a ``metrics_gap`` line per incarnation's end). Pure, like ``chaos.ledger``:
tests/unit/test_chaos_ledger.py."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from chaos.ledger import INTERRUPTIONS, Bounds, Event, Ledger, Result, Violation, faults_between, mark_of

SERIES = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>.*)\}$")
LABEL = re.compile(r'(\w+)="([^"]*)"')
FAILED = frozenset({"failed", "no_credentials"})  # the outcomes that write a dead letter


def prom_totals(led: Ledger) -> defaultdict[tuple[str, str, str], float]:
    """(metric, provider, outcome) -> the sum over every incarnation of its last scrape."""
    last: dict[int, Event] = {}
    for m in led.metrics:
        if m["pid"] not in last or m.get("t_scraped", m["t"]) >= last[m["pid"]].get("t_scraped", 0.0):
            last[m["pid"]] = m
    totals: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    for m in last.values():
        for key, value in m.get("counters", {}).items():
            found = SERIES.match(key)
            if found:
                labels = dict(LABEL.findall(found.group("labels")))
                series = (found.group("name"), labels.get("provider", ""), labels.get("outcome", ""))
                totals[series] += float(value)
    return totals


def _in_gaps(t: float, gaps: list[tuple[float, float]]) -> bool:
    return any(a < t <= b for a, b in gaps)


def check_prometheus(led: Ledger, deliveries: list[Event]) -> Result:
    """Per provider, the pushes Prometheus counted sent (every process, every lifetime) are at most
    what the emulator received, and fall short of it by no more than what it received inside the
    scrape gaps (an incarnation's last scrape to its exit: what it counted then died with it) plus
    the copies it received more than once (a push whose answer a reset cut is re-sent and counted
    once). The dead letters listed at the end are at most the pushes counted failed, plus those
    made inside the gaps (the letters of users deleted since are gone, so fewer is allowed)."""
    res = Result("Prometheus counters reconcile with the emulator")
    if not led.metrics:
        if led.processes_left:  # a run of its own processes: they must have answered their scrapes
            res.violations.append(Violation(res.invariant, 0.0, "no process answered a scrape of its /metrics"))
        else:  # older, or attached to a deployment: nothing to reconcile
            res.measured["not scraped"] = "no metrics lines"
        return res
    totals = prom_totals(led)
    gaps = [(float(g["t_scraped"]), float(g["t_exit"])) for g in led.gaps]
    emulator: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    copies: Counter[tuple[str, str | None, str]] = Counter()
    for d in deliveries:
        emulator[d["api"]] += 1
        lost[d["api"]] += _in_gaps(float(d["t"]), gaps)
        copies[(d["api"], mark_of(d), d["token"])] += 1
    resent = Counter({api: 0 for api in emulator})
    for (api, mark, _), n in copies.items():
        if mark is None or not mark.startswith("cycle:"):  # a cycle mark repeats by design (one per minute)
            resent[api] += n - 1
    providers = {k[1] for k in totals if k[0] == "notee_pushes_total"} | set(emulator)
    sent = {p: totals[("notee_pushes_total", p, "sent")] for p in providers}
    for p in sorted(sent):
        res.checked += emulator[p]
        res.measured[f"{p} sent"] = (
            f"Prometheus {sent[p]:.0f}, emulator {emulator[p]}; allowed short by {lost[p]} in scrape gaps + {resent[p]} re-sent"
        )
        if sent[p] > emulator[p] or emulator[p] - sent[p] > lost[p] + resent[p]:
            detail = f"{p}: Prometheus counted {sent[p]:.0f} sent, the emulator received {emulator[p]}"
            res.violations.append(Violation(res.invariant, 0.0, detail))
    failed = {
        p: sum(
            v for (name, prov, out), v in totals.items() if name == "notee_pushes_total" and prov == p and out in FAILED
        )
        for p in sent
    }
    for p in sorted(failed):
        letters = [e for e in led.letters if e.get("provider", p) == p]
        in_gaps = sum(1 for e in letters if _in_gaps(float(e.get("created", 0.0)), gaps))
        res.measured[f"{p} failed"] = (
            f"Prometheus {failed[p]:.0f}, dead letters listed {len(letters)} ({in_gaps} in scrape gaps)"
        )
        if len(letters) > failed[p] + in_gaps:
            detail = f"{p}: {len(letters)} dead letters listed, Prometheus counted {failed[p]:.0f} failed"
            res.violations.append(Violation(res.invariant, 0.0, detail))
    res.measured["invalid_token"] = (
        f"{sum(v for k, v in totals.items() if k[2] == 'invalid_token'):.0f} for {len(led.invalid)} tokens FCM calls unregistered"
    )
    res.measured["scrape gaps"] = f"{len(gaps)}, longest {max((b - a for a, b in gaps), default=0.0):.2f} s"
    ended = {g["pid"] for g in led.gaps}
    unseen = sorted({f"{m['proc']}:{m['pid']}" for m in led.metrics if m["pid"] not in ended})
    if unseen:
        res.measured["ended unobserved"] = unseen  # crashed on its own: its last gap is unknown
    return res


def check_job_counts(led: Ledger, idx: dict[str, dict[str, list[float]]], bounds: Bounds) -> Result:
    """A finished job's ``targeted``, ``failed`` and ``pruned`` against the ledger: sent + failed +
    pruned never exceed targeted; targeted reaches the tokens the emulator delivered the job to;
    pruned only tokens FCM calls unregistered among the job's expected ones (or its churn users'); the
    dead letters listed for the job at most its ``failed`` (each short by at most one page per lane
    per interruption overlapping the job, whose checkpoint, counts included, was lost)."""
    res = Result("job targeted/failed/pruned reconcile with the ledger")
    letters = Counter(e.get("job") for e in led.letters)
    beyond = 0
    for mark, job in led.jobs_final.items():
        if job.get("state") != "done" or job.get("targeted") is None:
            continue
        res.checked += 1
        pub = led.publishes.get(mark, {})
        tokens = idx.get(mark, {})
        last = max((times[-1] for times in tokens.values()), default=pub.get("t_ack", 0.0))
        causes = [f for f in faults_between(led, pub.get("t_req", last), last) if f["name"] in INTERRUPTIONS]
        slack = bounds.in_flight * len(causes)
        targeted, failed, pruned = int(job["targeted"]), int(job.get("failed") or 0), int(job.get("pruned") or 0)
        expected = set(led.expected(pub))
        problems = []
        if int(job.get("sent") or 0) + failed + pruned > targeted:
            problems.append(f"sent {job.get('sent')} + failed {failed} + pruned {pruned} > targeted {targeted}")
        if targeted < len(tokens) - slack:
            problems.append(f"targeted {targeted} < {len(tokens)} tokens delivered (slack {slack})")
        if pruned > len(expected & led.invalid) + slack:
            problems.append(f"pruned {pruned} > {len(expected & led.invalid)} unregistered tokens expected")
        if letters[job.get("job_id")] > failed + slack:
            problems.append(f"{letters[job.get('job_id')]} dead letters listed > failed {failed} (slack {slack})")
        for p in problems:
            res.violations.append(Violation(res.invariant, last, f"{mark} (job {job.get('job_id')}): {p}"))
        beyond += max(0, targeted - len(expected))
    res.measured["targeted beyond the stable and quiet users (churn users)"] = beyond
    return res
