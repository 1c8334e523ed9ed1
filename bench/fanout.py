"""fanout_ratio and worker_rss_growth: one topic publish, end to end, through a real ``notee worker``.

The recipients are seeded straight into ``topic_notification`` (and the ``no`` counter set), the
worker process is started and idle, the emulator's counts are reset; then the clock starts, the
publish is created with ``notee.usecases.publish.publish_topic`` (what the publish API calls) and the
clock stops when the emulator has acknowledged every device. While it runs the worker's resident
memory is sampled; "after its first page" is the first sample once a task has checkpointed a page.
The worker process's CPU (every thread) from just before the publish to its job done, per push, is
the side figure ``worker_cpu_us_per_push`` (FCM: the seeded devices are Android);
``worker_cpu_us_per_push_steady`` is the same from the first checkpointed page on (without the
one-time work of a fresh worker: provider credentials, the first connections). Right after it the
same worker sends a publish to ``devices // APNS_SHARE`` iOS devices (the emulator's APNs port),
whose CPU per push is ``worker_cpu_us_per_push_apns`` (not part of either figure's ratio). Beside
them, the emulator's own CPU (its process and granian worker) per acknowledged push over each
publish: ``emulator_cpu_us_per_request`` and ``_apns`` (issue 35; absent when the bench attached
to an emulator it did not start).

The ceiling is the smaller of the two bare ceilings, in pushes/s: the raw driver's paged read of the
publish's own partitions (as in slot_walk) and the bare h2 client's wall-clock rate (as in send_cpu).
Both are measured right around the publish (raw walk and bare send just before it, bare send again
just after it; the two sends are averaged), because on a shared machine a ceiling measured minutes
earlier can be far off. One worker process (the ceilings are one process each; the machine has 2
cores, one of them busy with the emulator).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.env import stop_process
from bench.report import Measure, figure, missing
from bench.seed import apns_like_token, insert_topic_rows, set_no_counter, topic_rows
from bench.tenant import add_apns_credentials, make_template, make_tenant

TYPE = "bench_topic"
APNS_SHARE = 5  # the APNs publish after the measured one: devices // APNS_SHARE iOS devices


class WorkerProcess:
    """``notee worker --service S [--service T ...]`` as a subprocess; stopped with SIGTERM by its pid."""

    def __init__(self, service: str | list[str], lanes: int = 2) -> None:
        self.log = Path(tempfile.mkstemp(prefix="notee-bench-worker-", suffix=".log")[1])
        self._out = self.log.open("wb")
        scope = [a for s in ([service] if isinstance(service, str) else service) for a in ("--service", s)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "notee", "worker", "--lanes", str(lanes), *scope],
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the worker logged its start line (its Runtime is built lazily on first claim, so give
        the first claim a moment too)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log.read_text()[-2000:]}")
            if "lanes" in self.log.read_text(errors="replace"):
                time.sleep(1.0)
                return
            time.sleep(0.1)
        raise RuntimeError(f"worker did not start within {timeout:.0f} s")

    def rss(self) -> int:
        import psutil

        return psutil.Process(self.pid).memory_info().rss

    def cpu_s(self) -> float:
        """CPU seconds (user + system, every thread) the worker process has used so far."""
        import psutil

        t = psutil.Process(self.pid).cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        stop_process(self.proc, 30)
        self._out.close()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-1500:]


def _pages(runtime, job_id: str) -> int:
    with runtime.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT COALESCE(SUM(pages), 0) FROM fanout_task WHERE job_id = :j"), {"j": job_id}
            ).scalar()
        )


def _job_state(runtime, job_id: str) -> str:
    with runtime.engine.connect() as conn:
        return conn.execute(text("SELECT state FROM fanout_job WHERE job_id = :j"), {"j": job_id}).scalar()


def publish_now(runtime, service: str, type_: str, topic: str) -> str:
    """A plain topic publish made as the publish API makes it (``publish_topic``, committed here):
    its job id."""
    from notee.usecases.job_requests import TopicPublish
    from notee.usecases.publish import publish_topic

    with runtime.sessions.begin() as session:  # the caller owns the commit
        job = publish_topic(runtime, session, TopicPublish(service=service, type_=type_, topic=topic))
    return job.job_id


def publish_and_wait(runtime, emulator, worker: WorkerProcess, *, start, expect: int, timeout: float) -> dict[str, Any]:
    """Start the clock, call ``start()`` (creates the job(s), returns their ids), then sample until the
    emulator acknowledged ``expect`` pushes. Returns seconds, RSS samples and job ids."""
    emulator.reset()
    cpu0, emu0 = worker.cpu_s(), tree_cpu_s(emulator.pid)
    t0 = time.perf_counter()
    job_ids = start()
    t_created = time.perf_counter()
    rss_first = None
    first_page: tuple[float, int] | None = None
    rss_max = 0
    delivered = 0
    samples: list[tuple[int, int]] = []  # (acknowledged so far, worker RSS)
    deadline = t0 + timeout
    while True:
        delivered = emulator.delivered()
        now = time.perf_counter()
        rss = worker.rss()
        rss_max = max(rss_max, rss)
        samples.append((delivered, rss))
        if rss_first is None and any(_pages(runtime, j) >= 1 for j in job_ids):
            rss_first = rss
            first_page = (worker.cpu_s(), delivered)  # after the one-time work (credentials, connections)
        if delivered >= expect:
            break
        if now > deadline:
            raise TimeoutError(
                f"{delivered} of {expect} pushes acknowledged after {timeout:.0f} s; worker log: {worker.tail()}"
            )
        if worker.proc.poll() is not None:
            raise RuntimeError(f"worker died: {worker.tail()}")
        time.sleep(0.05)
    elapsed = now - t0
    # The end of the publish: every task checkpointed and the job finished.
    end = time.monotonic() + 30
    while time.monotonic() < end and any(_job_state(runtime, j) not in ("done", "failed") for j in job_ids):
        time.sleep(0.05)
    rss_end = worker.rss()
    cpu_end, emu_end = worker.cpu_s(), tree_cpu_s(emulator.pid)
    return {
        "elapsed_s": elapsed,
        # the whole publish as the worker sees it: claim, reads, sends, checkpoints, job done
        "worker_cpu_s": cpu_end - cpu0,
        # the emulator's (with its granian worker) over the same span: what each answer costs it
        "emulator_cpu_s": None if emu0 is None or emu_end is None else emu_end - emu0,
        # the same from the first checkpointed page on: (CPU s, pushes acknowledged meanwhile)
        "worker_cpu_steady": (cpu_end - first_page[0], delivered - first_page[1]) if first_page else None,
        "create_s": t_created - t0,
        "delivered": delivered,
        "rss_first": rss_first,
        "rss_end": rss_end,
        "rss_max": max(rss_max, rss_end),
        "jobs": job_ids,
        "rss_by_quarter": [next((r for d, r in samples if d >= q * expect / 4), rss_end) for q in (1, 2, 3, 4)],
        "states": [_job_state(runtime, j) for j in job_ids],
    }


def bracket_ceilings(runtime, emulator, key: str, topic: str, devices: int, send_n: int) -> dict[str, Any]:
    """Raw walk of the publish's partitions and a bare send, just before the publish."""
    from bench import send_cpu, slot_walk

    t = time.perf_counter()
    n = slot_walk.raw_walk(
        runtime.cql, runtime.keyspaces.notification, key, topic, devices // 30_000, runtime.settings.fanout_fetch_size
    )
    walk = n / (time.perf_counter() - t)
    r = send_cpu.in_child(send_cpu.bare_side, emulator.url, emulator.ca_file, send_n)
    return {"slot_walk_raw": walk, "bare_send_before": r["n"] / r["wall_s"]}


