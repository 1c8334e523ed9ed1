"""A tiny run of every benchmark (docs/BENCHMARKS.md) against the test stores and the test emulator, so
the benchmarks cannot rot. These tests check that each figure is *measured* and well formed; they
assert nothing about speed (performance is measured by ``make bench``, never by timed tests).

The rules of this topic that need no server are in tests/unit/test_bench_smoke.py."""

from __future__ import annotations

import json
from datetime import UTC

import pytest

from bench import env, report


@pytest.fixture()
def bench_emulator(emulator):
    with env.emulator(emulator.url, emulator.ca_file) as emu:
        yield emu


def _measured(fig: dict, name: str, *, ratio: bool = True) -> None:
    assert not fig.get("missing"), fig
    assert set(fig) >= {"value", "goal", "met", "numerator", "denominator", "sizes"}
    assert fig["goal"].split()[-1] == f"{report.GOALS[name][1]:g}"
    for side in ("numerator", "denominator"):
        assert set(fig[side]) == {"name", "value", "unit"}
        assert fig[side]["value"] > 0, fig
    if ratio:
        assert fig["value"] == pytest.approx(fig["numerator"]["value"] / fig["denominator"]["value"], rel=0.01)


def test_slot_walk_smoke(runtime):
    from bench import slot_walk

    fig = slot_walk.run(runtime, rows=1500, fetch_size=200, repeats=1)
    _measured(fig, "slot_walk_ratio")
    assert fig["sizes"] == {"rows": 1500, "slots": 1, "fetch_size": 200, "repeats": 1}


def test_send_cpu_smoke(bench_emulator):
    from bench import send_cpu

    fig, rates = send_cpu.run(bench_emulator, n=300, page=100, repeats=1)
    _measured(fig, "send_cpu_ratio")
    assert rates["bare_wall_per_s"] > 0
    # both sides really reached the emulator: 300 requests each, plus Notee's one warm-up send
    assert bench_emulator.stats()["counts"]["fcm.ok"] == 601


def test_send_cpu_apns_smoke(bench_emulator):
    from bench import send_cpu

    assert bench_emulator.apns_url  # the realistic emulator's APNs port
    fig = send_cpu.run_apns(bench_emulator, n=200, page=100, repeats=1)
    _measured(fig, "send_cpu_ratio_apns")
    assert bench_emulator.stats()["counts"]["apns.ok"] == 401
    assert bench_emulator.stats()["apns_peer"]["protocol_errors"] == 0


def test_gorush_smoke(bench_emulator):
    """gorush, built from the Go module proxy, against the same emulator through the CONNECT proxy.
    `make test` builds it in the background from its start (docs/BENCHMARKS.md); here the build is
    waited for, or made, once."""
    from bench import gorush

    if not gorush.available():
        pytest.skip("the gorush comparison needs Go to build gorush (go is not on PATH; docs/BENCHMARKS.md)")
    before = bench_emulator.stats()["counts"]
    figs = gorush.run(bench_emulator, n=600, repeats=1, page=100)
    for name in ("gorush_cpu_ratio", "gorush_cpu_ratio_apns"):
        _measured(figs[name], name)
        assert figs[name]["extra"]["proxy_tunnels"] > 0  # gorush really went through the proxy
    after = bench_emulator.stats()
    # each provider: gorush's 500 warm-up messages and 600 measured, Notee's 600 and its one warm-up send
    for api in ("fcm", "apns"):
        assert after["counts"][f"{api}.ok"] - before.get(f"{api}.ok", 0) == 500 + 600 + 600 + 1
    assert after["apns_peer"]["protocol_errors"] == 0
    assert after["apns_peer"]["rules"]["first_streams"] == 1  # APNs' one stream per new connection, restored

    fan = {"fanout_ratio": {"extra": {"worker_cpu_us_per_push": 50.0, "worker_cpu_us_per_push_apns": 25.0}}}
    gorush.add_worker_side(fan | figs)
    extra = figs["gorush_cpu_ratio_apns"]["extra"]
    assert extra["notee_worker_us_per_push"] == 25.0
    assert extra["gorush_per_notee_worker"] == pytest.approx(figs["gorush_cpu_ratio_apns"]["numerator"]["value"] / 25)


