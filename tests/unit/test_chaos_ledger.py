"""The chaos run's independent checker (chaos/ledger.py), its fault plan and its report: each
invariant passes on a clean history and fails, naming the case, on a history that breaks it."""

from __future__ import annotations

import itertools

from chaos import ledger, report
from chaos.checker import check_all
from chaos.ledger import Bounds, Ledger, by_mark
from chaos.ledger_edge import check_hostile
from chaos.plan import EXCLUSIVE, make_plan

BOUNDS = Bounds(page_size=2, lanes=1)  # in flight: 2 pushes


def pub(mark: str, t_req: float = 10.0, **kw: object) -> dict[str, object]:
    return {
        "kind": "publish",
        "mark": mark,
        "job_id": f"job-{mark}",
        "scope": "all",
        "t_req": t_req,
        "t_ack": t_req + 0.1,
        **kw,
    }


def push(token: str, mark: str, t: float) -> dict[str, object]:
    return {"t": t, "api": "fcm", "token": token, "data": {"chaos": mark}}


def population(*tokens: str) -> dict[str, object]:
    return {"kind": "population", "name": "P", "tokens": list(tokens)}


def test_every_expected_token_delivered_or_accounted_passes_and_a_missing_one_is_named() -> None:
    events = [
        population("a", "b", "c", "d"),
        pub("m1", populations=["P"]),
        {"kind": "invalid_token", "token": "c"},
        {"kind": "dead_letter", "job": "job-m1", "token": "d"},
    ]
    ok = ledger.check_lost(Ledger.of(events), by_mark([push("a", "m1", 11), push("b", "m1", 11)]))
    assert ok.ok and ok.checked == 4 and ok.measured["accounted"] == {"invalid token": 1, "dead letter": 1}
    lost = ledger.check_lost(Ledger.of(events), by_mark([push("a", "m1", 11)]))
    assert [v.detail for v in lost.violations] == ["m1 (job job-m1, ?): b never got it"]


def test_a_cancelled_job_accounts_for_what_it_did_not_send() -> None:
    events = [
        population("a", "b"),
        pub("m1", populations=["P"]),
        {"kind": "cancel", "mark": "m1", "t_ack": 10.5, "state": "cancelled"},
    ]
    assert ledger.check_lost(Ledger.of(events), by_mark([push("a", "m1", 10.2)])).ok
    events[-1]["state"] = "done"  # the cancel came after the job ended: everything is owed
    assert not ledger.check_lost(Ledger.of(events), by_mark([push("a", "m1", 10.2)])).ok


def test_a_single_send_dead_letter_has_no_job_and_still_accounts() -> None:
    events = [pub("s1", job_id=None, expect=["a"]), {"kind": "dead_letter", "job": "single", "token": "a"}]
    assert ledger.check_lost(Ledger.of(events), by_mark([])).ok


def test_duplicates_within_one_page_per_interruption_pass_and_need_a_cause() -> None:
    kill = {"kind": "fault", "name": "sigkill", "target": "worker-0", "t_start": 11.0, "t_end": 12.0}
    pushes = [push("a", "m1", 10.5), push("a", "m1", 12.5), push("b", "m1", 10.6), push("b", "m1", 12.6)]
    with_kill = ledger.check_duplicates(Ledger.of([pub("m1"), kill]), by_mark(pushes), BOUNDS)
    assert with_kill.ok and with_kill.measured["extra_deliveries"] == 2
    assert "sigkill(worker-0)" in with_kill.measured["groups"][0]
    without = ledger.check_duplicates(Ledger.of([pub("m1")]), by_mark(pushes), BOUNDS)
    assert [v.cause for v in without.violations] == ["none"]
    storm_only = {**kill, "name": "storm"}  # a refused push is not delivered: a storm explains no duplicate
    assert not ledger.check_duplicates(Ledger.of([pub("m1"), storm_only]), by_mark(pushes), BOUNDS).ok
    three = [*pushes, push("c", "m1", 10.7), push("c", "m1", 12.7)]
    assert not ledger.check_duplicates(Ledger.of([pub("m1"), kill]), by_mark(three), BOUNDS).ok  # 3 > one page of 2