def run(
    runtime,
    emulator,
    *,
    devices: int,
    ceilings: dict[str, float] | None = None,
    lanes: int = 2,
    bare_send_n: int = 3000,
    timeout: float = 600.0,
) -> dict[str, dict[str, Any]]:
    """Both figures from one publish of ``devices`` recipients. ``ceilings`` (pushes/s) replaces the
    measured bracket (tests); None measures it around the publish."""
    from bench import send_cpu, workload

    tenant = make_tenant(runtime)
    add_apns_credentials(runtime, tenant.service, workload.APNS_TOPIC)  # before the worker starts
    key = make_template(runtime, tenant.service, "TOPIC", TYPE)
    topic = "bench-" + uuid.uuid4().hex[:8]
    insert_topic_rows(runtime.cql, runtime.keyspaces.notification, topic_rows(key, topic, devices))
    set_no_counter(runtime.cql, runtime.keyspaces.numbering, tenant.service, "TOPIC", TYPE, devices)
    ios = max(devices // APNS_SHARE, 1)
    insert_topic_rows(
        runtime.cql,
        runtime.keyspaces.notification,
        topic_rows(key, topic + "-ios", ios, start_no=devices + 1, ios_every=1, token_of=apns_like_token),
    )

    def start() -> list[str]:
        return [publish_now(runtime, tenant.service, TYPE, topic)]

    def start_apns() -> list[str]:
        return [publish_now(runtime, tenant.service, TYPE, topic + "-ios")]

    worker = WorkerProcess(tenant.service, lanes)
    try:
        worker.wait_ready()
        bracket = (
            None if ceilings is not None else bracket_ceilings(runtime, emulator, key, topic, devices, bare_send_n)
        )
        r = publish_and_wait(runtime, emulator, worker, start=start, expect=devices, timeout=timeout)
        # Not part of either figure: the same worker's CPU per push for APNs, from a smaller publish
        # to iOS devices (the emulator's APNs port), measured after the FCM one.
        set_no_counter(runtime.cql, runtime.keyspaces.numbering, tenant.service, "TOPIC", TYPE, devices + ios)
        r_apns = publish_and_wait(runtime, emulator, worker, start=start_apns, expect=ios, timeout=timeout)
    finally:
        worker.stop()
    extra_ceilings: dict[str, float] = {}
    if bracket is not None:
        after = send_cpu.in_child(send_cpu.bare_side, emulator.url, emulator.ca_file, bare_send_n)
        bracket["bare_send_after"] = after["n"] / after["wall_s"]
        ceilings = {
            "slot_walk_raw": bracket["slot_walk_raw"],
            "bare_send": (bracket["bare_send_before"] + bracket["bare_send_after"]) / 2,
        }
        extra_ceilings = {
            "bare_send_before": bracket["bare_send_before"],
            "bare_send_after": bracket["bare_send_after"],
        }
    rate = r["delivered"] / r["elapsed_s"]
    sizes = {
        "devices": devices,
        "slots": devices // 30_000 + 1,
        "worker_processes": 1,
        "lanes": lanes,
        "fetch_size": runtime.settings.fanout_fetch_size,
    }
    out: dict[str, dict[str, Any]] = {}
    usable = {k: v for k, v in ceilings.items() if v and v > 0}
    if usable:
        name, ceiling = min(usable.items(), key=lambda kv: kv[1])
        out["fanout_ratio"] = figure(
            "fanout_ratio",
            Measure("publish end to end", rate, "pushes/s"),
            Measure(f"min ceiling ({name})", ceiling, "pushes/s"),
            sizes,
            extra={
                "elapsed_s": r["elapsed_s"],
                "job_create_s": r["create_s"],
                "job_state": r["states"][0],
                # the worker process's CPU per push, absolute (issue 19: the whole worker <= 50 us)
                "worker_cpu_us_per_push": r["worker_cpu_s"] / max(r["delivered"], 1) * 1e6,
                # the same after the first checkpointed page (without the worker's one-time setup)
                **(
                    {"worker_cpu_us_per_push_steady": r["worker_cpu_steady"][0] / r["worker_cpu_steady"][1] * 1e6}
                    if r["worker_cpu_steady"] and r["worker_cpu_steady"][1] > 0
                    else {}
                ),
                # APNs: the same worker, a publish to devices // APNS_SHARE iOS devices right after
                "worker_cpu_us_per_push_apns": r_apns["worker_cpu_s"] / max(r_apns["delivered"], 1) * 1e6,
                "apns_devices": ios,
                # the emulator's own CPU per request beside the worker's (issue 35): FCM, then APNs
                **_emulator_us(r, "emulator_cpu_us_per_request"),
                **_emulator_us(r_apns, "emulator_cpu_us_per_request_apns"),
                "apns_job_state": r_apns["states"][0],
                **{f"ceiling_{k}": v for k, v in {**usable, **extra_ceilings}.items()},
            },
        )
    else:
        out["fanout_ratio"] = missing(f"publish ran at {rate:.0f} pushes/s but no ceiling was measured in this run")
    if r["rss_first"]:
        out["worker_rss_growth"] = figure(
            "worker_rss_growth",
            Measure("worker RSS at end", r["rss_end"] / 2**20, "MiB"),
            Measure("worker RSS after first page", r["rss_first"] / 2**20, "MiB"),
            sizes,
            extra={
                "rss_peak_mib": r["rss_max"] / 2**20,
                # RSS when 25/50/75/100 % of the devices were acknowledged: flat, a step, or a slope?
                "rss_mib_at_quarters": [round(x / 2**20, 1) for x in r["rss_by_quarter"]],
            },
        )
    else:
        out["worker_rss_growth"] = missing("no sample was taken between the first checkpointed page and the end")
    return out


def _emulator_us(r: dict[str, Any], name: str) -> dict[str, float]:
    """``{name: µs of emulator CPU per acknowledged push}`` when the emulator's CPU was read."""
    if r.get("emulator_cpu_s") is None or not r["delivered"]:
        return {}
    return {name: r["emulator_cpu_s"] / r["delivered"] * 1e6}


def emulator_cpu_since(pid: int | None, before: float | None) -> float | None:
    """The emulator's CPU seconds since ``before`` (``tree_cpu_s``), None if either is unknown."""
    now = tree_cpu_s(pid)
    return None if now is None or before is None else now - before


def emulator_us(r: dict[str, Any], sent_key: str) -> float | None:
    """µs of emulator CPU per request over a run (``emulator_cpu_s`` / ``r[sent_key]``), or None."""
    cpu, sent = r.get("emulator_cpu_s"), r.get(sent_key)
    return None if cpu is None or not sent else cpu / sent * 1e6


def tree_cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) of a process and its children (the emulator and its granian
    worker); None without a pid (an emulator the bench attached to) or once it is gone."""
    import psutil

    if not pid:
        return None
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    total = 0.0
    for q in procs:
        try:
            t = q.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


# --------------------------------------------------------------------------------------------------
# fanout_scaling: the same publish with one and with two worker processes


def _listener_pid(port: int) -> int | None:
    """The process listening on a local TCP port (the shared Cassandra / MariaDB), to read its CPU."""
    import psutil

    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return int(c.pid)
    except (psutil.AccessDenied, OSError):
        return None
    return None


class CpuMeter:
    """CPU seconds of named processes (with their children: the emulator's granian workers) and of the
    whole machine between ``start()`` and ``stop()``, as cores used over the wall time. The stores are
    shared with other work on this machine: their CPU includes it, and ``machine`` shows all of it."""

    def __init__(self, pids: dict[str, int], alone: tuple[str, ...] = ()) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self.alone = set(alone)  # counted without their children (the bench: its children are the workers)

    def _tree(self, name: str) -> float:
        import psutil

        try:
            p = psutil.Process(self.pids[name])
            procs = [p] if name in self.alone else [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for q in procs:
            try:
                t = q.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def start(self) -> None:
        import psutil

        self.t0 = time.perf_counter()
        self.cpu0 = {name: self._tree(name) for name in self.pids}
        m = psutil.cpu_times()
        self.machine0 = (
            m.user + m.system + getattr(m, "nice", 0.0) + getattr(m, "irq", 0.0) + getattr(m, "softirq", 0.0)
        )

    def stop(self) -> dict[str, float]:
        import psutil

        wall = time.perf_counter() - self.t0
        out = {name: round((self._tree(name) - self.cpu0[name]) / wall, 2) for name in self.pids}
        m = psutil.cpu_times()
        busy = m.user + m.system + getattr(m, "nice", 0.0) + getattr(m, "irq", 0.0) + getattr(m, "softirq", 0.0)
        out["machine"] = round((busy - self.machine0) / wall, 2)
        return out


def run_scaling(
    runtime,
    emulator,
    *,
    devices: int,
    processes: tuple[int, ...] = (1, 2, 2, 1),
    lanes: int = 2,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """fanout_scaling: one topic of ``devices`` recipients published once per entry of ``processes``
    (1, 2, 2, 1: each side twice, in an order that cancels a drifting machine load), each time with
    that many ``notee worker`` processes started and idle first. pushes/s = devices / (publish ->
    last acknowledgement); each side's median; value = two workers' / one worker's. CPU of every
    process involved during each publish, in cores, is in ``extra``."""
    import os
    import statistics

    tenant = make_tenant(runtime)
    key = make_template(runtime, tenant.service, "TOPIC", TYPE)
    topic = "scale-" + uuid.uuid4().hex[:8]
    insert_topic_rows(runtime.cql, runtime.keyspaces.notification, topic_rows(key, topic, devices))
    set_no_counter(runtime.cql, runtime.keyspaces.numbering, tenant.service, "TOPIC", TYPE, devices)
    stores = {
        "cassandra": _listener_pid(runtime.settings.cassandra_port),
        "mariadb": _listener_pid(runtime.engine.url.port or 3306),
    }
    rates: dict[int, list[float]] = {}
    runs: list[dict[str, Any]] = []
    for n in processes:
        workers = [WorkerProcess(tenant.service, lanes) for _ in range(n)]
        try:
            for w in workers:
                w.wait_ready()
            meter = CpuMeter(
                {
                    **{f"worker_{i}": w.pid for i, w in enumerate(workers)},
                    "emulator": emulator.pid,
                    **stores,
                    "bench": os.getpid(),
                },
                alone=("bench",),
            )
            emulator.reset()
            meter.start()
            t0 = time.perf_counter()
            job_id = publish_now(runtime, tenant.service, TYPE, topic)
            while (delivered := emulator.delivered()) < devices:
                if time.perf_counter() - t0 > timeout:
                    raise TimeoutError(f"{delivered} of {devices} acknowledged after {timeout:.0f} s ({n} workers)")
                dead = [w for w in workers if w.proc.poll() is not None]
                if dead:
                    raise RuntimeError(f"worker died: {dead[0].tail()}")
                time.sleep(0.05)
            elapsed = time.perf_counter() - t0
            cores = meter.stop()
            end = time.monotonic() + 30
            while time.monotonic() < end and _job_state(runtime, job_id) not in ("done", "failed"):
                time.sleep(0.05)
            state = _job_state(runtime, job_id)
        finally:
            for w in workers:
                w.stop()
        if state != "done":
            raise RuntimeError(f"publish with {n} workers ended {state}")
        rates.setdefault(n, []).append(devices / elapsed)
        runs.append(
            {
                "workers": n,
                "pushes_per_s": round(devices / elapsed),
                "elapsed_s": round(elapsed, 2),
                "cores": cores,
                # the emulator's CPU per request: cores used / requests per second
                "emulator_us_per_request": round(cores.get("emulator", 0.0) / (devices / elapsed) * 1e6, 1),
            }
        )
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    return figure(
        "fanout_scaling",
        Measure("two worker processes", two, "pushes/s"),
        Measure("one worker process", one, "pushes/s"),
        {
            "devices": devices,
            "slots": devices // 30_000 + 1,
            "lanes_per_worker": lanes,
            "publishes": len(processes),
            "fetch_size": runtime.settings.fanout_fetch_size,
        },
        extra={
            "cpus": os.cpu_count(),
            "runs": runs,
            # the emulator beside the workers (issue 35): its CPU per request and the cores it took,
            # median over the publishes; under a third of a core it leaves the workers theirs
            "emulator_cpu_us_per_request": statistics.median(r["emulator_us_per_request"] for r in runs),
            "emulator_cores": statistics.median(r["cores"].get("emulator", 0.0) for r in runs),
        },
    )
