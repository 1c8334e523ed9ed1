"""Every process's heartbeat in MySQL (issue 33, docs/CONSOLE.md "Health"): real `notee api`, `notee
worker`, `notee scheduler` and `notee webhooks` processes each write their row every
NOTEE_PROCESS_HEARTBEAT_S; a killed one turns stale, a stopped one is gone, the retention run
deletes a stale one after an hour; a worker's row carries its circuit breaker per provider. The admin
API lists every process; the console's health page shows them to the admin, and to a tenant only
kinds, counts, ages and breaker states (no process id: it names the host).

The processes serve every tenant, so they run on stores of the test's own (``fresh_stores``)."""

from __future__ import annotations

import re
import secrets
import signal
import socket
from datetime import timedelta

import httpx
import pytest

from notee.core.clock import now_utc
from notee.core.settings import Settings
from notee.providers.breaker import CircuitBreaker
from notee.store.runtime import Runtime
from notee.usecases import heartbeats, migrate, retention
from tests.support.processes import Processes, subprocess_env
from tests.support.registry import admin_headers, bearer
from tests.support.stores import store_env
from tests.support.waiting import wait_for

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
BEAT_S = "0.5"  # stale after 3 missed beats and 5 s: 6.5 s


@pytest.fixture()
def own(fresh_stores: Settings) -> Settings:
    migrate.migrate_all(fresh_stores)
    return fresh_stores


def _env(own: Settings) -> dict[str, str]:
    keys = ("NOTEE_MYSQL_URL", "NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION", "NOTEE_CASSANDRA_KEYSPACE_NUMBERING")
    env = store_env(own)
    return {k: env[k] for k in keys} | {"NOTEE_PROCESS_HEARTBEAT_S": BEAT_S}


def _listed(api: httpx.Client, headers: dict[str, str]) -> dict[int, dict]:
    """The admin API's processes, by pid (the second part of host:pid:random)."""
    r = api.get("/v1/admin/processes", headers=headers)
    assert r.status_code == 200, r.text
    return {int(p["process_id"].split(":")[-2]): p for p in r.json()["items"]}


def _console(url: str, secret: str) -> httpx.Client:
    c = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
    page = c.get("/console/sign-in")
    r = c.post(
        "/console/sign-in", data={"csrf": CSRF.search(page.text).group(1), "secret": secret, "next": "/console/"}
    )
    assert r.status_code == 303, r.text
    return c


