"""``make bench`` / ``make bench-quick``: run every figure, write bench/results/latest.{json,md}, print
the table. ``python -m bench.run [--quick] [--only NAME ...]``.

Each figure is measured independently: one that fails or whose Notee side does not exist is reported
as missing with the reason, and the others still run.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from datetime import UTC, datetime
from typing import Any

from bench import env, report
from bench.report import missing

SIZES: dict[str, dict[str, Any]] = {
    "quick": {
        "walk_rows": 60_000,
        "walk_repeats": 5,
        "send_messages": 5_000,
        "send_repeats": 3,
        "gorush_messages": 2_000,
        "fanout_devices": 20_000,
        "scaling_devices": 20_000,
        "scaling_publishes": (1, 2),
        "cycle_devices": 20_000,
        "sub_users": 500,
        "sub_repeats": 2,
        "bulk_users": 4_000,
        "bulk_repeats": 2,
        "local_devices": 20_000,
        "personal_devices": 20_000,
        "fair_devices": 40_000,
        "cond_devices": 20_000,
        "segment_users": 100_000,
        "segment_matching": 10_000,
        "audience_users": 100_000,
        "import_users": 10_000,
        "import_sub_users": 4_000,
        "receipt_devices": 20_000,
    },
    "full": {
        "walk_rows": 300_000,
        "walk_repeats": 5,
        "send_messages": 10_000,
        "send_repeats": 3,
        "gorush_messages": 10_000,
        "fanout_devices": 100_000,
        "scaling_devices": 100_000,
        "scaling_publishes": (1, 2, 2, 1),
        "cycle_devices": 100_000,
        "sub_users": 5_000,
        "sub_repeats": 2,
        "bulk_users": 20_000,
        "bulk_repeats": 2,
        "local_devices": 100_000,
        "personal_devices": 100_000,
        "fair_devices": 200_000,
        "cond_devices": 100_000,
        "segment_users": 1_000_000,
        "segment_matching": 100_000,
        "audience_users": 1_000_000,
        "import_users": 50_000,
        "import_sub_users": 20_000,
        "receipt_devices": 100_000,
    },
}
log = logging.getLogger("bench")


def _why(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return f"Notee side not available: {exc}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def run_all(runtime, emulator, sizes: dict[str, int], only: set[str] | None = None) -> dict[str, dict[str, Any]]:
    figures: dict[str, dict[str, Any]] = {}

    def want(*names: str) -> bool:
        return only is None or bool(only & set(names))

    def attempt(names: tuple[str, ...], fn) -> None:
        t = time.perf_counter()
        log.info("bench: %s ...", "/".join(names))
        try:
            fn()
        except Exception as exc:  # one figure's failure must not hide the others
            log.error("bench: %s failed:\n%s", "/".join(names), traceback.format_exc())
            for name in names:
                figures.setdefault(name, missing(_why(exc)))
        log.info("bench: %s done in %.1f s", "/".join(names), time.perf_counter() - t)

    if want("slot_walk_ratio"):

        def walk() -> None:
            from bench import slot_walk

            fig = slot_walk.run(runtime, rows=sizes["walk_rows"], repeats=sizes["walk_repeats"])
            figures["slot_walk_ratio"] = fig

        attempt(("slot_walk_ratio",), walk)

    if want("send_cpu_ratio"):

        def send() -> None:
            from bench import send_cpu

            fig, _rates = send_cpu.run(emulator, n=sizes["send_messages"], repeats=sizes["send_repeats"])
            figures["send_cpu_ratio"] = fig

        attempt(("send_cpu_ratio",), send)

    if want("webpush_cpu_us"):

        def web() -> None:
            from bench import webpush_cpu

            figures["webpush_cpu_us"] = webpush_cpu.run(
                emulator, n=sizes["send_messages"] // 2, repeats=sizes["send_repeats"]
            )

        attempt(("webpush_cpu_us",), web)

    if want("send_cpu_ratio_apns"):

        def send_apns() -> None:
            from bench import send_cpu

            figures["send_cpu_ratio_apns"] = send_cpu.run_apns(
                emulator, n=sizes["send_messages"], repeats=sizes["send_repeats"]
            )

        attempt(("send_cpu_ratio_apns",), send_apns)

    if want("gorush_cpu_ratio", "gorush_cpu_ratio_apns"):

        def go_server() -> None:
            from bench import gorush

            figures.update(gorush.run(emulator, n=sizes["gorush_messages"], repeats=sizes["send_repeats"]))

        attempt(("gorush_cpu_ratio", "gorush_cpu_ratio_apns"), go_server)

    if want("fanout_ratio", "worker_rss_growth"):

        def fan() -> None:
            from bench import fanout

            figures.update(fanout.run(runtime, emulator, devices=sizes["fanout_devices"]))

        attempt(("fanout_ratio", "worker_rss_growth"), fan)

    if want("fanout_scaling"):

        def scaling() -> None:
            from bench import fanout

            figures["fanout_scaling"] = fanout.run_scaling(
                runtime, emulator, devices=sizes["scaling_devices"], processes=sizes["scaling_publishes"]
            )

        attempt(("fanout_scaling",), scaling)

    if want("cycle_minute_s"):

        def cyc() -> None:
            from bench import cycle

            figures["cycle_minute_s"] = cycle.run(runtime, emulator, devices=sizes["cycle_devices"])

        attempt(("cycle_minute_s",), cyc)

    if want("subscribe_ratio"):

        def sub() -> None:
            from bench import subscribe

            figures["subscribe_ratio"] = subscribe.run(runtime, users=sizes["sub_users"], repeats=sizes["sub_repeats"])

        attempt(("subscribe_ratio",), sub)

    if want("bulk_subscribe_ratio"):

        def bulk() -> None:
            from bench import subscribe

            figures["bulk_subscribe_ratio"] = subscribe.run_bulk(
                runtime, users=sizes["bulk_users"], repeats=sizes["bulk_repeats"]
            )

        attempt(("bulk_subscribe_ratio",), bulk)

    if want("sparse_publish"):

        def sparse_publish() -> None:
            from bench import sparse

            figures["sparse_publish"] = sparse.run_publish(runtime, emulator)

        attempt(("sparse_publish",), sparse_publish)

    if want("sparse_cycle"):

        def sparse_cycle() -> None:
            from bench import sparse

            figures["sparse_cycle"] = sparse.run_cycle(runtime, emulator)

        attempt(("sparse_cycle",), sparse_cycle)

    if want("local_time_cpu_ratio"):

        def local() -> None:
            from bench import local_time

            figures["local_time_cpu_ratio"] = local_time.run(runtime, emulator, devices=sizes["local_devices"])

        attempt(("local_time_cpu_ratio",), local)

    if want("personal_cpu_ratio"):

        def personal_templates() -> None:
            from bench import personal

            figures["personal_cpu_ratio"] = personal.run(runtime, emulator, devices=sizes["personal_devices"])

        attempt(("personal_cpu_ratio",), personal_templates)

    if want("fairness_p99_s"):

        def fair() -> None:
            from bench import fairness

            figures["fairness_p99_s"] = fairness.run(runtime, emulator, devices=sizes["fair_devices"])

        attempt(("fairness_p99_s",), fair)

    if want("condition_publish_ratio"):

        def condition() -> None:
            from bench import audiences

            figures["condition_publish_ratio"] = audiences.run_condition(
                runtime, emulator, devices=sizes["cond_devices"]
            )

        attempt(("condition_publish_ratio",), condition)

    if want("segment_publish_ratio"):

        def segment() -> None:
            from bench import audiences

            figures["segment_publish_ratio"] = audiences.run_segment(
                runtime, emulator, users=sizes["segment_users"], matching=sizes["segment_matching"]
            )

        attempt(("segment_publish_ratio",), segment)
    if want("estimate_s"):

        def estimate() -> None:
            from bench import estimate

            figures["estimate_s"] = estimate.run(runtime, users=sizes["audience_users"])

        attempt(("estimate_s",), estimate)
    if want("import_users_per_s"):

        def import_users() -> None:
            from bench import imports

            figures["import_users_per_s"] = imports.run_users(runtime, users=sizes["import_users"])

        attempt(("import_users_per_s",), import_users)

    if want("import_subscriptions_ratio"):

        def import_subscriptions() -> None:
            from bench import imports

            figures["import_subscriptions_ratio"] = imports.run_subscriptions(runtime, users=sizes["import_sub_users"])

        attempt(("import_subscriptions_ratio",), import_subscriptions)

    if want("receipts_per_s"):

        def receipt_events() -> None:
            from bench import receipts

            figures["receipts_per_s"] = receipts.run(runtime, devices=sizes["receipt_devices"])

        attempt(("receipts_per_s",), receipt_events)

    from bench import gorush

    gorush.add_worker_side(figures)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about 3 minutes)")
    parser.add_argument("--only", nargs="*", choices=list(report.GOALS), help="run only these figures")
    parser.add_argument(
        "--keep",
        action="store_true",
        help=f"put the measured figures into {report.KEPT_FILE.name} (kept in the repository), with this run's commit and machine",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("cassandra", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING if noisy != "cassandra" else logging.ERROR)
    mode = "quick" if args.quick else "full"
    started = datetime.now(UTC)

    env.use_bench_stores()
    from notee.core.settings import Settings
    from notee.store.runtime import Runtime

    env.migrate(Settings())
    speed_before = report.speed_probe()
    with env.emulator() as emulator:
        runtime = Runtime(Settings())  # built after the emulator exported NOTEE_EMULATOR_URL
        try:
            figures = run_all(runtime, emulator, SIZES[mode], set(args.only) if args.only else None)
        finally:
            runtime.close()
    doc = report.write(mode, figures, started, speed=(speed_before, report.speed_probe()))
    print()
    print((report.RESULTS_DIR / "latest.md").read_text())
    print(f"written: {report.RESULTS_DIR / 'latest.json'}")
    if args.keep:
        print(f"kept: {report.keep(doc)} figure(s) in {report.KEPT_FILE}")
    return 0 if all(not f.get("missing") for f in doc["figures"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