def test_a_publish_asked_after_a_revocation_never_reaches_the_token_but_in_flight_pages_may() -> None:
    revoke = {"kind": "revoke", "token": "x", "why": "rotate", "scope": "*", "t_ack": 20.0}
    events = [pub("early", t_req=19.0), pub("late", t_req=21.0), revoke]
    in_flight = ledger.check_revocations(Ledger.of(events), [push("x", "early", 20.5)], BOUNDS)
    assert in_flight.ok and in_flight.measured["in_flight_deliveries"] == 1
    after = ledger.check_revocations(Ledger.of(events), [push("x", "late", 21.5)], BOUNDS)
    assert [v.detail for v in after.violations] == ["x got late (asked after its rotate was acknowledged)"]
    flood = [push("x", "early", 20.0 + i / 10) for i in range(1, 5)]  # 4 > the 2 in flight
    assert not ledger.check_revocations(Ledger.of(events), flood, BOUNDS).ok


def test_an_unsubscribe_revokes_its_topic_only() -> None:
    revoke = {"kind": "revoke", "token": "x", "why": "unsubscribe", "scope": "all", "t_ack": 20.0}
    other = pub("other", t_req=21.0, scope="user:s-1")
    assert ledger.check_revocations(Ledger.of([other, revoke]), [push("x", "other", 22)], BOUNDS).ok
    same = pub("same", t_req=21.0)
    assert not ledger.check_revocations(Ledger.of([same, revoke]), [push("x", "same", 22)], BOUNDS).ok


def test_pushes_after_a_cancel_beyond_the_pages_in_flight_fail() -> None:
    events = [pub("m1"), {"kind": "cancel", "mark": "m1", "t_ack": 11.0, "state": "cancelled"}]
    assert ledger.check_cancels(Ledger.of(events), by_mark([push("a", "m1", 11.5), push("b", "m1", 11.6)]), BOUNDS).ok
    late = [push(t, "m1", 11.5) for t in "abc"]
    assert not ledger.check_cancels(Ledger.of(events), by_mark(late), BOUNDS).ok


def test_a_send_at_publish_delivered_before_its_instant_is_early() -> None:
    events = [pub("m1", not_before=30.0)]
    assert ledger.check_not_early(Ledger.of(events), by_mark([push("a", "m1", 30.01)]), BOUNDS).ok
    early = ledger.check_not_early(Ledger.of(events), by_mark([push("a", "m1", 29.5)]), BOUNDS)
    assert [v.detail for v in early.violations] == ["m1: first push 0.500 s early"]


def test_each_cycle_minute_exactly_once_within_the_grace() -> None:
    sub = {"kind": "cycle_sub", "token": "c", "mark": "cycle:S", "minute": 600.0}
    once = ledger.check_cycles(Ledger.of([sub]), [push("c", "cycle:S", 601)], Bounds(cycle_grace_s=60))
    assert once.ok
    for pushes, expected in (
        ([], "0 pushes"),
        ([push("c", "cycle:S", 601), push("c", "cycle:S", 602)], "2 pushes"),
        ([push("c", "cycle:S", 599)], "early"),
        ([push("c", "cycle:S", 800)], "late"),
    ):
        res = ledger.check_cycles(Ledger.of([sub]), pushes, Bounds(cycle_grace_s=60))
        assert len(res.violations) == 1 and expected in res.violations[0].detail, expected


def job_push(token: str, mark: str, t: float, job: str) -> dict[str, object]:
    return {"t": t, "api": "fcm", "token": token, "data": {"chaos": mark, "notee_id": f"{job}.abc"}}


