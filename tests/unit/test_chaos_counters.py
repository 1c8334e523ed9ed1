"""The chaos checker's newer invariants (chaos/ledger_edge.py, chaos/ledger_prom.py, chaos/scrape.py):
hostile probes held to their documented answers, the attacked API's latency, the jobs' targeted /
failed / pruned, and Prometheus summed over process lifetimes against the emulator. Each passes on
a clean history and fails on one that breaks it."""

from __future__ import annotations

from chaos.ledger import Bounds, Ledger, by_mark
from chaos.ledger_edge import check_hostile, check_hostile_latency
from chaos.ledger_prom import check_job_counts, check_prometheus, prom_totals
from chaos.scrape import parse

BOUNDS = Bounds(page_size=2, lanes=1)  # in flight: 2 pushes
API = "http://127.0.0.1:8080"


def probe(name: str, statuses: dict[str, int], expect: list[int], t: float = 50.0) -> dict[str, object]:
    sent = sum(statuses.values())
    return {"kind": "hostile", "t": t, "probe": name, "api": API, "sent": sent, "statuses": statuses, "expect": expect}


HOSTILE = {"kind": "fault", "name": "hostile", "target": "api-0", "t_start": 20.0, "t_end": 60.0}


def test_a_body_probe_must_get_its_documented_answer_and_never_a_429() -> None:
    fine = [
        HOSTILE,
        probe("broken json", {"422": 5}, [422]),
        probe("connection flood", {"200": 100, "429": 200}, [200, 429]),
    ]
    assert check_hostile(Ledger.of(fine)).ok
    capped = check_hostile(Ledger.of([HOSTILE, probe("broken json", {"422": 2, "429": 3}, [422])]))
    assert not capped.ok and "429" in capped.violations[0].detail
    assert not check_hostile(Ledger.of([HOSTILE, probe("oversized body", {"413": 4, "502": 1}, [413])])).ok
    closed = [HOSTILE, probe("oversized body", {"413": 4, "0": 1}, [413])]
    assert not check_hostile(Ledger.of(closed)).ok  # a connection closed without its answer
    killed = {"kind": "fault", "name": "sigkill", "target": "api-0", "t_start": 30.0, "t_end": 31.0}
    assert check_hostile(Ledger.of([*closed, killed])).ok  # ... unless its API was killed meanwhile


def test_the_flood_must_be_capped() -> None:
    uncapped = check_hostile(Ledger.of([HOSTILE, probe("connection flood", {"200": 300}, [200, 429])]))
    assert not uncapped.ok and "never capped" in uncapped.violations[0].detail


def req(t: float, ms: float) -> dict[str, object]:
    return {"kind": "req", "t": t, "op": "register", "status": 200, "api": API, "ms": ms}


def test_the_attacked_apis_latency_is_compared_inside_and_outside_the_phase() -> None:
    outside = [req(100.0 + i, 10.0) for i in range(30)]
    hostile_line = probe("slow headers", {"408": 5}, [408, 429])
    normal = check_hostile_latency(
        Ledger.of([HOSTILE, hostile_line, *outside, *(req(30.0 + i, 20.0) for i in range(25))])
    )
    assert normal.ok and normal.measured["p50_ms"] == "20.0 during, 10.0 outside"
    slow = check_hostile_latency(
        Ledger.of([HOSTILE, hostile_line, *outside, *(req(30.0 + i, 900.0) for i in range(25))])
    )
    assert not slow.ok


def job(mark: str, **counts: int) -> dict[str, object]:
    return {"kind": "job_final", "mark": mark, "job_id": f"job-{mark}", "state": "done", **counts}


def publish(mark: str) -> dict[str, object]:
    return {
        "kind": "publish",
        "mark": mark,
        "job_id": f"job-{mark}",
        "t_req": 10.0,
        "t_ack": 10.1,
        "populations": ["P"],
    }


def push(token: str, mark: str, t: float, api: str = "fcm") -> dict[str, object]:
    return {"t": t, "api": api, "token": token, "data": {"chaos": mark}}


