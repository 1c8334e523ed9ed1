"""Receipts (docs/ENGAGEMENT.md): ``receipts_per_s``.

A ``notee api`` process (rate limits off, like ``subscribe_ratio``) takes ``POST /v1/receipts`` with a
client key, batches of 100 events, from ``concurrency`` keep-alive connections: a `delivered` for
every device of one notification source of ``devices`` devices and an `opened` for 30 % of them
(every event new: each is stored and counted). The figure is events/s accepted over the whole
span; side figures: the API process's CPU per event (psutil, user + system; goal <= 0.2 ms), the CPU
per event of the load generator and of the shared Cassandra and MariaDB over the run (with the load
average: they serve the whole machine), and the time to read the source's aggregates
(``GET /v1/stats/jobs/{id}``, median of 20 reads; goal < 200 ms).

The source is a finished topic job (its rows written straight to MySQL: no push is sent). Side
figure ``raw_count_read_ms``: the same aggregates counted from the job's raw rows, what a rollup
job would read instead of the counters (docs/ENGAGEMENT.md, "Counters or a rollup job")."""

from __future__ import annotations

import http.client
import json
import os
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench.report import Measure, figure
from bench.subscribe import ApiProcess, _split
from bench.tenant import make_tenant

BATCH = 100


def _source(runtime, service: str, devices: int) -> tuple[str, str]:
    """A finished topic job of ``devices`` devices (all sent: its one task row says so), its id, and
    a client key of the service. No push is sent: the figure is the receipts' path."""
    from sqlalchemy import text

    from notee.domain import services
    from notee.store import jobs_sql

    job_id = str(uuid.uuid4())
    job = jobs_sql.NewJob(
        job_id=job_id,
        service=service,
        notification_key=str(uuid.uuid4()),
        method="TOPIC",
        type_="bench",
        target_kind="TOPIC",
        target={"topic": "receipts"},
        idempotency_key=None,
        request_hash="bench",
        variables=None,
        overrides=None,
        payload={"title": "t", "body": "b"},
        slot_ranges=[(0, 0)],
    )
    with runtime.sessions.begin() as session:
        jobs_sql.insert_job(session, job)
        session.execute(
            text("UPDATE fanout_task SET state = 'done', targeted = :n, sent = :n WHERE job_id = :j"),
            {"n": devices, "j": job_id},
        )
        session.execute(text("UPDATE fanout_job SET state = 'done' WHERE job_id = :j"), {"j": job_id})
        key = services.create_api_key(session, service, label="bench app", kind="client").api_key
    return job_id, key


def _bodies(job_id: str, devices: int) -> list[bytes]:
    from notee.core import notification_id

    source = notification_id.source_of_job(job_id)
    at = datetime.now(UTC).isoformat()
    events = []
    for i in range(devices):
        nid = notification_id.make(source, f"bench-receipt-{i:09d}")
        events.append({"notification_id": nid, "event": "delivered", "at": at})
        if i % 10 < 3:
            events.append({"notification_id": nid, "event": "opened", "at": at})
    return [
        json.dumps({"events": events[i : i + BATCH]}, separators=(",", ":")).encode()
        for i in range(0, len(events), BATCH)
    ]


