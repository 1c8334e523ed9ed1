"""Soak (issue 9, item 7): ten minutes of mixed traffic against real Notee processes, with the
resident memory of every one of them sampled; growth after warm-up must stay under 10 %.

Run by ``make soak`` only (marker ``soak``). Processes: ``notee api``, two ``notee worker``,
``notee scheduler`` and ``notee emulator`` (its granian worker included), all on a database and
keyspaces of their own (the test stores' names + ``_soak``: ``notee_test_soak``,
``notification_test_soak``/``numbering_test_soak`` by default) so nothing else's data is touched, two
checkouts with their own NOTEE_* stores can soak at once, and the scheduler only sees the soak's cycle
subscriptions.

Traffic, from client threads: registrations (user + device + topic subscription + a cycle
subscription due within minutes, so the scheduler fires jobs) over a fixed pool of users that are
deleted and registered again, device removals and re-registrations, publishes to the topic every
few seconds with job polling. The samples are written to ``soak-rss.csv`` in the session log folder
as they are taken (a long soak can be watched while it runs). ``NOTEE_SOAK_SECONDS`` sets its length
(default 600; the hour-long soak of issue 19 is ``NOTEE_SOAK_SECONDS=3600 make soak``).

Memory: RSS of each process tree (psutil) every ``SAMPLE_S``. Warm-up is the first fifth of the
run. Two checks per process: the trend, a least-squares line through every sample after warm-up,
must rise less than ``MAX_SLOPE_MB_PER_MIN`` (a steady creep of 0.8 MB/min once passed the second
check alone), and at most ``MAX_WORKER_SLOPE_MB_PER_MIN`` for the workers; and growth = (mean of
the last minute - mean of the minute after warm-up) / that baseline must stay under ``MAX_GROWTH``.
"""

from __future__ import annotations

import os
import random
import secrets
import statistics
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import psutil
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.support.emulator import Emulator
from tests.support.logscan import log_dir, remember_secret
from tests.support.processes import free_port, settings_from, subprocess_env, wait_http
from tests.support.registry import shared_service_account

pytestmark = pytest.mark.soak

DURATION_S = float(os.environ.get("NOTEE_SOAK_SECONDS", "600"))
SAMPLE_S = 5.0
MAX_GROWTH = 0.10
MAX_SLOPE_MB_PER_MIN = 0.2  # 12 MB an hour: a creep that size would be a leak, not noise
MAX_WORKER_SLOPE_MB_PER_MIN = 0.1  # issue 19: the workers, over the hour-long soak
POOL = 300  # users per registration thread (steady-state population: 3 x POOL)
DAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


def slope_mb_per_min(points: list[tuple[float, int]], since_s: float) -> float:
    """Slope of the least-squares line through the (time, RSS) samples taken from ``since_s`` on."""
    after = [(t / 60, rss / 2**20) for t, rss in points if t >= since_s]
    if len(after) < 2:
        raise AssertionError(f"only {len(after)} samples after warm-up: run longer")
    return statistics.linear_regression([t for t, _ in after], [mb for _, mb in after]).slope


def tree_rss(pid: int) -> int:
    try:
        p = psutil.Process(pid)
        return p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))
    except psutil.NoSuchProcess:
        return 0


