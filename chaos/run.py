"""One chaos run, start to report: the stack, the tenants, the workload and the faults for
``minutes``, a drain, Notee's own final records (job states, dead letters, a reconcile), every process
stopped, then the ledger checked and the report written under ``.run/chaos/<stamp>-seed<seed>/``."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil
from cryptography.fernet import Fernet

from chaos import checker, faults, ledger, report, workload
from chaos.plan import PlannedFault, make_plan
from chaos.receiver import receiver
from chaos.record import Api, Recorder, read_lines
from chaos.scrape import Scraper
from chaos.stack import REPO, Cluster, MariaDB, Proc, cluster_env, drop_keyspaces, emulator, notee_argv, wait_http
from chaos.tenants import Tenant, due_minute, import_stable, make_quiet_users, make_tenant
from notee.emulator.control import EmulatorControl, free_port

REPLICAS = {"api": 2, "worker": 3, "scheduler": 2, "webhooks": 1}
LANES = 2


@dataclass(frozen=True)
class Options:
    minutes: float
    seed: int
    out: Path
    tenants: int = 5
    skew_s: float = 90.0  # scheduler-1's host clock
    drain_s: float = 180.0

    @property
    def seconds(self) -> float:
        return self.minutes * 60


def sizes(opts: Options) -> list[int]:
    """Stable devices per tenant: one large tenant (1,000–100,000 by length: 2,000 a minute), the rest 1,000."""
    big = int(min(100_000, max(1_000, 2_000 * opts.minutes)))
    return [big] + [1_000] * (opts.tenants - 1)


def base_env(db: MariaDB, logs: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOTEE_")}
    env.update(cluster_env())
    env.update(
        NOTEE_MYSQL_URL=db.url,
        NOTEE_ADMIN_TOKEN="chaos-admin-" + secrets.token_urlsafe(24),
        NOTEE_CREDENTIALS_KEY=Fernet.generate_key().decode(),
        NOTEE_WEBHOOK_ALLOW_HTTP="1",
        NOTEE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES="1",
        NOTEE_WEBHOOK_TIMEOUT_S="3",
        NOTEE_WEBHOOK_BACKOFF_BASE_S="1",
        NOTEE_HEARTBEAT_FILE=str(logs / "heartbeat"),
        NOTEE_MYSQL_POOL_SIZE="5",
        NO_PROXY="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
    )
    return env


def _metered(name: str, argv: list[str], env: dict[str, str], logs: Path, setting: str) -> Proc:
    """A process serving its Prometheus metrics on a port of its own, the same in every incarnation."""
    port = free_port()
    return Proc(name, argv, {**env, setting: str(port)}, logs / f"{name}.log", metrics_port=port)


def make_procs(env: dict[str, str], logs: Path, skew_s: float) -> dict[str, Proc]:
    procs: dict[str, Proc] = {}
    for i in range(REPLICAS["api"]):
        port = free_port()
        procs[f"api-{i}"] = Proc(f"api-{i}", notee_argv("api", "--port", str(port)), env, logs / f"api-{i}.log", port)
    for i in range(REPLICAS["worker"]):
        argv = notee_argv("worker", "--lanes", str(LANES))
        procs[f"worker-{i}"] = _metered(f"worker-{i}", argv, env, logs, "NOTEE_WORKER_METRICS_PORT")
    procs["scheduler-0"] = _metered("scheduler-0", notee_argv("scheduler"), env, logs, "NOTEE_SCHEDULER_METRICS_PORT")
    skewed = {**env, "CHAOS_CLOCK_SKEW_S": str(skew_s)}
    argv = [sys.executable, "-m", "chaos.skewed_scheduler"]
    procs["scheduler-1"] = _metered("scheduler-1", argv, skewed, logs, "NOTEE_SCHEDULER_METRICS_PORT")
    procs["webhooks-0"] = _metered("webhooks-0", notee_argv("webhooks"), env, logs, "NOTEE_WEBHOOKS_METRICS_PORT")
    return procs


QUIET_USERS = 10  # per tenant


def setup_tenant(opts: Options, n: int, admin: Api, rec: Recorder, hook_url: str | None, emu: object) -> Tenant:
    """Tenant ``n``: service, credentials, templates, stable population, quiet users, cycle users."""
    size = sizes(opts)[n]
    tenant = make_tenant(admin, n, apns=n < 2, webhook_url=hook_url if n < 3 else None)
    import_stable(tenant, size, ios_every=10 if n < 2 else 0)
    invalid = [tenant.token(i) for i in (1, 2)]  # AOS tokens FCM calls unregistered: pruned, accounted
    emu.fcm_tokens(UNREGISTERED=invalid)  # type: ignore[attr-defined]
    for token in invalid:
        rec.write("invalid_token", token=token)
    rec.write("population", name=tenant.population, tokens=[tenant.token(i) for i in range(size)])
    tried = max(1, int(opts.minutes) - 1)
    made = workload.subscribe_cycles(tenant, rec, tried, 1)
    rec.write("setup", service=tenant.service, stable=size, cycle_subs=made, cycle_tried=tried)
    return tenant


def quiet_users(tenant: Tenant, rec: Recorder, until: datetime) -> None:
    start, end = make_quiet_users(tenant, QUIET_USERS, until)
    rec.write("population", name=f"{tenant.service}:quiet", tokens=tenant.quiet)
    rec.write("quiet", service=tenant.service, tokens=tenant.quiet, start=start, end=end)
    rec.write("setup", service=tenant.service, stable=len(tenant.quiet))  # topic subscribers too


def setup_tenants(opts: Options, admin: Api, rec: Recorder, hook_url: str | None, emu: object) -> list[Tenant]:
    """Every tenant, side by side (their imports are most of the set-up's time)."""
    with ThreadPoolExecutor(opts.tenants) as pool:
        made = [pool.submit(setup_tenant, opts, n, admin, rec, hook_url, emu) for n in range(opts.tenants)]
        tenants = [f.result() for f in made]
        # last, so the window ends early in the run whatever the set-up took: what it held is sent then
        until = due_minute(datetime.now(UTC), 2)
        for f in [pool.submit(quiet_users, t, rec, until) for t in tenants]:
            f.result()
    return tenants


def _cycles_pending(rec: Recorder, journal: Path) -> int:
    """Cycle subscriptions whose push the emulator has not delivered yet (its journal, read as it grows)."""
    owed = {e["token"] for e in read_lines(rec.path) if e.get("kind") == "cycle_sub"}
    for d in read_lines(journal):
        owed.discard(d.get("token", ""))
    return len(owed)


def drain(opts: Options, api_of: dict[str, Api], rec: Recorder, journal: Path) -> None:
    """Until every acknowledged job has ended and every cycle subscription's minute was delivered
    (or drain_s: what is still owed then is the checker's to judge)."""
    deadline = time.time() + opts.drain_s
    pubs = [e for e in read_lines(rec.path) if e.get("kind") == "publish" and e.get("job_id")]
    pending = {e["job_id"]: e for e in pubs}
    while time.time() < deadline:
        for job_id, pub in list(pending.items()):
            r = api_of[pub["service"]].call("GET", f"/v1/jobs/{job_id}", op="drain", tries=2)
            if r is not None and r.status_code == 200 and r.json()["state"] not in ("scheduled", "queued", "running"):
                del pending[job_id]
        if not pending and not _cycles_pending(rec, journal):
            break
        time.sleep(3)
    time.sleep(10)  # the webhook dispatcher's last retries (backoff 1 s, doubling)
    for pub in pubs:
        r = api_of[pub["service"]].call("GET", f"/v1/jobs/{pub['job_id']}", op="final", tries=4)
        if r is not None and r.status_code == 200:
            job = r.json()
            rec.write("job_final", mark=pub["mark"], webhook=pub.get("webhook", False), **{
                k: job.get(k) for k in ("job_id", "state", "sent", "targeted", "failed", "pruned", "retried")
            })  # fmt: skip


def dead_letters(tenants: list[Tenant], rec: Recorder) -> None:
    for tenant in tenants:
        cursor = None
        while True:
            params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
            r = tenant.api.call("GET", "/v1/dead-letters", op="final", params=params)
            if r is None or r.status_code != 200:
                rec.write("actor_error", actor="dead-letters", error=f"{tenant.service}: no list")
                break
            page = r.json()
            for item in page["items"]:
                created = datetime.fromisoformat(item["created_at"].replace("Z", "+00:00"))
                if created.tzinfo is None:
                    created = created.replace(tzinfo=UTC)
                rec.write(
                    "dead_letter", job=item["job_id"] or "single", token=item["device_token"], reason=item["reason"],
                    provider=item["provider"], created=created.timestamp(),
                )  # fmt: skip
            cursor = page.get("next_cursor")
            if not cursor:
                break


def summaries(tenants: list[Tenant], rec: Recorder) -> None:
    """Each tenant's delivery summary of the last two hours (the run's jobs all fall in it)."""
    for tenant in tenants:
        r = tenant.api.call("GET", "/v1/delivery-summary", op="final", params={"hours": 2})
        if r is not None and r.status_code == 200:
            rec.write("summary", service=tenant.service, totals=r.json()["totals"])


def subscriber_counts(tenants: list[Tenant], rec: Recorder, when: str) -> None:
    """Each tenant's subscriber counters (``GET /v1/subscriber-counts``), before or after the reconcile."""
    for tenant in tenants:
        r = tenant.api.call("GET", "/v1/subscriber-counts", op="final")
        if r is not None and r.status_code == 200:
            items = {f"{i['method']}/{i['type']}": i["subscribers"] for i in r.json()["items"]}
            rec.write("sub_counts", service=tenant.service, when=when, counts=items)
        else:
            rec.write("actor_error", actor="subscriber-counts", error=f"{tenant.service}: no counts ({when})")


def reconcile_twice(env: dict[str, str], rec: Recorder, logs: Path) -> None:
    for _ in range(2):
        with open(logs / "reconcile.log", "ab") as log:
            r = subprocess.run(
                notee_argv("reconcile"), env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=log, timeout=600
            )
        try:
            rec.write("reconcile", report=json.loads(r.stdout.decode().strip().splitlines()[-1]))
        except (ValueError, IndexError):
            rec.write("reconcile", report={}, error=f"exit {r.returncode}")


def stop_procs(procs: dict[str, Proc], scraper: Scraper | None = None) -> None:
    """SIGTERM to all at once, then wait for each (SIGKILL after 30 s): they stop side by side. Each
    is scraped first and while it stops (its counters' last lifetime ends here)."""
    last = {name: scraper.before_signal(name) for name, p in procs.items() if p.alive()} if scraper else {}
    if scraper:
        scraper.stop()
    for p in procs.values():
        p.signal(signal.SIGTERM)
    if scraper:
        scraper.follow(list(last), 30)
    for name, p in procs.items():
        p.wait(30)
        if scraper and name in last:
            scraper.gone(name, *last[name])


def check_left(rec: Recorder, pids: list[tuple[str, int]]) -> None:
    """Every process the run started (each incarnation) is gone once the run is over."""
    for name, pid in pids:
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        rec.write("process_left", name=name, pid=pid, alive=alive)


def excerpts(results: list[ledger.Result], logs: Path) -> dict[ledger.Violation, list[str]]:
    """Log lines within 2 s of each violation (every process log of the run)."""
    stamp = re.compile(r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})")
    lines: list[tuple[float, str]] = []
    for path in sorted(logs.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            m = stamp.match(line)
            if m:
                lines.append(
                    (datetime.fromisoformat(m.group(1).replace(" ", "T")).timestamp(), f"{path.stem}: {line[:300]}")
                )
    out = {}
    for r in results:
        for v in r.violations[:20]:
            if v.t:
                out[v] = [text for t, text in lines if abs(t - v.t) <= 2.0][:40]
    return out


def check_and_report(opts: Options, started: float, ended: float, logs: Path, journal: Path) -> bool:
    events = list(read_lines(opts.out / "ledger.jsonl"))
    deliveries = [d for d in read_lines(journal) if d["t"] >= started - 600]  # an operator's journal may be older
    results = checker.check_all(events, deliveries, ledger.Bounds(lanes=REPLICAS["worker"] * LANES))
    kinds: dict[str, int] = {}
    for e in events:
        key = e["kind"] if e["kind"] != "req" else f"req {e['op']}"
        kinds[key] = kinds.get(key, 0) + 1
    info = report.RunInfo(
        opts.seed, opts.minutes, started, ended, f"CHAOS_SEED={opts.seed} CHAOS_MINUTES={opts.minutes:g} make chaos"
    )
    info.figures = {**kinds, "pushes delivered (emulator)": len(deliveries)}
    faults_done = [e for e in events if e["kind"] == "fault"]
    errors = [e["t"] for e in events if e["kind"] == "req" and (e["status"] == 0 or e["status"] >= 500)]
    tl = report.Timeline([d["t"] for d in deliveries], errors, faults_done)
    ex = excerpts(results, logs)
    (opts.out / "report.md").write_text(report.markdown(info, results, faults_done, ex))
    (opts.out / "report.html").write_text(report.page(info, results, tl, ex))
    return all(r.ok for r in results)


@dataclass
class Stack:
    cluster: Cluster
    db: MariaDB
    env: dict[str, str]
    emu: EmulatorControl
    procs: dict[str, Proc]
    scraper: Scraper


def start_stack(stack: ExitStack, opts: Options, rec: Recorder, pids: list[tuple[str, int]]) -> Stack:
    """Cluster, MariaDB, migrations, emulator, Notee's processes and their scraper; each stopped when
    ``stack`` closes."""
    logs = opts.out / "logs"
    cluster, db = Cluster(logs / "cassandra-cluster.log"), MariaDB(opts.out / "mariadb")
    cluster.start()
    stack.callback(cluster.stop)
    db.install()
    stack.callback(db.stop)
    env = base_env(db, logs)
    drop_keyspaces(env)
    with open(logs / "migrate.log", "wb") as log:
        subprocess.run(notee_argv("migrate"), env=env, cwd=REPO, check=True, timeout=900, stdout=log, stderr=log)
    emu = stack.enter_context(emulator(opts.out / "deliveries.jsonl"))
    env.update(emu.env())
    pids += [("emulator", emu.pid), *(("emulator", c.pid) for c in psutil.Process(emu.pid).children(recursive=True))]
    procs = make_procs(env, logs, opts.skew_s)
    scraper = Scraper(procs, rec, env["NOTEE_ADMIN_TOKEN"])
    stack.callback(stop_procs, procs, scraper)  # also on an error: nothing left running
    for p in procs.values():
        p.start()
    for p in procs.values():
        if p.port:
            wait_http(f"http://127.0.0.1:{p.port}/healthz", timeout=120)
    scraper.start()
    return Stack(cluster, db, env, emu, procs, scraper)


def run_phase(opts: Options, target: faults.Target, tenants: list[Tenant], plan: list[PlannedFault]) -> float:
    """The workload and the faults for ``opts.minutes``; returns when it started."""
    rec = target.rec
    target.api_key = tenants[0].api.headers["Authorization"].removeprefix("Bearer ")
    load = workload.Workload(tenants, rec, opts.seed, [max(10.0, s / 500) for s in sizes(opts)])
    started = time.time()
    stop = threading.Event()
    injected: list[threading.Thread] = []
    injector = threading.Thread(
        target=lambda: injected.extend(faults.run_plan(target, plan, started, stop)), daemon=True
    )
    load.start()
    injector.start()
    stop.wait(opts.seconds)
    stop.set()
    load.finish()
    injector.join(60)
    for th in injected:
        th.join(600)  # a node restart waits for the ring to be whole
    return started


def execute(opts: Options) -> bool:
    """The whole run; True when every invariant held."""
    logs = opts.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rec = Recorder(opts.out / "ledger.jsonl")
    rec.write("run", seed=opts.seed, minutes=opts.minutes)
    pids: list[tuple[str, int]] = []
    with ExitStack() as stack:
        st = start_stack(stack, opts, rec, pids)
        urls = [f"http://127.0.0.1:{p.port}" for p in st.procs.values() if p.port]
        admin = Api(urls, rec, {"Authorization": f"Bearer {st.env['NOTEE_ADMIN_TOKEN']}"})
        hook_url = stack.enter_context(receiver(rec, opts.seed))
        tenants = setup_tenants(opts, admin, rec, hook_url, st.emu)
        target = faults.Target(st.procs, st.cluster, st.db, st.emu, rec, hostile_url=urls[0], scraper=st.scraper)
        skew = f"{opts.skew_s:+.0f} s"
        rec.write(
            "fault",
            name="clock_skew",
            target="scheduler-1",
            t_start=time.time(),
            t_end=time.time() + opts.seconds,
            outcome=skew,
        )
        started = run_phase(opts, target, tenants, make_plan(opts.seed, opts.seconds, REPLICAS))
        drain(opts, {t.service: t.api for t in tenants}, rec, opts.out / "deliveries.jsonl")
        dead_letters(tenants, rec)
        summaries(tenants, rec)
        subscriber_counts(tenants, rec, "before reconcile")
        reconcile_twice(st.env, rec, logs)
        subscriber_counts(tenants, rec, "after reconcile")
        pids += [(name, pid) for name, p in st.procs.items() for pid in p.pids]
        pids += [("mariadb", pid) for pid in st.db.pids]
    check_left(rec, pids)
    ended = time.time()
    rec.close()
    ok = check_and_report(opts, started, ended, logs, opts.out / "deliveries.jsonl")
    latest = opts.out.parent / "latest"
    if latest.is_symlink():
        latest.unlink()
    if not latest.exists():
        latest.symlink_to(opts.out.name)
    return ok