def _drive(port: int, key: str, bodies: list[bytes], concurrency: int) -> int:
    """POST every body; the events accepted (a batch answered otherwise fails the run)."""
    accepted = [0]
    failures: list[str] = []
    lock = threading.Lock()

    def work(chunk: list[bytes]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        for body in chunk:
            conn.request("POST", "/v1/receipts", body=body, headers=headers)
            r = conn.getresponse()
            answer = r.read()
            with lock:
                if r.status != 200:
                    failures.append(f"{r.status} {answer[:200]!r}")
                else:
                    accepted[0] += json.loads(answer)["accepted"]
        conn.close()

    threads = [threading.Thread(target=work, args=(c,)) for c in _split(bodies, concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise AssertionError(f"{len(failures)} batches failed, first: {failures[0]}")
    return accepted[0]


def _rollup_ms(runtime, service: str, job_id: str, reads: int = 5) -> float:
    """What a rollup would read instead of counters: every raw event of the job counted (its 32
    partitions at once; ``Statements.raw_counts``), median ms."""
    from notee.core import notification_id

    times = []
    for _ in range(reads):
        t0 = time.perf_counter()
        runtime.statements.raw_counts(service, notification_id.source_of_job(job_id))
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _read_ms(port: int, api_key: str, source: str, reads: int = 20) -> tuple[float, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times, answer = [], {}
    for _ in range(reads):
        t0 = time.perf_counter()
        conn.request("GET", f"/v1/stats/jobs/{source}", headers={"Authorization": f"Bearer {api_key}"})
        r = conn.getresponse()
        answer = json.loads(r.read())
        times.append((time.perf_counter() - t0) * 1000)
        if r.status != 200:
            raise AssertionError(f"stats: {r.status} {answer}")
    conn.close()
    return statistics.median(times), answer


def _server_cpu_s(port: int) -> float | None:
    """CPU seconds (user + system) of the local process listening on ``port`` (Cassandra's JVM,
    MariaDB), None when there is none here. These servers are shared by the machine: their CPU over a
    run is this run's and whatever else used them meanwhile (the load is given beside it)."""
    import psutil

    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            t = psutil.Process(c.pid).cpu_times()
            return float(t.user + t.system)
    return None


def _servers_cpu(runtime) -> dict[str, float | None]:
    from sqlalchemy.engine import make_url

    mysql_port = make_url(runtime.settings.mysql_url.get_secret_value()).port or 3306
    return {"cassandra": _server_cpu_s(runtime.settings.cassandra_port), "mariadb": _server_cpu_s(mysql_port)}


def run(runtime, *, devices: int, concurrency: int = 4) -> dict[str, Any]:
    """receipts_per_s: receipt events/s one API process accepts, in batches of 100."""
    tenant = make_tenant(runtime)
    source, client_key = _source(runtime, tenant.service, devices)
    warm_source, _ = _source(runtime, tenant.service, 2_000)
    bodies = _bodies(source, devices)
    api = ApiProcess()
    try:
        _drive(api.port, client_key, _bodies(warm_source, 2_000), concurrency)  # imports, pools, caches
        load = os.getloadavg()[0]
        servers0, client0 = _servers_cpu(runtime), time.process_time()
        cpu0, t0 = api.cpu_s(), time.perf_counter()
        accepted = _drive(api.port, client_key, bodies, concurrency)
        wall, cpu = time.perf_counter() - t0, api.cpu_s() - cpu0
        client_cpu, servers1 = time.process_time() - client0, _servers_cpu(runtime)
        load = max(load, os.getloadavg()[0])
        read_ms, answer = _read_ms(api.port, tenant.api_key, source)
        rollup_ms = _rollup_ms(runtime, tenant.service, source)
    finally:
        api.stop()
    events = sum(len(json.loads(b)["events"]) for b in bodies)
    if accepted != events or answer["counts"]["delivered"] != devices:
        raise AssertionError(f"accepted {accepted} of {events}; counts {answer['counts']}")
    rate = accepted / wall
    return figure(
        "receipts_per_s",
        Measure("POST /v1/receipts, batches of 100, one API process", rate, "events/s"),
        Measure("events per run", events, "events"),
        {"devices": devices, "events": events, "batch": BATCH, "concurrency": concurrency},
        value=rate,
        extra={
            "api_cpu_ms_per_event": cpu / accepted * 1000,
            "api_cpu_goal_ms": 0.2,
            # Where the rest of the machine's CPU went, per event: the load generator (this process's
            # threads posting the batches) and the two shared servers (their CPU over the run, whoever
            # caused it: read beside ``load``).
            "client_cpu_ms_per_event": client_cpu / accepted * 1000,
            **{
                f"{name}_cpu_ms_per_event": (servers1[name] - before) / accepted * 1000
                for name, before in servers0.items()
                if before is not None and servers1[name] is not None
            },
            "load": load,
            "aggregate_read_ms": read_ms,
            "aggregate_read_goal_ms": 200,
            "raw_count_read_ms": rollup_ms,  # the rollup alternative: counting the job's raw rows
        },
    )