def test_a_cycle_page_re_sent_after_an_interruption_is_one_fire_but_two_jobs_are_two() -> None:
    """Seed 31 (2026-12-05 08:07): the cycle job's page was sent during a MariaDB kill, its checkpoint
    failed, the task was re-run 30 s later and sent it again (same job, same notification id): the
    documented re-sent page, not the minute fired twice. Two jobs for one minute still are."""
    sub = {"kind": "cycle_sub", "token": "c", "mark": "cycle:S", "minute": 600.0}
    kill = {"kind": "fault", "name": "mariadb_restart", "target": "", "t_start": 610.0, "t_end": 618.0}
    resent = [job_push("c", "cycle:S", 613, "j1"), job_push("c", "cycle:S", 643, "j1")]
    ok = ledger.check_cycles(Ledger.of([sub, kill]), resent, Bounds(cycle_grace_s=60))
    assert ok.ok and ok.measured["re-sent after an interruption"] == [
        "cycle:S c due 600: 1 re-sent (mariadb_restart())"
    ]
    no_cause = ledger.check_cycles(Ledger.of([sub]), resent, Bounds(cycle_grace_s=60))
    assert [v.detail for v in no_cause.violations] == ["cycle:S c due 600: 2 pushes of one job, no interruption"]
    twice = [job_push("c", "cycle:S", 613, "j1"), job_push("c", "cycle:S", 643, "j2")]
    fired_twice = ledger.check_cycles(Ledger.of([sub, kill]), twice, Bounds(cycle_grace_s=60))
    assert [v.detail for v in fired_twice.violations] == ["cycle:S c due 600: 2 pushes, 2 jobs"]


def test_job_counters_must_lie_between_distinct_tokens_and_deliveries() -> None:
    final = {"kind": "job_final", "mark": "m1", "job_id": "j", "state": "done", "sent": 2}
    pushes = [push("a", "m1", 11), push("b", "m1", 11), push("b", "m1", 12)]
    assert ledger.check_counters(Ledger.of([pub("m1"), final]), by_mark(pushes), BOUNDS).ok
    for sent in (1, 4):
        assert not ledger.check_counters(Ledger.of([pub("m1"), {**final, "sent": sent}]), by_mark(pushes), BOUNDS).ok


def test_a_page_whose_checkpoint_an_interruption_lost_may_go_uncounted() -> None:
    """Delivered, checkpoint lost (MySQL down), the token gone before the page was read again: its
    push arrived and was never counted. Allowed only with an interruption, one page per lane."""
    restart = {"kind": "fault", "name": "mariadb_restart", "target": "", "t_start": 10.5, "t_end": 11.5}
    final = {"kind": "job_final", "mark": "m1", "job_id": "j", "state": "done", "sent": 1}
    pushes = [push("a", "m1", 11), push("b", "m1", 11), push("b", "m1", 12)]
    res = ledger.check_counters(Ledger.of([pub("m1"), restart, final]), by_mark(pushes), BOUNDS)
    assert res.ok and res.measured["uncounted"] == ["m1: 1 (mariadb_restart())"]
    assert not ledger.check_counters(Ledger.of([pub("m1"), final]), by_mark(pushes), BOUNDS).ok


def test_a_delivery_summary_counts_every_acknowledged_job_and_no_more_sent_than_delivered() -> None:
    events = [pub("m1", service="S"), pub("m2", service="S", job_id=None), pub("m3", service="T")]
    pushes = [push("a", "m1", 11), push("b", "m1", 11), push("c", "cycle:S", 12), push("d", "m2", 11)]
    fine = {"kind": "summary", "service": "S", "totals": {"jobs": 3, "sent": 3}}  # m1 + a cycle minute's job
    assert ledger.check_summaries(Ledger.of([*events, fine]), by_mark(pushes)).ok
    for totals in ({"jobs": 0, "sent": 3}, {"jobs": 3, "sent": 4}):  # the immediate send m2 is no job's
        assert not ledger.check_summaries(Ledger.of([*events, {**fine, "totals": totals}]), by_mark(pushes)).ok