def test_fanout_and_worker_rss_smoke(runtime, bench_emulator):
    from bench import fanout

    out = fanout.run(runtime, bench_emulator, devices=1200, bare_send_n=200)
    _measured(out["fanout_ratio"], "fanout_ratio")
    extra = out["fanout_ratio"]["extra"]
    # the ceiling is the smaller of the two measured around the publish
    assert out["fanout_ratio"]["denominator"]["value"] == pytest.approx(
        min(extra["ceiling_slot_walk_raw"], extra["ceiling_bare_send"]), rel=0.01
    )
    assert extra["ceiling_bare_send"] == pytest.approx(
        (extra["ceiling_bare_send_before"] + extra["ceiling_bare_send_after"]) / 2, rel=0.01
    )
    assert extra["job_state"] == "done" and extra["apns_job_state"] == "done"
    assert extra["worker_cpu_us_per_push"] > 0 and extra["worker_cpu_us_per_push_apns"] > 0
    _measured(out["worker_rss_growth"], "worker_rss_growth")
    # the last publish (the APNs side figure's, 1200 // 5 iOS devices) went through the APNs port
    assert extra["apns_devices"] == 240 and bench_emulator.stats()["counts"]["apns.ok"] >= 240


def test_fanout_without_ceilings_is_missing(runtime, bench_emulator):
    from bench import fanout

    out = fanout.run(runtime, bench_emulator, devices=50, ceilings={})
    assert out["fanout_ratio"]["missing"] is True and "no ceiling" in out["fanout_ratio"]["reason"]


def test_cycle_minute_smoke(runtime, bench_emulator):
    from bench import cycle

    fig = cycle.run(runtime, bench_emulator, devices=800)
    _measured(fig, "cycle_minute_s", ratio=False)
    assert fig["value"] == fig["numerator"]["value"]
    assert fig["denominator"]["value"] >= 800
    assert fig["extra"]["jobs"] == 1


@pytest.mark.parametrize("name", ["sparse_publish", "sparse_cycle"])
def test_sparse_smoke(runtime, bench_emulator, name):
    from bench import sparse

    run = sparse.run_publish if name == "sparse_publish" else sparse.run_cycle
    fig = run(runtime, bench_emulator, subscribers=3, counter=300_000)
    _measured(fig, name, ratio=False)
    assert fig["value"] == fig["numerator"]["value"]
    assert fig["denominator"]["value"] == fig["extra"]["tasks"] == 1  # 3 occupied slots: one task
    assert fig["extra"]["full_walk_tasks"] == 11  # the same job with occupancy unknown: every slot
    assert fig["met"] == (fig["value"] < 1.0)
    assert bench_emulator.delivered() >= 3  # the full walk reached them too (the emulator counts since its reset)


def test_estimate_smoke(runtime):
    from bench import audience_data, estimate
    from tests.support.tenants import new_service_id

    service = new_service_id()
    fig = estimate.run(runtime, users=3000, repeats=1, service=service)
    _measured(fig, "estimate_s", ratio=False)
    assert fig["value"] == fig["numerator"]["value"] and fig["extra"]["loaded_now"] is True
    assert fig["extra"]["users_matched"] == 200  # i % 10 == 0 and not i % 3 == 0, of 3,000 (counted, checked)
    again = audience_data.load_users(runtime, 3000, service)
    assert again["loaded"] is False  # a service that holds the population is kept


def test_subscribe_smoke(runtime):
    from bench import subscribe

    fig = subscribe.run(runtime, users=40, concurrency=4, repeats=1)
    _measured(fig, "subscribe_ratio")
    assert fig["extra"]["api_p99_ms"] >= fig["extra"]["api_p50_ms"] > 0
    # the pass with rate limits on subscribed every user too (a 429 fails the figure)
    assert fig["extra"]["rate_limited_subs_per_s"] > 0 and fig["extra"]["rate_limited_server_cpu_ms_per_sub"] > 0


def test_bulk_subscribe_smoke(runtime):
    from bench import subscribe

    fig = subscribe.run_bulk(runtime, users=120, chunk=50, concurrency=2, repeats=1)
    _measured(fig, "bulk_subscribe_ratio")
    assert fig["goal"] == "numerator >= 3000"  # the goal is on users/s, not on the ratio
    assert fig["met"] == (fig["numerator"]["value"] >= 3000)
    assert fig["extra"]["api_server_cpu_ms_per_user"] > 0