@pytest.fixture()
def soak_env(settings, migrated):
    from notee.store.runtime import Runtime
    from notee.usecases import migrate

    test_url = make_url(settings.mysql_url.get_secret_value())
    database = f"{test_url.database}_soak"
    url = test_url.set(database=database)
    server = create_engine(test_url)  # the test database exists (URL.set(database=None) keeps the old one)
    with server.begin() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS `{database}`"))
        conn.execute(text(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    server.dispose()
    env = subprocess_env(
        NOTEE_MYSQL_URL=url.render_as_string(hide_password=False),
        NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION=f"{settings.cassandra_keyspace_notification}_soak",
        NOTEE_CASSANDRA_KEYSPACE_NUMBERING=f"{settings.cassandra_keyspace_numbering}_soak",
        NOTEE_MYSQL_POOL_SIZE="5",
    )
    soak_settings = settings_from(env)
    runtime = Runtime(soak_settings)
    try:
        migrate.migrate_mysql(runtime.engine)
        migrate.migrate_cassandra(runtime.cql, soak_settings)
    finally:
        runtime.close()
    return env


def test_soak_memory_is_flat(soak_env, processes, settings):
    env = dict(soak_env)
    state = os.path.join(".run", "soak-emulator")
    emu_port, api_port = free_port(), free_port()
    emu_proc = processes.start(
        "soak-emulator", ["emulator", "--host", "127.0.0.1", "--port", str(emu_port), "--state-dir", state], env
    )
    ca = os.path.abspath(os.path.join(state, "ca.crt"))
    deadline = time.monotonic() + 30
    while not os.path.exists(ca):
        assert time.monotonic() < deadline and emu_proc.alive(), emu_proc.tail()
        time.sleep(0.2)
    emu = Emulator(
        url=f"https://localhost:{emu_port}",
        ca_file=ca,
        http=httpx.Client(base_url=f"https://localhost:{emu_port}", verify=ca, timeout=10),
    )
    wait_http_emu = time.monotonic() + 30
    while True:
        try:
            emu.stats()
            break
        except httpx.HTTPError:
            assert time.monotonic() < wait_http_emu, emu_proc.tail()
            time.sleep(0.2)
    env.update(NOTEE_EMULATOR_URL=emu.url, NOTEE_EMULATOR_CA_FILE=ca, SSL_CERT_FILE=ca)
    api = processes.start("soak-api", ["api", "--port", str(api_port)], env)
    base = f"http://127.0.0.1:{api_port}"
    wait_http(f"{base}/healthz", proc=api)
    service = "SOAK" + secrets.token_hex(3).upper()
    admin = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
    with httpx.Client(base_url=base, timeout=15) as http:
        assert (
            http.post(
                "/v1/admin/services",
                json={"service": service, "display_name": "soak", "timezone": "UTC"},
                headers=admin,
            ).status_code
            == 201
        )
        # without credentials no device has a route (issue 13): the emulator stands in for FCM, not for the keys
        assert (
            http.put(
                f"/v1/admin/services/{service}/credentials/fcm",
                json={"service_account": shared_service_account()},
                headers=admin,
            ).status_code
            == 200
        )
        r = http.post(f"/v1/admin/services/{service}/api-keys", json={"label": "soak"}, headers=admin)
        remember_secret(r.json()["api_key"])
        auth = {"Authorization": f"Bearer {r.json()['api_key']}"}
        assert http.put(
            "/v1/templates/TOPIC/news", json={"title": "Hi {{name}}", "body": "soak"}, headers=auth
        ).status_code in (200, 201)
        assert http.put(
            "/v1/templates/CYCLE/daily", json={"title": "Daily", "body": "soak"}, headers=auth
        ).status_code in (200, 201)
    workers = [processes.start(f"soak-worker-{i}", ["worker", "--lanes", "2"], env) for i in range(2)]
    scheduler = processes.start("soak-scheduler", ["scheduler"], env)
    watched = {"api": api, "worker-0": workers[0], "worker-1": workers[1], "scheduler": scheduler, "emulator": emu_proc}

    stop = threading.Event()
    tally: Counter = Counter()
    lock = threading.Lock()

    def count(what: str, r: httpx.Response | None) -> None:
        with lock:
            tally[what] += 1
            tally[f"{what}.{'err' if r is None else r.status_code}"] += 1

    def registrations(n: int) -> None:
        """Steady state: a fixed pool of POOL users per thread, each re-registered in turn (delete
        the previous incarnation, then user + device + subscriptions again, same token). After the
        pool has filled (during warm-up) the topic's size and every per-token table stay constant,
        so memory growth measures leaks, not a growing workload."""
        rng = random.Random(n)
        with httpx.Client(base_url=base, timeout=15) as c:
            i = 0
            while not stop.is_set():
                slot = i % POOL
                i += 1
                try:
                    r = c.put(f"/v1/users/s{n}-{slot}", json={"name": f"user {i}"}, headers=auth)
                    count("user", r)
                    uid = r.json()["user_id"]
                    if i > POOL:
                        count("delete_user", c.delete(f"/v1/users/{uid}", headers=auth))
                        r = c.put(f"/v1/users/s{n}-{slot}", json={"name": f"user {i}"}, headers=auth)
                        count("user", r)
                        uid = r.json()["user_id"]
                    token = f"soak-{n}-{slot}-{service}"
                    count(
                        "device", c.post(f"/v1/users/{uid}/devices", json={"token": token, "os": "AOS"}, headers=auth)
                    )
                    count("subscribe", c.put(f"/v1/users/{uid}/subscriptions/topic/news/all", headers=auth))
                    due = datetime.now(ZoneInfo("UTC")) + timedelta(minutes=rng.randint(1, 3))
                    count(
                        "cycle",
                        c.put(
                            f"/v1/users/{uid}/subscriptions/cycle/daily",
                            headers=auth,
                            json={
                                "days": [DAYS[due.weekday()]],
                                "hour": due.hour,
                                "minute": due.minute,
                                "timezone": "UTC",
                            },
                        ),
                    )
                    if i % 10 == 0:
                        count("unregister", c.delete(f"/v1/users/{uid}/devices/{token}", headers=auth))
                        count(
                            "device",
                            c.post(f"/v1/users/{uid}/devices", json={"token": token, "os": "AOS"}, headers=auth),
                        )
                except httpx.HTTPError:
                    count("client_error", None)
                time.sleep(0.05)

    def publishes() -> None:
        with httpx.Client(base_url=base, timeout=15) as c:
            while not stop.is_set():
                try:
                    r = c.post("/v1/topics/news/all/publish", json={"variables": {"name": "soak"}}, headers=auth)
                    count("publish", r)
                    if r.status_code == 202:
                        for _ in range(10):
                            count("job", c.get(f"/v1/jobs/{r.json()['job_id']}", headers=auth))
                            time.sleep(0.5)
                except httpx.HTTPError:
                    count("client_error", None)
                stop.wait(3)

    threads = [threading.Thread(target=registrations, args=(n,), daemon=True) for n in range(3)]
    threads.append(threading.Thread(target=publishes, daemon=True))
    for t in threads:
        t.start()
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in watched}
    t0 = time.monotonic()
    with open(log_dir() / "soak-rss.csv", "w", buffering=1) as out:
        out.write("t_s," + ",".join(samples) + "\n")
        while time.monotonic() - t0 < DURATION_S:
            now = time.monotonic() - t0
            for name, proc in watched.items():
                assert proc.alive(), f"{name} died:\n{proc.tail()}"
                samples[name].append((now, tree_rss(proc.pid)))
            out.write(f"{now:.0f}," + ",".join(str(v[-1][1]) for v in samples.values()) + "\n")
            time.sleep(SAMPLE_S)
    stop.set()
    for t in threads:
        t.join(30)
    delivered = emu.stats()
    emu.http.close()

    warm = DURATION_S / 5
    window = min(60.0, DURATION_S / 5)
    report, growths, slopes = [], {}, {}
    for name, points in samples.items():
        base_mb = statistics.mean(r for t, r in points if warm <= t < warm + window) / 2**20
        end_mb = statistics.mean(r for t, r in points if t >= DURATION_S - window) / 2**20
        peak_mb = max(r for _, r in points) / 2**20
        growths[name] = (end_mb - base_mb) / base_mb
        slopes[name] = slope_mb_per_min(points, warm)
        report.append(
            f"  {name:10s} after warm-up {base_mb:7.1f} MB  end {end_mb:7.1f} MB  peak {peak_mb:7.1f} MB  "
            f"growth {growths[name] * 100:+5.1f} %  trend {slopes[name]:+6.3f} MB/min"
        )
    print(
        f"\nsoak: {DURATION_S:.0f} s, {len(samples['api'])} samples per process; requests "
        f"{dict(sorted(tally.items()))}; emulator {delivered['counts']}\n" + "\n".join(report)
    )
    creeping = {name: round(s, 3) for name, s in slopes.items() if s >= MAX_SLOPE_MB_PER_MIN}
    assert not creeping, f"RSS trend after warm-up of at least {MAX_SLOPE_MB_PER_MIN} MB/min: {creeping}"
    workers = {name: round(s, 3) for name, s in slopes.items() if name.startswith("worker")}
    assert all(s <= MAX_WORKER_SLOPE_MB_PER_MIN for s in workers.values()), (
        f"worker RSS trend after warm-up above {MAX_WORKER_SLOPE_MB_PER_MIN} MB/min: {workers}"
    )
    assert all(g < MAX_GROWTH for g in growths.values()), growths
    assert tally["publish.202"] > 0 and tally["user.201"] + tally["user.200"] > 0
    errors = {k: v for k, v in tally.items() if k.endswith(".err") or ".5" in k}
    assert not errors, f"requests failed during the soak (memory was fine): {errors}"