def test_a_job_whose_request_got_no_answer_counts_in_the_summary_and_its_pushes_too() -> None:
    """Seed 32 (2026-12-05 08:54): a scheduled single send's job was created but its 202 never reached
    the workload; the summary counted its 1 sent push, the checker only the acknowledged jobs' pushes."""
    events = [pub("single:S:1", service="S"), {"kind": "summary", "service": "S", "totals": {"jobs": 2, "sent": 2}}]
    pushes = [push("a", "single:S:1", 11), push("b", "single:S:2", 12)]  # single:S:2: never acknowledged
    assert ledger.check_summaries(Ledger.of(events), by_mark(pushes)).ok
    assert not ledger.check_summaries(Ledger.of(events), by_mark(pushes[:1])).ok


def test_a_push_inside_its_users_quiet_hours_breaks_the_rule_and_a_held_one_after_them_does_not() -> None:
    events = [
        pub("m1", t_req=10.0),
        {"kind": "quiet", "service": "S", "tokens": ["q"], "start": 0.0, "end": 60.0},
    ]
    held = ledger.check_quiet_hours(Ledger.of(events), [push("q", "m1", 60.0), push("a", "m1", 11)])
    assert held.ok and held.checked == 1 and held.measured["held_then_sent"] == 1
    broken = ledger.check_quiet_hours(Ledger.of(events), [push("q", "m1", 59.5)])
    assert [v.detail for v in broken.violations] == ["q got m1 0.5 s before its quiet hours ended"]


def test_subscriber_counters_after_the_reconcile_lie_within_what_the_answers_prove() -> None:
    def counts(topic: int, cycle: int, when: str = "after reconcile") -> dict[str, object]:
        return {
            "kind": "sub_counts",
            "service": "S",
            "when": when,
            "counts": {"TOPIC/news": topic, "CYCLE/daily": cycle},
        }

    events = [
        {"kind": "setup", "service": "S", "stable": 10, "cycle_subs": 3, "cycle_tried": 4},
        {"kind": "sub_state", "service": "S", "user": "c-1", "state": "subscribed"},
        {"kind": "sub_state", "service": "S", "user": "c-2", "state": "subscribed"},
        {"kind": "sub_state", "service": "S", "user": "c-2", "state": "unsubscribed"},
        {"kind": "sub_state", "service": "S", "user": "c-3", "state": "unknown"},
    ]
    assert ledger.check_subscriber_counts(Ledger.of([*events, counts(11, 3), counts(12, 4)])).ok
    drifted = ledger.check_subscriber_counts(Ledger.of([*events, counts(40, 0, "before reconcile")]))
    assert drifted.ok and drifted.checked == 0 and drifted.measured["before reconcile"]  # measured, not judged
    wrong = ledger.check_subscriber_counts(Ledger.of([*events, counts(13, 2)]))
    assert [v.detail for v in wrong.violations] == [
        "S TOPIC/news after reconcile: 13 (ledger 11..12)",
        "S CYCLE/daily after reconcile: 2 (ledger 3..4)",
    ]


def test_webhook_events_at_least_once_and_never_with_two_bodies() -> None:
    final = {"kind": "job_final", "mark": "m1", "job_id": "j1", "state": "done", "webhook": True}
    first = {"kind": "webhook", "event_id": "e1", "sha": "x", "status": 500, "job_id": "j1"}
    retried = {**first, "status": 200}
    assert ledger.check_webhooks(Ledger.of([final, first, retried])).ok
    assert not ledger.check_webhooks(Ledger.of([final, first])).ok  # never answered 2xx: not delivered
    assert not ledger.check_webhooks(Ledger.of([final, first, {**retried, "sha": "y"}])).ok


def test_processes_left_running_and_orphans_after_reconcile_fail() -> None:
    assert not ledger.check_processes(
        Ledger.of([{"kind": "process_left", "name": "api-0", "pid": 1, "alive": True}])
    ).ok
    runs = [
        {"kind": "reconcile", "report": {"dead_rows_removed": 3}},
        {"kind": "reconcile", "report": {"dead_rows_removed": 0}},
    ]
    assert ledger.check_reconcile(Ledger.of(runs)).ok
    runs[1]["report"] = {"dead_rows_removed": 1}
    assert not ledger.check_reconcile(Ledger.of(runs)).ok