def test_real_processes_beat_a_killed_one_turns_stale_and_a_stopped_one_is_gone(own, settings, processes: Processes):
    env = _env(own)
    api_proc = processes.api(**env)
    worker = processes.start("worker", ["worker", "--lanes", "1"], subprocess_env(**env))
    scheduler = processes.start("scheduler", ["scheduler"], subprocess_env(**env))
    dispatcher = processes.start("webhooks", ["webhooks"], subprocess_env(**env))
    admin = admin_headers(settings)
    api = httpx.Client(base_url=api_proc.url, timeout=30)
    mine = {api_proc.pid: "api", worker.pid: "worker", scheduler.pid: "scheduler", dispatcher.pid: "webhooks"}

    def all_beating() -> dict[int, dict] | None:
        listed = _listed(api, admin)
        ok = all(
            pid in listed and listed[pid]["kind"] == kind and not listed[pid]["stale"] for pid, kind in mine.items()
        )
        return listed if ok else None

    listed = wait_for(all_beating, timeout=120, interval=0.25, what="every process's first beat")
    assert listed[worker.pid]["breakers"] == {"fcm": "closed", "apns": "closed", "webpush": "closed"}
    assert all(listed[pid]["breakers"] is None for pid in (api_proc.pid, scheduler.pid, dispatcher.pid))
    first = listed[worker.pid]["beat_at"]
    wait_for(lambda: _listed(api, admin)[worker.pid]["beat_at"] > first, timeout=60, what="the worker's next beat")

    # The admin's health page: every process with its id; a tenant's: kinds and counts, no host.
    page = _console(api_proc.url, settings.admin_token.get_secret_value()).get("/console/health").text
    assert all(f":{pid}:" in page for pid in mine) and 'id="processes"' in page
    r = api.post(
        "/v1/admin/services", json={"service": "HB" + secrets.token_hex(4).upper(), "display_name": "hb"}, headers=admin
    )
    assert r.status_code == 201, r.text
    service = r.json()["service"]
    key = api.post(f"/v1/admin/services/{service}/api-keys", json={}, headers=admin).json()["api_key"]
    assert api.get("/v1/admin/processes", headers=bearer(key)).status_code in (401, 403)  # a tenant's key: no
    tenant = _console(api_proc.url, key)
    # polled: on a loaded machine a beat may come late enough to read as stale for a moment
    live_worker = re.compile(r'data-kind="worker">.*?data-live>1<')
    tenant_page = wait_for(
        lambda: (lambda t: t if live_worker.search(t) else None)(tenant.get("/console/health").text),
        timeout=60,
        what="the tenant's health page with one live worker",
    )
    # a process id or lease owner is host:pid:random (the host name alone may be as short as "vm", which
    # a random CSRF token can contain: the id's form is what must not show)
    assert not re.search(rf"{re.escape(socket.gethostname())}:\d+:", tenant_page), tenant_page
    assert not any(f":{pid}:" in tenant_page for pid in mine)
    assert 'id="processes"' not in tenant_page

    # Killed: its row stays and turns stale; stopped gracefully: its row is gone.
    worker.signal(signal.SIGKILL)
    worker.wait(30)
    wait_for(lambda: _listed(api, admin)[worker.pid]["stale"], timeout=60, what="the killed worker's row stale")
    scheduler.stop()
    wait_for(lambda: scheduler.pid not in _listed(api, admin), timeout=60, what="the stopped scheduler's row gone")
    wait_for(
        lambda: not any(_listed(api, admin)[pid]["stale"] for pid in (api_proc.pid, dispatcher.pid)),
        timeout=60,
        what="the api and the dispatcher still live",
    )
    page = _console(api_proc.url, key).get("/console/health").text
    assert re.search(r'data-kind="worker">.*?data-stale><span[^>]*>1 stale<', page), page
    assert re.search(r'data-kind="scheduler">.*?data-live>0<.*?none running', page), page

    # The hourly retention run: a row silent for over an hour goes, a live one stays.
    runtime = Runtime(own)
    try:
        assert retention.prune_heartbeats(runtime) == 0  # the killed worker's row is seconds old
        assert retention.prune_heartbeats(runtime, now=now_utc() + timedelta(hours=1, minutes=1)) >= 1
    finally:
        runtime.close()
    assert worker.pid not in _listed(api, admin)


def test_a_workers_beat_carries_its_breaker_per_provider(own):
    """The states a beat writes are the worker's breaker's (``CircuitBreaker.states``), for every provider."""
    runtime = Runtime(own)
    try:
        breaker = CircuitBreaker()
        breaker.record("apns", sent=10, unreachable=10)  # most of a page unreachable: open
        breaker.record("fcm", sent=10, unreachable=0)
        beat = heartbeats.ProcessHeartbeat(runtime, "worker", breakers=breaker.states)
        assert beat.beat()
        with runtime.sessions() as s:
            [view] = [p for p in heartbeats.process_health(s) if p.process_id == beat.process_id]
        assert view.breakers == {"fcm": "closed", "apns": "open", "webpush": "closed"} and not view.stale
        [worker] = [k for k in heartbeats.by_kind([view]) if k.kind == "worker"]
        assert (worker.live, worker.stale, worker.breakers["apns"]) == (1, 0, {"open": 1})
        beat.forget()
        with runtime.sessions() as s:
            assert all(p.process_id != beat.process_id for p in heartbeats.process_health(s))
    finally:
        runtime.close()
