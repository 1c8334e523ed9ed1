"""condition_publish_ratio and segment_publish_ratio: a publish to a condition, and to a filter, against
a topic publish reaching as many devices, in the same run, on the same idle ``notee worker`` (issue 30).

* condition_publish_ratio: topics A and B of ``devices`` subscribers each (seeded straight into
  ``topic_notification`` with their occupancy, as subscribe writes them), half of B's devices also
  in A. ``'A' in topics && !('B' in topics)`` walks A, keeps the half of its rows not in B (B's
  members loaded into the worker's memory first) and sends those. The reference is a plain publish
  to topic A. Value: condition pushes/s / topic pushes/s (goal >= 0.8), each from the publish call
  to the job's end.
* segment_publish_ratio: the audience population of ``users`` users (bench/audience_data.py: three
  tags and one device each, one user in ten ``plan = pro``; kept in the bench database and loaded
  only when missing, so a run measures a service loaded a while before, not one still flushing its
  seed); a publish to the filter ``plan = pro`` (walked in MySQL) against a topic publish to a topic
  whose subscribers are the same ``matching`` devices. Value: filter pushes/s / topic pushes/s
  (goal >= 0.8); the worker's CPU per push of each side beside it.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from bench.fanout import WorkerProcess
from bench.report import Measure, figure, missing
from bench.seed import fcm_like_token, insert_topic_rows, set_no_counter
from bench.tenant import make_template, make_tenant, set_credentials

TYPE = "bench_audience"


def _rows(key: str, topic: str, tokens: list[str], users: list[str], start_no: int = 1) -> list[tuple]:
    from notee.core.vocabulary import SLOT_SIZE

    return [
        ((start_no + i) // SLOT_SIZE, key, topic, start_no + i, t, "AOS", u, 1_700_000_000_000 + i, "")
        for i, (t, u) in enumerate(zip(tokens, users, strict=True))
    ]


def _wait(runtime, worker: WorkerProcess, job_id: str, timeout: float) -> tuple[str, int]:
    deadline = time.perf_counter() + timeout
    while True:
        with runtime.engine.connect() as conn:
            state = conn.execute(text("SELECT state FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar()
            sent = conn.execute(
                text("SELECT COALESCE(SUM(sent), 0) FROM fanout_task WHERE job_id = :j"), {"j": job_id}
            ).scalar()
        if state in ("done", "failed", "expired", "cancelled"):
            return str(state), int(sent)
        if time.perf_counter() > deadline:
            raise TimeoutError(f"job {job_id} still {state} after {timeout:.0f} s ({sent} sent)")
        if worker.proc.poll() is not None:
            raise RuntimeError(f"worker died: {worker.tail()}")
        time.sleep(0.05)


def _timed(
    runtime, worker: WorkerProcess, service: str, targets: dict[str, Any], timeout: float, type_: str = TYPE
) -> dict[str, Any]:
    """One publish (``publish_to``, what the API calls) timed from the call to the job's end, with the
    worker's CPU (user + system) per push sent over that span."""
    from notee.usecases.audience_publish import Publish, publish_to

    cpu0 = worker.cpu_s()
    t0 = time.perf_counter()
    with runtime.sessions.begin() as session:  # the caller owns the commit
        job = publish_to(runtime, session, Publish(service=service, type_=type_, targets=targets)).job
    state, sent = _wait(runtime, worker, job.job_id, timeout)
    wall = time.perf_counter() - t0
    return {
        "state": state,
        "sent": sent,
        "wall_s": wall,
        "rate": sent / wall if wall > 0 else 0.0,
        "tasks": job.task_count,
        "cpu_us": 1e6 * (worker.cpu_s() - cpu0) / sent if sent else 0.0,
    }


def run_condition(runtime, emulator, *, devices: int, lanes: int = 2, timeout: float = 1800.0) -> dict[str, Any]:
    del emulator  # the worker's job counts are the measure (the emulator acknowledges every send)
    tenant = make_tenant(runtime)
    key = make_template(runtime, tenant.service, "TOPIC", TYPE)
    a_tokens = [fcm_like_token(i) for i in range(1, devices + 1)]
    half = devices // 2
    b_tokens = a_tokens[:half] + [fcm_like_token(10 * devices + i) for i in range(devices - half)]
    users = [str(uuid.uuid4()) for _ in range(2 * devices)]
    insert_topic_rows(runtime.cql, runtime.keyspaces.notification, _rows(key, "A", a_tokens, users[:devices]))
    rows_b = _rows(key, "B", b_tokens, users[devices:], start_no=devices + 1)
    insert_topic_rows(runtime.cql, runtime.keyspaces.notification, rows_b)
    set_no_counter(runtime.cql, runtime.keyspaces.numbering, tenant.service, "TOPIC", TYPE, 2 * devices)
    worker = WorkerProcess(tenant.service, lanes)
    try:
        worker.wait_ready()
        topic = _timed(runtime, worker, tenant.service, {"topic": "A"}, timeout)
        cond = _timed(runtime, worker, tenant.service, {"condition": "'A' in topics && !('B' in topics)"}, timeout)
    finally:
        worker.stop()
    for name, r, want in (("topic", topic, devices), ("condition", cond, devices - half)):
        if r["state"] != "done" or r["sent"] != want:
            return missing(f"{name} publish ended {r['state']} with {r['sent']} of {want} sent")
    return figure(
        "condition_publish_ratio",
        Measure("condition 'A' && !'B' publish, pushes/s", cond["rate"], "pushes/s"),
        Measure("topic A publish, pushes/s", topic["rate"], "pushes/s"),
        {"devices_per_topic": devices, "in_both": half, "lanes": lanes, "worker_processes": 1},
        extra={
            "condition_wall_s": cond["wall_s"],
            "condition_sent": cond["sent"],
            "topic_wall_s": topic["wall_s"],
            "topic_sent": topic["sent"],
            "condition_tasks": cond["tasks"],
            "topic_tasks": topic["tasks"],
        },
    )


