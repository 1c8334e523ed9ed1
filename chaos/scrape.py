"""Prometheus across process lifetimes: each Notee process's counters restart with it, and the run
kills processes, so every incarnation's ``/metrics`` is scraped every ``EVERY_S`` seconds, just before
each signal the run sends it (faults and the final stop) and once more at the end. Each scrape is a
``metrics`` line (process, pid, the counters); each incarnation's end is a ``metrics_gap`` line: its
last scrape and its exit, between which what it counted is lost (``chaos.ledger_prom`` bounds that by
what the emulator delivered meanwhile). A process stopping gracefully is scraped every 0.25 s until it
exits, so what it counts while it finishes its page is seen."""

from __future__ import annotations

import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from chaos.record import Recorder
from chaos.stack import Proc

EVERY_S = 5.0
FOLLOW_S = 0.25  # while a process stops
# the counters the checker reconciles (the HTTP ones are many series and reconcile with nothing here)
KEPT = (
    "notee_pushes_total",
    "notee_push_retries_total",
    "notee_webhook_attempts_total",
    "notee_scheduler_jobs_created_total",
)


def parse(text: str) -> dict[str, float]:
    """``name{label="v",...}`` -> value for the kept counters' samples."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in KEPT and s.value:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = float(s.value)
    return out


class Scraper:
    """Scrapes every process of the run: in a thread of its own, and on demand (``before_signal``)."""

    def __init__(self, procs: dict[str, Proc], rec: Recorder, admin_token: str) -> None:
        self.procs = procs
        self.rec = rec
        self._http = httpx.Client(timeout=3, headers={"Authorization": f"Bearer {admin_token}"})
        self._lock = threading.Lock()  # one scrape of a process at a time; httpx's client is shared
        self.last: dict[int, float] = {}  # pid -> time of its last good scrape
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scraper", daemon=True)

    def url(self, proc: Proc) -> str:
        return f"http://127.0.0.1:{proc.port or proc.metrics_port}/metrics"

    def scrape(self, name: str) -> bool:
        proc = self.procs[name]
        if not proc.alive() or not (proc.port or proc.metrics_port):
            return False
        assert proc.proc is not None
        pid = proc.proc.pid
        with self._lock:
            began = time.time()  # the counters are at least this recent
            try:
                r = self._http.get(self.url(proc))
                counters = parse(r.text) if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                counters = None
            if counters is None:
                return False
            self.rec.write("metrics", proc=name, pid=pid, t_scraped=began, counters=counters)
            self.last[pid] = began
        return True

    def before_signal(self, name: str) -> tuple[int, float]:
        """Scrape ``name`` now (it is about to be signalled); its pid and the time of its last good scrape
        (its start when it never answered one: then all it counted is lost)."""
        self.scrape(name)
        proc = self.procs[name]
        pid = proc.proc.pid if proc.proc is not None else 0
        return pid, self.last.get(pid, proc.started_at)

    def follow(self, names: list[str], timeout: float) -> None:
        """Scrape ``names`` every ``FOLLOW_S`` while they stop (a SIGTERMed worker finishes and counts
        its page after the signal), until each has exited or ``timeout`` s have passed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [n for n in names if self.procs[n].alive()]
            if not running:
                return
            for n in running:
                self.scrape(n)
            time.sleep(FOLLOW_S)

    def gone(self, name: str, pid: int, last: float) -> None:
        """``name``'s incarnation ``pid`` has exited: what it counted after its last scrape is lost."""
        last = max(last, self.last.get(pid, 0.0))  # the periodic scrape may have come later
        self.rec.write("metrics_gap", proc=name, pid=pid, t_scraped=last, t_exit=time.time())

    def _loop(self) -> None:
        while not self._stop.wait(EVERY_S):
            for name in list(self.procs):
                self.scrape(name)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
