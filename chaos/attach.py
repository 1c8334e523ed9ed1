"""The chaos run against an operator's own deployment (``CHAOS_API_URLS`` set): nothing is started
here. The deployment's processes send to a ``notee emulator --realistic`` that writes its delivery
journal (started with ``NOTEE_EMULATOR_JOURNAL=<file>``, a file this host can read). The run makes
its own tenants through the admin API, drives the same workload, injects the faults it can reach
from outside (the emulator's storms, GOAWAY, latency, expiring access tokens, and the hostile
clients against the first URL), and checks the same ledger. Process kills, node and database
restarts are the operator's to inject meanwhile (their orchestrator's commands); the report lists
only what this run did, and a ``notee reconcile`` afterwards is theirs to run.

    CHAOS_API_URLS=https://notee-1:8080,https://notee-2:8080 CHAOS_ADMIN_TOKEN=... \\
    CHAOS_EMULATOR_URL=https://emulator:8443 CHAOS_EMULATOR_CA=ca.crt \\
    CHAOS_EMULATOR_JOURNAL=/var/lib/emulator/deliveries.jsonl CHAOS_MINUTES=30 python -m chaos
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from chaos import faults
from chaos.plan import make_plan
from chaos.record import Api, Recorder
from chaos.run import (
    REPLICAS,
    Options,
    check_and_report,
    dead_letters,
    drain,
    run_phase,
    setup_tenants,
    subscriber_counts,
    summaries,
)
from notee.emulator.control import attach

REACHABLE = frozenset({"storm", "goaway", "reset", "latency", "token_expiry", "hostile"})


def execute_attached(opts: Options, env: dict[str, str]) -> bool:
    urls = [u.strip().rstrip("/") for u in env["CHAOS_API_URLS"].split(",") if u.strip()]
    journal = Path(env["CHAOS_EMULATOR_JOURNAL"])
    logs = opts.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rec = Recorder(opts.out / "ledger.jsonl")
    rec.write("run", seed=opts.seed, minutes=opts.minutes, attached=urls)
    emu = attach(env["CHAOS_EMULATOR_URL"], env["CHAOS_EMULATOR_CA"])
    admin = Api(urls, rec, {"Authorization": f"Bearer {env['CHAOS_ADMIN_TOKEN']}"})
    tenants = setup_tenants(opts, admin, rec, None, emu)
    plan = [f for f in make_plan(opts.seed, opts.seconds, REPLICAS) if f.kind in REACHABLE]
    target = faults.Target({}, None, None, emu, rec, hostile_url=urls[0])
    started = run_phase(opts, target, tenants, plan)
    drain(opts, {t.service: t.api for t in tenants}, rec, journal)
    dead_letters(tenants, rec)
    summaries(tenants, rec)
    subscriber_counts(tenants, rec, "before reconcile")  # the reconcile is the operator's: drift measured only
    ended = time.time()
    rec.close()
    return check_and_report(opts, started, ended, logs, journal)


def attached() -> bool:
    return bool(os.environ.get("CHAOS_API_URLS"))