def test_import_users_smoke(runtime):
    from bench import imports

    fig = imports.run_users(runtime, users=150, chunk_lines=50)
    _measured(fig, "import_users_per_s", ratio=False)
    assert fig["value"] == fig["numerator"]["value"] and 0 < fig["extra"]["split_share"] < 1


def test_receipts_smoke(runtime):
    from bench import receipts

    fig = receipts.run(runtime, devices=300, concurrency=2)
    _measured(fig, "receipts_per_s", ratio=False)
    assert fig["extra"]["api_cpu_ms_per_event"] > 0 and fig["extra"]["aggregate_read_ms"] > 0


def test_import_subscriptions_smoke(runtime):
    from bench import imports

    fig = imports.run_subscriptions(runtime, users=120, chunk_lines=50, repeats=1)
    _measured(fig, "import_subscriptions_ratio")


def test_local_time_smoke(runtime, bench_emulator):
    from bench import local_time

    fig = local_time.run(runtime, bench_emulator, devices=480)
    _measured(fig, "local_time_cpu_ratio")
    assert fig["sizes"]["zones"] == 24 and fig["sizes"]["parts"] == 24  # one part per zone (24 release minutes)
    # One task set per zone, each reading only its zone's rows, plus the set of users without a zone
    # (none here; jobs.zone_groups): 25 sets of the topic's slot tasks.
    assert fig["extra"]["local_task_sets"] == 25
    assert fig["extra"]["local_tasks"] == 25 * fig["extra"]["plain_tasks"]
    assert bench_emulator.delivered() >= 2 * 480  # both publishes reached every device


def test_condition_publish_smoke(runtime, bench_emulator):
    from bench import audiences

    fig = audiences.run_condition(runtime, bench_emulator, devices=400)
    _measured(fig, "condition_publish_ratio")
    assert fig["extra"]["condition_sent"] == 200 and fig["extra"]["topic_sent"] == 400


def test_segment_publish_smoke(runtime, bench_emulator):
    from bench import audiences

    fig = audiences.run_segment(runtime, bench_emulator, users=2_000, matching=200)
    _measured(fig, "segment_publish_ratio")


def test_fairness_smoke(runtime, bench_emulator):
    from bench import fairness

    fig = fairness.run(runtime, bench_emulator, devices=2500, interval_s=0.5)
    _measured(fig, "fairness_p99_s", ratio=False)
    assert fig["value"] == fig["numerator"]["value"]
    assert fig["denominator"]["value"] >= 1  # B published at least once while A ran, and each was acknowledged
    assert fig["sizes"]["worker_processes"] == 1 and fig["sizes"]["lanes"] == 2
    assert fig["extra"]["a_state"] == "done"
    assert fig["extra"]["b_max_s"] >= fig["value"] >= fig["extra"]["b_p50_s"] > 0
    assert bench_emulator.delivered() == 2500 + fig["denominator"]["value"]  # A's devices and B's pushes, once each


@pytest.mark.parametrize("engine", ["h2", "jh2", "pycurl", "curl_cffi", "pyreqwest"])
def test_engines_smoke(bench_emulator, engine):
    # every bare loop of bench/engines.py really sends what Notee sends and gets 200 for each
    # request (one_run raises otherwise), on both APIs; the APNs port starts at one stream
    from bench import engines
    from bench.workload import apns_credentials
    from notee.providers.apns import ApnsJwt

    c = apns_credentials().apns
    apns_bearer = ApnsJwt(c.private_key, c.key_id, c.team_id).bearer().decode()
    before = bench_emulator.stats()
    fcm = engines.one_run(engine, "fcm", bench_emulator.url, bench_emulator.ca_file, 120, bench_emulator.access_token())
    apns = engines.one_run(engine, "apns", bench_emulator.apns_url, bench_emulator.ca_file, 120, apns_bearer)
    after = bench_emulator.stats()
    assert fcm["n"] == apns["n"] == 120 and fcm["cpu_s"] > 0 and apns["cpu_s"] > 0
    assert after["counts"]["fcm.ok"] - before["counts"].get("fcm.ok", 0) == 120
    assert after["counts"]["apns.ok"] - before["counts"].get("apns.ok", 0) == 120
    assert after["apns_peer"]["protocol_errors"] == before["apns_peer"]["protocol_errors"]


