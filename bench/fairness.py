"""fairness_p99_s: how long a small tenant waits while another tenant's large publish runs.

Tenant A has ``devices`` topic subscribers (seeded straight into Cassandra), tenant B one. One
``notee worker`` process serving both tenants (``lanes`` lanes and, by default, the spare lane, as
``make bench`` runs it) and one ``notee api`` run. A's publish goes through the API; then, every ``interval_s`` until A's job is
done, B publishes to its one-subscriber topic through the API (``POST /v1/topics/{type}/{topic}/publish``).

B's latency is publish API call (clock started just before the request) → the emulator accepted
B's push: a poller thread reads the emulator's delivery counter of B's one token
(``GET /_emu/deliveries``) every ``POLL_S``, and the k-th time the counter grows is B's k-th
acknowledgement (the k-th acknowledgement is matched with the k-th publish; resolution: the poll
interval plus one emulator request). The figure is the p99 of those latencies (nearest rank: with
fewer than 100 samples it is the largest). Not a ratio: the value is the numerator (seconds); the
denominator is the number of B publishes it covers. Side figures: p50, max, A's pushes/s during
the run and how many times the worker's tasks yielded their lane.
"""

from __future__ import annotations

import http.client
import json
import math
import statistics
import threading
import time
import uuid
from typing import Any

from sqlalchemy import text

from bench.fanout import WorkerProcess
from bench.report import Measure, figure, missing
from bench.seed import fcm_like_token, insert_topic_rows, set_no_counter, topic_rows
from bench.tenant import make_template, make_tenant

TYPE_A = "bench_fair_a"
TYPE_B = "bench_fair_b"
POLL_S = 0.01


def _publish(port: int, api_key: str, type_: str, topic: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps({}).encode()
        conn.request(
            "POST",
            f"/v1/topics/{type_}/{topic}/publish",
            body=body,
            headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
        )
        r = conn.getresponse()
        answer = r.read()
        if r.status != 202:
            raise RuntimeError(f"publish answered {r.status}: {answer[:300]!r}")
        return str(json.loads(answer)["job_id"])
    finally:
        conn.close()


def _job_state(runtime, job_id: str) -> str:
    with runtime.engine.connect() as conn:
        return str(conn.execute(text("SELECT state FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar())


class _AckPoller:
    """Records the time each new acknowledgement of one token shows in the emulator's counter."""

    def __init__(self, emulator, token: str) -> None:
        from bench.env import attach

        self.control = attach(emulator.url, emulator.ca_file)  # its own connection, for its own thread
        self.token = token
        self.acks: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        seen = 0
        while not self.stop.is_set():
            count = int(self.control.deliveries(self.token)["fcm"])
            now = time.perf_counter()
            while seen < count:  # two acks within one poll get the same time (the later one's)
                self.acks.append(now)
                seen += 1
            time.sleep(POLL_S)

    def __enter__(self) -> _AckPoller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.control.http.close()


def _nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def run(
    runtime,
    emulator,
    *,
    devices: int,
    lanes: int = 2,
    interval_s: float = 1.0,
    timeout: float = 900.0,
) -> dict[str, Any]:
    from bench.subscribe import ApiProcess

    a, b = make_tenant(runtime), make_tenant(runtime)
    key_a = make_template(runtime, a.service, "TOPIC", TYPE_A)
    key_b = make_template(runtime, b.service, "TOPIC", TYPE_B)
    topic_a, topic_b = "fair-a-" + uuid.uuid4().hex[:8], "fair-b-" + uuid.uuid4().hex[:8]
    ks = runtime.keyspaces
    insert_topic_rows(runtime.cql, ks.notification, topic_rows(key_a, topic_a, devices))
    set_no_counter(runtime.cql, ks.numbering, a.service, "TOPIC", TYPE_A, devices)
    # B's one device: a token no A row has (A's tokens are fcm_like_token(1..devices)).
    token_b = fcm_like_token(10**9 + int(uuid.uuid4().int % 10**8))
    insert_topic_rows(
        runtime.cql,
        ks.notification,
        [(0, key_b, topic_b, 1, token_b, "AOS", str(uuid.uuid4()), 1_700_000_000_000)],
    )
    set_no_counter(runtime.cql, ks.numbering, b.service, "TOPIC", TYPE_B, 1)

    api = ApiProcess()
    worker = WorkerProcess([a.service, b.service], lanes)
    sent_at: list[float] = []
    try:
        worker.wait_ready()
        emulator.reset()
        with _AckPoller(emulator, token_b) as poller:
            t_a = time.perf_counter()
            job_a = _publish(api.port, a.api_key, TYPE_A, topic_a)
            deadline = t_a + timeout
            next_b = time.perf_counter()
            a_done_at = None
            while a_done_at is None:
                now = time.perf_counter()
                if now >= next_b:
                    sent_at.append(time.perf_counter())
                    _publish(api.port, b.api_key, TYPE_B, topic_b)
                    next_b += interval_s
                if _job_state(runtime, job_a) in ("done", "failed"):
                    a_done_at = time.perf_counter()
                    break
                if now > deadline:
                    raise TimeoutError(f"A's publish not done after {timeout:.0f} s; worker log: {worker.tail()}")
                if worker.proc.poll() is not None:
                    raise RuntimeError(f"worker died: {worker.tail()}")
                time.sleep(min(0.05, max(0.0, next_b - time.perf_counter())))
            wait_b = time.monotonic() + 60
            while len(poller.acks) < len(sent_at) and time.monotonic() < wait_b:
                time.sleep(0.05)
            acks = list(poller.acks)
        a_state = _job_state(runtime, job_a)
        a_pushes = emulator.delivered() - len(acks)
    finally:
        worker.stop()
        api.stop()
    if not sent_at:
        return missing("A's publish ended before B published once")
    latencies = [ack - sent for ack, sent in zip(acks, sent_at, strict=False)]
    if len(acks) < len(sent_at):
        seen = (
            f"; the acknowledged ones: p50 {statistics.median(latencies):.1f} s, max {max(latencies):.1f} s"
            if latencies
            else ""
        )
        return missing(
            f"only {len(acks)} of B's {len(sent_at)} pushes were acknowledged within 60 s of A's end"
            f" (A: {devices} devices in {a_done_at - t_a:.0f} s){seen}"
        )
    p99 = _nearest_rank(latencies, 99)
    yields = worker.log.read_text(errors="replace").count("yielded its lane")
    return figure(
        "fairness_p99_s",
        Measure("B publish -> acknowledged, p99", p99, "s"),
        Measure("B publishes", len(latencies), "publishes"),
        {
            "a_devices": devices,
            "b_devices": 1,
            "worker_processes": 1,
            "lanes": lanes,
            "spare_lane": runtime.settings.fanout_spare_lane,
            "b_interval_s": interval_s,
        },
        value=p99,
        extra={
            "b_p50_s": statistics.median(latencies),
            "b_max_s": max(latencies),
            "a_state": a_state,
            "a_elapsed_s": (a_done_at or time.perf_counter()) - t_a,
            "a_pushes_per_s": a_pushes / ((a_done_at or time.perf_counter()) - t_a),
            "yields": yields,
        },
    )