def test_a_hostile_line_of_an_older_run_may_be_refused_but_not_answered_with_an_error() -> None:
    fine = {"kind": "hostile", "probe": "oversized body", "sent": 3, "statuses": {"413": 2, "0": 1}}
    assert check_hostile(Ledger.of([fine, {**fine, "statuses": {"503": 3}}])).ok
    assert not check_hostile(Ledger.of([{**fine, "statuses": {"500": 1}}])).ok


def test_check_all_on_a_clean_history_passes_every_invariant() -> None:
    events = [
        population("a"),
        pub("m1", populations=["P"]),
        {"kind": "job_final", "mark": "m1", "job_id": "j", "state": "done", "sent": 1},
    ]
    assert all(r.ok for r in check_all(events, [push("a", "m1", 11)], BOUNDS))


def test_the_plan_is_a_function_of_its_seed_and_never_stacks_store_faults() -> None:
    replicas = {"api": 2, "worker": 3, "scheduler": 2, "webhooks": 1}
    plan = make_plan(7, 1800, replicas)
    assert plan == make_plan(7, 1800, replicas) and plan != make_plan(8, 1800, replicas)
    stores = [f for f in plan if f.kind in EXCLUSIVE]
    assert {f.kind for f in stores} == EXCLUSIVE and "hostile" in {f.kind for f in plan}
    for a, b in itertools.pairwise(stores):
        assert b.at_s >= a.at_s + a.length_s + 60, (a, b)
    assert all(20 <= f.at_s <= 1800 - 60 for f in plan)
    short = make_plan(7, 300, replicas)
    assert {"cassandra_node", "mariadb_restart", "hostile"} <= {f.kind for f in short}
    assert "reset" in {f.kind for f in make_plan(31, 300, replicas)}  # the CI seed cuts connections too


def test_connection_and_credential_faults_take_turns_between_the_providers() -> None:
    """GOAWAY and expiring credentials reach FCM as well as APNs (issue 31: they were APNs only, or FCM
    only for the tokens), by turns, without changing a seed's kinds, times or lengths; resets stay on
    APNs (chaos/plan.py says why)."""
    replicas = {"api": 2, "worker": 3, "scheduler": 2, "webhooks": 1}
    plan = make_plan(3131, 1800, replicas)
    for kind, first in (("goaway", "apns"), ("token_expiry", "fcm")):
        targets = [f.target for f in plan if f.kind == kind]
        assert set(targets) == {"apns", "fcm"} and targets[0] == first, (kind, targets)
        assert all(a != b for a, b in itertools.pairwise(targets)), (kind, targets)
    # resets stay on APNs until the Prometheus check counts answers an FCM reset loses (chaos/plan.py)
    assert {f.target for f in plan if f.kind == "reset"} == {"apns"}
    again = make_plan(3131, 1800, replicas)
    assert [(f.at_s, f.kind, f.length_s) for f in plan] == [(f.at_s, f.kind, f.length_s) for f in again]
    others = [f for f in plan if f.kind not in ("goaway", "reset", "token_expiry")]
    assert all(f.target not in ("apns", "fcm") for f in others)


def test_the_report_carries_the_seed_the_table_the_faults_and_the_violation_excerpts() -> None:
    events = [population("a"), pub("m1", populations=["P"])]
    results = check_all(events, [], BOUNDS)
    fault = {"name": "sigkill", "target": "worker-1", "t_start": 10.0, "t_end": 12.0}
    info = report.RunInfo(seed=42, minutes=5, started=0.0, ended=60.0, command="CHAOS_SEED=42 make chaos")
    lost = next(v for r in results for v in r.violations)
    md = report.markdown(info, results, [fault], {lost: ["worker-1: 1970-01-01 00:00:10 ERROR boom"]})
    assert "seed 42" in md and "| FAIL | no acknowledged push lost | 1 | 1 |" in md and "worker-1: 1970" in md
    page = report.page(info, results, report.Timeline([11.0, 12.0], [30.0], [fault]), {})
    assert page.count("<svg") == 1 and "sigkill worker-1" in page and "CHAOS_SEED=42" in page
