"""MariaDB restart under API load (issue 9, item 2).

A real ``notee api`` (uvicorn) runs against a second, killable MariaDB (127.0.0.1:3307, its own
datadir; the shared server on 3306 is never touched). Client threads register users, their devices
and topic subscriptions, retrying a failed step the way a service backend would. Mid-load the
MariaDB is SIGKILLed (a crash), kept down for a few seconds, and started again. Then:

- every request during the outage failed fast with 503 and the machine-readable error body (no
  500, no stack trace, no client timeout);
- the API recovered by itself within seconds of MariaDB's return;
- nothing the API acknowledged was lost (InnoDB crash recovery keeps committed transactions), and
  no half-written registration remains: every stored device belongs to a stored user, every
  device the API acknowledged is stored, and every acknowledged subscription reaches all of its
  user's stored devices.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.support.logscan import remember_secret
from tests.support.processes import free_port, subprocess_env, wait_http
from tests.support.registry import admin_headers, bearer, shared_service_account

pytestmark = pytest.mark.faults

CLIENTS = 4
WARM_S = 5.0
OUTAGE_S = 8.0
AFTER_S = 10.0
CLIENT_TIMEOUT_S = 10.0


@dataclass
class Call:
    op: str
    start: float
    end: float
    status: int | None  # None: the client got no answer (timeout, connection error)
    code: str | None
    error: str | None = None


@dataclass
class Flow:
    """One simulated registration: user, then device, then subscription."""

    service_user_id: str
    token: str
    user_id: str | None = None
    device_ok: bool = False
    subscribed: bool = False


@dataclass
class Load:
    base: str
    auth: dict[str, str]
    stop: threading.Event = field(default_factory=threading.Event)
    calls: list[Call] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def step(self, client: httpx.Client, op: str, method: str, url: str, body: dict | None = None) -> dict | None:
        """Send until a 2xx (or the load stops); record every attempt."""
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                r = client.request(method, url, json=body, headers=self.auth)
                status, code = r.status_code, None
                if status >= 400:
                    try:
                        code = r.json()["error"]["code"]
                    except (ValueError, KeyError, TypeError):
                        code = "<not the error body>"
                call = Call(op, t0, time.monotonic(), status, code)
            except httpx.HTTPError as exc:
                call = Call(op, t0, time.monotonic(), None, None, type(exc).__name__)
            with self.lock:
                self.calls.append(call)
            if call.status is not None and call.status < 300:
                return r.json()
            time.sleep(0.2)
        return None

    def client(self, n: int) -> None:
        with httpx.Client(base_url=self.base, timeout=CLIENT_TIMEOUT_S) as client:
            i = 0
            while not self.stop.is_set():
                flow = Flow(f"load-{n}-{i}", f"tok-{n}-{i}-{secrets.token_hex(12)}")
                with self.lock:
                    self.flows.append(flow)
                i += 1
                user = self.step(client, "user", "PUT", f"/v1/users/{flow.service_user_id}", {"name": "load"})
                if user is None:
                    return
                flow.user_id = user["user_id"]
                if (
                    self.step(
                        client,
                        "device",
                        "POST",
                        f"/v1/users/{flow.user_id}/devices",
                        {"token": flow.token, "os": "AOS", "region": "KR"},
                    )
                    is None
                ):
                    return
                flow.device_ok = True
                if (
                    self.step(client, "subscribe", "PUT", f"/v1/users/{flow.user_id}/subscriptions/topic/news/load")
                    is None
                ):
                    return
                flow.subscribed = True


def test_mariadb_killed_and_restarted_under_load(killable_mariadb, processes, settings, service_id):
    db = killable_mariadb
    env = subprocess_env(NOTEE_MYSQL_URL=db.url, NOTEE_MYSQL_CONNECT_TIMEOUT_S="2")
    port = free_port()
    api = processes.start("mariadb-restart-api", ["api", "--port", str(port)], env)
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/healthz", proc=api)
    with httpx.Client(base_url=base, timeout=15) as http:
        r = http.post(
            "/v1/admin/services", json={"service": service_id, "display_name": "fault"}, headers=admin_headers(settings)
        )
        assert r.status_code == 201, r.text
        r = http.put(
            f"/v1/admin/services/{service_id}/credentials/fcm",
            json={"service_account": shared_service_account()},
            headers=admin_headers(settings),
        )
        assert r.status_code == 200, r.text
        r = http.post(
            f"/v1/admin/services/{service_id}/api-keys", json={"label": "load"}, headers=admin_headers(settings)
        )
        assert r.status_code == 201, r.text
        remember_secret(r.json()["api_key"])
        auth = bearer(r.json()["api_key"])
        r = http.put("/v1/templates/TOPIC/news", json={"title": "Hi {{name}}", "body": "load"}, headers=auth)
        assert r.status_code in (200, 201), r.text

    load = Load(base, auth)
    threads = [threading.Thread(target=load.client, args=(n,), daemon=True) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    time.sleep(WARM_S)
    t_kill = time.monotonic()
    db.kill()
    time.sleep(OUTAGE_S)
    t_restart = time.monotonic()  # from here the server may accept connections before start() sees it
    db.start()
    t_back = time.monotonic()
    time.sleep(AFTER_S)
    load.stop.set()
    for t in threads:
        t.join(CLIENT_TIMEOUT_S + 5)
    assert api.alive(), api.tail()

    calls = sorted(load.calls, key=lambda c: c.start)
    failures = [c for c in calls if c.status is None or c.status >= 300]
    during = [c for c in calls if t_kill + 0.5 < c.start and c.end < t_restart]
    first_ok_after = min(
        (c.end for c in calls if c.start >= t_back and c.status is not None and c.status < 300), default=None
    )
    recovery_s = None if first_ok_after is None else first_ok_after - t_back
    slowest_failure = max((c.end - c.start for c in failures), default=0.0)
    print(
        f"\nmariadb restart: {len(calls)} requests, {len(failures)} failed "
        f"({sum(1 for c in failures if c.status == 503)} x 503); {len(during)} during the {OUTAGE_S:.0f} s outage, "
        f"slowest failure {slowest_failure:.2f} s; first success {recovery_s if recovery_s is None else round(recovery_s, 2)} s "
        f"after MariaDB was back; {len(load.flows)} registrations, "
        f"{sum(f.subscribed for f in load.flows)} completed"
    )

    assert during, "no request ran during the outage"
    bad = [c for c in failures if not (c.status == 503 and c.code == "store_unavailable")]
    assert bad == [], f"failures other than 503 store_unavailable: {bad[:5]}"
    assert all(c.status == 503 for c in during)
    assert slowest_failure < 5.0, "a request did not fail fast during the outage"
    assert recovery_s is not None and recovery_s < 10.0, f"no recovery within 10 s (first success {recovery_s})"
    late = [c for c in calls if c.start >= t_back + 10.0]
    assert all(c.status is not None and c.status < 300 for c in late)

    # Consistency: what the API acknowledged is stored; nothing half-written.
    engine = create_engine(db.url)
    try:
        with engine.connect() as conn:
            users = {
                r.service_user_id: r.user_id
                for r in conn.execute(
                    text("SELECT service_user_id, user_id FROM `user` WHERE service = :s"), {"s": service_id}
                )
            }
            devices = {
                r.device_token: r.user_id
                for r in conn.execute(
                    text("SELECT device_token, user_id FROM device WHERE service = :s"), {"s": service_id}
                )
            }
    finally:
        engine.dispose()
    assert set(devices.values()) <= set(users.values()), "a device row without its user"
    for flow in load.flows:
        if flow.user_id is not None:
            assert users.get(flow.service_user_id) == flow.user_id, f"acknowledged user lost: {flow}"
        if flow.device_ok:
            assert devices.get(flow.token) == flow.user_id, f"acknowledged device lost: {flow}"
    known_tokens = {f.token for f in load.flows}
    assert set(devices) <= known_tokens
    with httpx.Client(base_url=base, timeout=15) as http:
        for flow in load.flows:
            if not flow.subscribed:
                continue
            items = http.get(f"/v1/users/{flow.user_id}/subscriptions", headers=auth).json()["items"]
            stored_devices = sum(1 for u in devices.values() if u == flow.user_id)
            assert [(s["topic"], s["devices"]) for s in items] == [("load", stored_devices)], flow