def test_fanout_scaling_smoke(runtime, bench_emulator):
    from bench import fanout

    fig = fanout.run_scaling(runtime, bench_emulator, devices=600, processes=(1, 2))
    _measured(fig, "fanout_scaling")
    runs = fig["extra"]["runs"]
    assert [r["workers"] for r in runs] == [1, 2]
    # every worker of a run is in its CPU figures, and the machine's total is there to compare (the
    # emulator's only when the bench started it: the test emulator is attached, its pid unknown)
    assert set(runs[1]["cores"]) >= {"worker_0", "worker_1", "bench", "machine"}
    assert bench_emulator.delivered() >= 600


def test_results_files(tmp_path):
    from datetime import datetime

    figs = {
        "slot_walk_ratio": report.figure(
            "slot_walk_ratio", report.Measure("a", 9.5, "rows/s"), report.Measure("b", 10.0, "rows/s"), {"rows": 10}
        ),
        "send_cpu_ratio": report.missing("Notee side not available: no module"),
    }
    speed = (report.speed_probe(), 123.4)
    assert speed[0] > 0
    doc = report.write("quick", figs, datetime.now(UTC), tmp_path, speed=speed)
    on_disk = json.loads((tmp_path / "latest.json").read_text())
    assert on_disk["machine"]["speed_probe_ms"] == list(speed)
    assert on_disk["figures"] == doc["figures"]
    assert list(on_disk["figures"]) == list(report.GOALS)  # every figure present, in table order
    assert on_disk["figures"]["slot_walk_ratio"]["value"] == 0.95 and on_disk["figures"]["slot_walk_ratio"]["met"]
    assert on_disk["figures"]["fanout_ratio"] == {"missing": True, "reason": "not run"}
    md = (tmp_path / "latest.md").read_text()
    for name in report.GOALS:
        assert f"| {name} |" in md
    assert "Notee side not available" in md
    assert f"speed probe {speed[0]:g} ms before, 123.4 ms after" in md


def test_kept_figures_are_shown_beside_new_ones_with_their_run(tmp_path):
    from datetime import datetime

    kept_file = tmp_path / "kept.json"
    extra = {"worker_cpu_us_per_push": 54.8, "emulator_cpu_us_per_request": 65.7}
    first = report.figure(
        "fanout_ratio", report.Measure("n", 2.0, "pushes/s"), report.Measure("d", 1.0, "pushes/s"), {}, extra=extra
    )
    doc = report.write("full", {"fanout_ratio": first}, datetime.now(UTC), tmp_path, kept_file=kept_file)
    assert "not kept" in (tmp_path / "latest.md").read_text()  # nothing kept yet
    assert report.keep(doc, kept_file) == 1  # the measured figure only, not the missing ones
    entry = report.read_kept(kept_file)["full"]["fanout_ratio"]
    assert entry["value"] == 2.0 and entry["run"]["commit"] == doc["machine"].get("commit", "?")
    second = report.figure(
        "fanout_ratio",
        report.Measure("n", 3.0, "pushes/s"),
        report.Measure("d", 1.0, "pushes/s"),
        {},
        extra={"worker_cpu_us_per_push": 36.8},
    )
    report.write("full", {"fanout_ratio": second}, datetime.now(UTC), tmp_path, kept_file=kept_file)
    md = (tmp_path / "latest.md").read_text()
    assert "| fanout_ratio | 3.0 | 2.0 |" in md
    assert "| fanout_ratio.worker_cpu_us_per_push | 36.8 | 54.8 |" in md
    assert "| fanout_ratio.emulator_cpu_us_per_request | — | 65.7 |" in md
    # a quick run is compared with quick runs only
    report.write("quick", {"fanout_ratio": second}, datetime.now(UTC), tmp_path, kept_file=kept_file)
    assert "| fanout_ratio | 3.0 | — | not kept |" in (tmp_path / "latest.md").read_text()