def test_job_targeted_failed_and_pruned_reconcile_with_the_ledger() -> None:
    base = [
        {"kind": "population", "name": "P", "tokens": ["a", "b", "c", "x"]},
        {"kind": "invalid_token", "token": "x"},
        publish("m1"),
        {
            "kind": "dead_letter",
            "job": "job-m1",
            "token": "c",
            "reason": "UNAVAILABLE",
            "provider": "fcm",
            "created": 11.0,
        },
    ]
    idx = by_mark([push("a", "m1", 11.0), push("b", "m1", 11.0)])
    assert check_job_counts(Ledger.of([*base, job("m1", targeted=4, sent=2, failed=1, pruned=1)]), idx, BOUNDS).ok
    for bad in (
        job("m1", targeted=3, sent=2, failed=1, pruned=1),  # more outcomes than recipients
        job("m1", targeted=4, sent=2, failed=0, pruned=1),  # a listed letter it did not count
        job("m1", targeted=4, sent=2, failed=0, pruned=2),  # pruned a token FCM never refused
    ):
        assert not check_job_counts(Ledger.of([*base, bad]), idx, BOUNDS).ok, bad


def metrics(pid: int, t: float, sent: float, failed: float = 0.0) -> dict[str, object]:
    counters = {'notee_pushes_total{outcome="sent",provider="fcm",service="S"}': sent}
    if failed:
        counters['notee_pushes_total{outcome="failed",provider="fcm",service="S"}'] = failed
    return {"kind": "metrics", "t": t, "proc": "worker-0", "pid": pid, "t_scraped": t, "counters": counters}


def test_prometheus_sums_every_lifetime_and_reconciles_within_the_scrape_gaps() -> None:
    # incarnation 1 counted 2 by its last scrape (t=20) and was killed at t=22 after one more push
    # (t=21); incarnation 2 counted 2 more
    gap = {"kind": "metrics_gap", "proc": "worker-0", "pid": 1, "t_scraped": 20.0, "t_exit": 22.0}
    events = [metrics(1, 10.0, 1), metrics(1, 20.0, 2), gap, metrics(2, 30.0, 2)]
    assert prom_totals(Ledger.of(events))[("notee_pushes_total", "fcm", "sent")] == 4
    pushes = [
        push("a", "m1", 11.0),
        push("b", "m1", 15.0),
        push("c", "m1", 21.0),
        push("d", "m1", 25.0),
        push("e", "m1", 26.0),
    ]
    fine = check_prometheus(Ledger.of(events), pushes)
    assert fine.ok, fine.violations
    assert not check_prometheus(Ledger.of(events), [*pushes, push("f", "m1", 27.0)]).ok  # one the counters never saw
    assert not check_prometheus(Ledger.of(events), pushes[:3]).ok  # counted more than the emulator received
    # a push received twice (its answer cut) is counted once: allowed
    assert check_prometheus(Ledger.of(events), [*pushes, push("e", "m1", 26.5)]).ok


def test_listed_dead_letters_are_at_most_the_pushes_counted_failed() -> None:
    letter = {
        "kind": "dead_letter",
        "job": "j",
        "token": "a",
        "reason": "UNAVAILABLE",
        "provider": "fcm",
        "created": 5.0,
    }
    events = [metrics(1, 10.0, 1, failed=1), letter]
    assert check_prometheus(Ledger.of(events), [push("b", "m1", 4.0)]).ok
    assert not check_prometheus(Ledger.of([*events, {**letter, "token": "c"}]), [push("b", "m1", 4.0)]).ok


def test_a_scrape_keeps_the_push_counters_and_drops_the_rest() -> None:
    text = (
        "# TYPE notee_pushes_total counter\n"
        'notee_pushes_total{provider="fcm",service="S",outcome="sent"} 7.0\n'
        'notee_pushes_total{provider="apns",service="S",outcome="sent"} 0.0\n'
        "# TYPE notee_tasks_claimed_total counter\nnotee_tasks_claimed_total 3.0\n"
    )
    assert parse(text) == {'notee_pushes_total{outcome="sent",provider="fcm",service="S"}': 7.0}


def test_a_run_of_its_own_processes_without_a_scrape_fails_rather_than_passing_silently() -> None:
    left = {"kind": "process_left", "name": "worker-0", "pid": 1, "alive": False}
    assert not check_prometheus(Ledger.of([left]), [push("a", "m1", 1.0)]).ok
    assert check_prometheus(Ledger.of([]), [push("a", "m1", 1.0)]).ok  # attached: nothing of its own to scrape
