"""Injecting the planned faults (``chaos.plan``) into the running stack, each in a thread of its own,
each written to the ledger as a ``fault`` line (start, end, target, outcome) once it is over."""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from chaos import hostile
from chaos.plan import PlannedFault
from chaos.record import Recorder
from chaos.scrape import Scraper
from chaos.stack import Cluster, MariaDB, Proc, wait_http
from notee.emulator.control import EmulatorControl


@dataclass
class Target:
    """What faults act on."""

    procs: dict[str, Proc]
    cluster: Cluster | None
    mariadb: MariaDB | None
    emu: EmulatorControl
    rec: Recorder
    lock: threading.Lock = field(default_factory=threading.Lock)  # one emulator control call at a time
    busy: set[str] = field(default_factory=set)  # processes a fault is acting on now
    api_key: str = ""  # a tenant's, for the hostile probes that must get past the credentials check
    hostile_url: str = ""  # the one API process the hostile clients attack
    scraper: Scraper | None = None  # scrapes a process's counters just before it is signalled
    # held by a store fault from its kill until the store is whole again: the plan keeps store faults
    # 60 s apart, but a node's restart under load took 3-4 minutes (the 2026-12-05 17:45 run: node 2
    # killed while node 3 was still starting, a quorum lost), so the next one waits here
    store_lock: threading.Lock = field(default_factory=threading.Lock)


def restart(proc: Proc) -> None:
    proc.start()
    if proc.port:
        wait_http(f"http://127.0.0.1:{proc.port}/healthz", timeout=90)


def _process(t: Target, f: PlannedFault) -> str:
    with t.lock:
        if f.target in t.busy:  # still being restarted after an earlier fault
            return "skipped: the process is being restarted"
        t.busy.add(f.target)
    try:
        return _signal_and_restart(t, t.procs[f.target], f)
    finally:
        with t.lock:
            t.busy.discard(f.target)


def _signal_and_restart(t: Target, proc: Proc, f: PlannedFault) -> str:
    pid, scraped = t.scraper.before_signal(proc.name) if t.scraper else (0, 0.0)
    if f.kind == "sigkill":
        proc.signal(signal.SIGKILL)
        code = proc.wait(10)
    else:
        proc.signal(signal.SIGTERM)
        if t.scraper:
            t.scraper.follow([proc.name], 45)
        code = proc.wait(45)  # a stop longer than the graceful budgets is SIGKILLed (and says so)
    if t.scraper:
        t.scraper.gone(proc.name, pid, scraped)
    time.sleep(f.length_s)
    restart(proc)
    return f"exit {code}, restarted"


def _storm(t: Target, f: PlannedFault) -> str:
    api, status = f.target.split("-")
    end = time.monotonic() + f.length_s
    chunks = 0
    while time.monotonic() < end:
        with t.lock:  # count-based faults, topped up each second (tests/faults/test_provider_storm.py)
            t.emu.fault(api, int(status), times=40, retry_after=2)
        chunks += 1
        time.sleep(1)
    return f"{chunks} chunks of 40"


def _resets(t: Target, f: PlannedFault) -> str:
    """A TCP reset on every open connection to the provider (``f.target``: apns, or fcm: the
    emulator's public port) once a second: streams in flight are cut mid-answer."""
    reset = t.emu.fcm_reset if f.target == "fcm" else t.emu.apns_reset
    end, cut = time.monotonic() + f.length_s, 0
    while time.monotonic() < end:
        with t.lock:
            cut += reset()
        time.sleep(1)
    return f"{cut} {f.target or 'apns'} connections reset"


def _token_expiry(t: Target, f: PlannedFault) -> str:
    """Credentials that expire under use for the spell: FCM access tokens issued meanwhile live 5 s
    (Notee hears 401 and fetches another), or APNs provider JWTs older than 10 s are refused (403
    ExpiredProviderToken: Notee re-signs and resends)."""
    if f.target == "apns":
        switch, back, said = {"apns_jwt_max_age_s": 10}, {"apns_jwt_max_age_s": 3600}, "APNs provider tokens live 10 s"
    else:
        switch, back, said = {"fcm_token_lifetime_s": 5}, {"fcm_token_lifetime_s": 3600}, "FCM access tokens live 5 s"
    with t.lock:
        t.emu.realistic(**switch)
    time.sleep(f.length_s)
    with t.lock:
        t.emu.realistic(**back)
    return said


def _emulator(t: Target, f: PlannedFault) -> str:
    if f.kind == "goaway":
        with t.lock:
            drained = t.emu.fcm_goaway() if f.target == "fcm" else t.emu.apns_goaway()
        return f"{drained} {f.target or 'apns'} connections"
    if f.kind == "reset":
        return _resets(t, f)
    if f.kind == "latency":
        with t.lock:
            t.emu.latency(800)
        time.sleep(f.length_s)
        with t.lock:
            t.emu.latency(0)
        return "800 ms"
    return _token_expiry(t, f)


def _store(t: Target, f: PlannedFault) -> str:
    """One store fault at a time: wait for the one before to end (the store whole again) first."""
    asked = time.monotonic()
    with t.store_lock:
        waited = time.monotonic() - asked
        outcome = _store_fault(t, f)
    return f"{outcome} (waited {waited:.0f} s for the store fault before it)" if waited >= 1 else outcome


def _store_fault(t: Target, f: PlannedFault) -> str:
    if f.kind == "cassandra_node":
        if t.cluster is None:
            return "skipped: no cluster of the run's own"
        t.cluster.kill(f.target)
        time.sleep(f.length_s)
        t.cluster.restart(f.target)
        return "killed, restarted, ring whole"
    if t.mariadb is None:
        return "skipped: no MariaDB of the run's own"
    t.mariadb.kill()
    time.sleep(f.length_s)
    t.mariadb.start()
    return "killed, restarted"


def inject(t: Target, f: PlannedFault) -> None:
    start = time.time()
    outcome: Any
    try:
        if f.kind in ("sigkill", "sigterm"):
            outcome = _process(t, f)
        elif f.kind == "storm":
            outcome = _storm(t, f)
        elif f.kind in ("cassandra_node", "mariadb_restart"):
            outcome = _store(t, f)
        elif f.kind == "hostile":
            hostile.run(t.hostile_url, t.api_key, f.length_s, t.rec)
            outcome = "done"
        else:
            outcome = _emulator(t, f)
    except Exception as exc:  # the run goes on; the report shows the fault did not happen as planned
        outcome = f"error: {exc!r}"[:300]
    t.rec.write("fault", name=f.kind, target=f.target, t_start=start, t_end=time.time(), outcome=outcome)


def run_plan(t: Target, plan: list[PlannedFault], t0: float, stop: threading.Event) -> list[threading.Thread]:
    """Start each fault at its time (a thread each); returns the threads (join them before checking)."""
    threads = []
    for f in plan:
        if stop.wait(max(0.0, t0 + f.at_s - time.time())):
            break
        th = threading.Thread(target=inject, args=(t, f), name=f"fault-{f.kind}", daemon=True)
        th.start()
        threads.append(th)
    return threads
