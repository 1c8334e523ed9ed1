"""personal_cpu_ratio: the worker CPU a push of a template that depends on the recipient costs, against
a plain publish of the same topic (issue 34: "measure the per-push CPU with recipient-dependent
templates and write it down beside the plain one").

One tenant, one TOPIC template, ``devices`` subscribers seeded straight into ``topic_notification``,
each with a MySQL user row of its own name and one of 24 time zones (``bench/local_time.py``'s) and
a device row. One
real ``notee worker --lanes 2`` process, idle between jobs. Then three publishes of the topic, each
until its job is done, their text given as overrides (rendered as a template's would be):

* plain: ``Hi {{ name }}, ...`` -- rendered once for the job, as every publish before issue 34;
* zone: ``... {{ at | datetime: "short" }}`` -- rendered per recipient, but the template reads only
  the recipient's zone and locale: one render per (zone, locale), the rest from the job's cache;
* personal: ``Hi {{ recipient.name }}, ... {{ at | datetime: "short" }}`` -- every recipient's name
  differs: one render per push (the worst case), plus the page's profile query.

A first plain publish warms the worker up (its connections, the engine's caches) and is not counted.

CPU is the worker process's user + system time (psutil) from the publish to the job's end, divided
by the pushes the job sent.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from bench.fanout import WorkerProcess, emulator_cpu_since, emulator_us, tree_cpu_s
from bench.local_time import ZONES, _cpu, _job
from bench.report import Measure, figure, missing
from bench.seed import insert_topic_rows, set_no_counter, topic_rows
from bench.tenant import make_template, make_tenant

TYPE = "bench_personal"
TEXTS = {
    "plain": ("Your order", "Hi {{ name }}, your order {{ order }} ships today."),
    "zone": ("Your order", "Hi {{ name }}, your order {{ order }} ships {{ at | datetime: 'short' }}."),
    "personal": (
        "Your order",
        "Hi {{ recipient.name | default: name }}, your order {{ order }} ships {{ at | datetime: 'short' }}.",
    ),
}


def _seed_users(runtime, service: str, topic_rows_: list[tuple]) -> None:
    """A MySQL user (its name and zone) and device row for every subscriber, as registering them
    writes: the worker's per-page profile query reads them."""
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = [
        {"s": service, "su": f"b{i}", "n": f"User {i}", "u": r[6], "tz": ZONES[i % len(ZONES)], "t": now}
        for i, r in enumerate(topic_rows_)
    ]
    devices = [{"s": service, "u": r[6], "tok": r[4], "os": r[5], "t": now} for r in topic_rows_]
    with runtime.sessions.begin() as session:  # the caller owns the commit
        for i in range(0, len(rows), 5000):
            session.execute(
                text(
                    "INSERT INTO `user` (service, service_user_id, service_user_name, user_id, timezone,"
                    " created_at, updated_at) VALUES (:s, :su, :n, :u, :tz, :t, :t)"
                ),
                rows[i : i + 5000],
            )
            session.execute(
                text(
                    "INSERT INTO device (service, user_id, device_token, device_os, created_at, updated_at)"
                    " VALUES (:s, :u, :tok, :os, :t, :t)"
                ),
                devices[i : i + 5000],
            )


def _one(
    runtime, worker: WorkerProcess, service: str, topic: str, kind: str, timeout: float, emulator_pid: int | None = None
) -> dict[str, Any]:
    from notee.usecases.job_requests import TopicPublish
    from notee.usecases.publish import publish_topic

    title, body = TEXTS[kind]
    variables = {"name": "there", "order": "A-1042", "at": "2026-12-05T09:30:00Z"}
    cpu0, wall0, own0 = _cpu(worker.pid), time.perf_counter(), time.process_time()
    emu0 = tree_cpu_s(emulator_pid)
    with runtime.sessions.begin() as session:  # the caller owns the commit
        job = publish_topic(
            runtime,
            session,
            TopicPublish(
                service=service,
                type_=TYPE,
                topic=topic,
                variables=variables,
                overrides={"title": title, "body": body},
            ),
        )
    publish_cpu = time.process_time() - own0
    deadline = wall0 + timeout
    while True:
        state, sent = _job(runtime, job.job_id)
        if state in ("done", "failed", "expired", "cancelled"):
            break
        if time.perf_counter() > deadline:
            raise TimeoutError(f"job {job.job_id} still {state} after {timeout:.0f} s ({sent} sent)")
        if worker.proc.poll() is not None:
            raise RuntimeError(f"worker died: {worker.tail()}")
        time.sleep(0.1)
    return {
        "state": state,
        "sent": sent,
        "worker_cpu_s": _cpu(worker.pid) - cpu0,
        "emulator_cpu_s": emulator_cpu_since(emulator_pid, emu0),
        "wall_s": time.perf_counter() - wall0,
        "publish_cpu_s": publish_cpu,
    }


def run(runtime, emulator, *, devices: int, lanes: int = 2, timeout: float = 1800.0) -> dict[str, Any]:
    tenant = make_tenant(runtime)
    key = make_template(runtime, tenant.service, "TOPIC", TYPE)
    topic = "bench-personal-" + uuid.uuid4().hex[:8]
    rows = list(topic_rows(key, topic, devices))
    insert_topic_rows(runtime.cql, runtime.keyspaces.notification, rows)
    set_no_counter(runtime.cql, runtime.keyspaces.numbering, tenant.service, "TOPIC", TYPE, devices)
    _seed_users(runtime, tenant.service, rows)
    worker = WorkerProcess(tenant.service, lanes)
    runs: dict[str, dict[str, Any]] = {}
    try:
        worker.wait_ready()
        _one(
            runtime, worker, tenant.service, topic, "plain", timeout, emulator.pid
        )  # warm-up (connections, caches): not counted
        for kind in TEXTS:
            runs[kind] = _one(runtime, worker, tenant.service, topic, kind, timeout, emulator.pid)
    finally:
        worker.stop()
    for kind, r in runs.items():
        if r["state"] != "done" or r["sent"] != devices:
            return missing(f"{kind} publish ended {r['state']} with {r['sent']} of {devices} sent")
    per_push = {kind: r["worker_cpu_s"] / r["sent"] * 1e6 for kind, r in runs.items()}
    return figure(
        "personal_cpu_ratio",
        Measure(
            "publish of a recipient-dependent template (recipient.name, datetime), worker CPU per push",
            per_push["personal"],
            "µs",
        ),
        Measure("plain publish, worker CPU per push", per_push["plain"], "µs"),
        {"devices": devices, "zones": len(ZONES), "lanes": lanes, "worker_processes": 1},
        extra={
            "plain_worker_us_per_push": per_push["plain"],
            "zone_worker_us_per_push": per_push["zone"],
            "personal_worker_us_per_push": per_push["personal"],
            "zone_per_plain": per_push["zone"] / per_push["plain"],
            **{f"{kind}_wall_s": r["wall_s"] for kind, r in runs.items()},
            # the emulator's own CPU per request beside the worker's (issue 35); None: not measured
            "emulator_cpu_us_per_request": emulator_us(runs["personal"], "sent"),
            "plain_emulator_cpu_us_per_request": emulator_us(runs["plain"], "sent"),
            **{f"{kind}_publish_cpu_ms": r["publish_cpu_s"] * 1e3 for kind, r in runs.items()},
        },
    )