def _seed_users(runtime, service: str, users: list[str], tokens: list[str], tagged: int) -> None:
    """``users`` with one AOS device each; the first ``tagged`` carry the tag plan = pro."""
    now = datetime.now(UTC).replace(tzinfo=None)
    with runtime.sessions.begin() as session:  # the caller owns the commit
        for i in range(0, len(users), 5000):
            chunk = range(i, min(i + 5000, len(users)))
            session.execute(
                text(
                    "INSERT INTO `user` (service, service_user_id, service_user_name, user_id, created_at, updated_at)"
                    " VALUES (:s, :su, '', :u, :t, :t)"
                ),
                [{"s": service, "su": f"b{j}", "u": users[j], "t": now} for j in chunk],
            )
            session.execute(
                text(
                    "INSERT INTO device (service, user_id, device_token, device_os, created_at, updated_at)"
                    " VALUES (:s, :u, :d, 'AOS', :t, :t)"
                ),
                [{"s": service, "u": users[j], "d": tokens[j], "t": now} for j in chunk],
            )
            tags = [{"s": service, "u": users[j], "t": now} for j in chunk if j < tagged]
            if tags:
                session.execute(
                    text(
                        "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, updated_at)"
                        " VALUES (:s, :u, 'plan', 's', 'pro', :t)"
                    ),
                    tags,
                )


def _population_rows(key: str, topic: str, n: int) -> list[tuple]:
    """The topic rows of the population's ``plan = pro`` users' devices (bench/audience_data.py: user
    ``i`` is pro when ``i % 10 == 0``, its device ``tok<i>``, IOS when ``i % 3 == 0``)."""
    from bench.audience_data import user_id_of
    from notee.core.vocabulary import SLOT_SIZE

    rows = []
    for no, i in enumerate(range(0, n, 10), start=1):
        os_ = "IOS" if i % 3 == 0 else "AOS"
        rows.append(
            (no // SLOT_SIZE, key, topic, no, f"tok{i:012d}", os_, user_id_of(i, n), 1_700_000_000_000 + no, "")
        )
    return rows


def run_segment(
    runtime, emulator, *, users: int, matching: int, lanes: int = 2, timeout: float = 1800.0
) -> dict[str, Any]:
    """The filter ``plan = pro`` over the audience population of ``users`` (bench/audience_data.py,
    kept in the bench database and loaded only when missing: one in ten users is pro), against a topic
    publish to the same devices (their rows seeded into a topic of a template made for this run)."""
    from bench.audience_data import load_users
    from notee.domain import filters  # noqa: F401  (the filter module: the figure is missing without it)

    del emulator
    if matching != users // 10:
        return missing(f"the population's filter matches one user in ten, not {matching} of {users}")
    population = load_users(runtime, users)
    service = population["service"]
    set_credentials(runtime, service)
    type_ = f"{TYPE}_{uuid.uuid4().hex[:8]}"  # a template (and topic rows) of this run's own
    key = make_template(runtime, service, "TOPIC", type_)
    insert_topic_rows(runtime.cql, runtime.keyspaces.notification, _population_rows(key, "pro", users))
    set_no_counter(runtime.cql, runtime.keyspaces.numbering, service, "TOPIC", type_, matching)
    worker = WorkerProcess(service, lanes)
    try:
        worker.wait_ready()
        topic = _timed(runtime, worker, service, {"topic": "pro"}, timeout, type_)
        pro = [[{"tag": "plan", "op": "=", "value": "pro"}]]
        filtered = _timed(runtime, worker, service, {"filter": pro}, timeout, type_)
    finally:
        worker.stop()
    for name, r in (("topic", topic), ("filter", filtered)):
        if r["state"] != "done" or r["sent"] != matching:
            return missing(f"{name} publish ended {r['state']} with {r['sent']} of {matching} sent")
    return figure(
        "segment_publish_ratio",
        Measure("filter plan = pro publish, pushes/s", filtered["rate"], "pushes/s"),
        Measure("topic publish to the same devices, pushes/s", topic["rate"], "pushes/s"),
        {"users": users, "matching": matching, "lanes": lanes, "worker_processes": 1},
        extra={
            "filter_wall_s": filtered["wall_s"],
            "topic_wall_s": topic["wall_s"],
            "filter_tasks": filtered["tasks"],
            "topic_tasks": topic["tasks"],
            "filter_worker_cpu_us_per_push": filtered["cpu_us"],
            "topic_worker_cpu_us_per_push": topic["cpu_us"],
            "population_loaded_s": population["load_s"],
        },
    )
