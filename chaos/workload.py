"""The mixed workload: what the tenants do for the whole run, each acknowledgement written to the
ledger (``chaos.ledger`` says what each kind of line promises).

- churn (per tenant): users that register a device and subscribe (single and bulk), rotate their
  token, remove the device, unsubscribe or are deleted; each acknowledged rotation, removal,
  unsubscribe or deletion is a ``revoke`` of the token from that instant on;
- publishes (per tenant): topic publishes to the stable population plus the churn, some with
  ``send_at``, some with ``local_time``, some cancelled a moment later;
- single sends to stable users, immediate or with ``send_at``.
Cycle subscriptions (a few stable-like users due at every minute of the run) are made up front.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chaos.record import Recorder
from chaos.tenants import TOPIC, Tenant, cycle_body, due_minute


@dataclass
class Churner:
    """One tenant's churn users: service user id -> (platform user id, its live token)."""

    tenant: Tenant
    rec: Recorder
    rng: random.Random
    live: dict[str, tuple[str, str]] = field(default_factory=dict)
    serial: int = 0

    def _revoke(self, token: str, why: str, scope: str = "*") -> None:
        self.rec.write("revoke", token=token, why=why, scope=scope, t_ack=time.time(), service=self.tenant.service)

    def _sub(self, sid: str, state: str) -> None:
        """The user's topic subscription as the answers tell it: subscribed, unsubscribed or unknown
        (a request that got no answer, or none it could trust): the subscriber counter's bounds."""
        self.rec.write("sub_state", service=self.tenant.service, user=sid, state=state)

    def step(self) -> None:
        """Register a user, or change one (one thread per tenant: the pool needs no lock)."""
        if len(self.live) < 5 or self.rng.random() < 0.55:
            self.register()
        else:
            self.change()

    def register(self) -> None:
        self.serial += 1
        sid, token = f"c-{self.serial}", f"churn-{self.tenant.service}-{self.serial}-{uuid.uuid4().hex[:6]}"
        api = self.tenant.api
        r = api.call("PUT", f"/v1/users/ext:{sid}", op="user", json={"name": sid, "timezone": "UTC"})
        if r is None or r.status_code >= 300:
            return
        uid = r.json()["user_id"]
        d = api.call("POST", f"/v1/users/{uid}/devices", op="device", json={"token": token, "os": "AOS"})
        if d is None or d.status_code >= 300:
            return
        if self.rng.random() < 0.5:
            s = api.call("PUT", f"/v1/users/{uid}/subscriptions/topic/news/{TOPIC}", op="subscribe")
        else:
            s = api.call("POST", f"/v1/topics/news/{TOPIC}/subscribers", op="bulk_subscribe", json={"user_ids": [uid]})
        if s is not None and s.status_code < 300:
            self.live[sid] = (uid, token)
            self._sub(sid, "subscribed")
        else:
            self._sub(sid, "unknown")

    def change(self) -> None:
        if not self.live:
            return
        sid = self.rng.choice(sorted(self.live))
        uid, token = self.live.pop(sid)  # an unanswered change leaves the user's state unknown: it leaves the pool
        api, what = self.tenant.api, self.rng.choice(("rotate", "delete_device", "delete_user", "unsubscribe"))
        if what == "rotate":
            new = f"{token}-r{self.rng.randrange(10**6)}"
            r = api.call("POST", "/v1/devices/rotate", op="rotate", json={"old_token": token, "new_token": new})
            if r is not None and r.status_code == 200 and r.json().get("rotated", 0) >= 1:
                self._revoke(token, "rotate")
                self.live[sid] = (uid, new)
        elif what == "delete_device":
            r = api.call("DELETE", f"/v1/users/{uid}/devices/{token}", op="delete_device")
            if r is not None and r.status_code == 204:
                self._revoke(token, "delete_device")
        elif what == "delete_user":
            r = api.call("DELETE", f"/v1/users/{uid}", op="delete_user")
            if r is not None and r.status_code == 204:
                self._revoke(token, "delete_user")
            self._sub(sid, "unsubscribed" if r is not None and r.status_code == 204 else "unknown")
        else:
            r = api.call("DELETE", f"/v1/users/{uid}/subscriptions/topic/news/{TOPIC}", op="unsubscribe")
            if r is not None and r.status_code == 204:
                self._revoke(token, "unsubscribe", scope=TOPIC)
            self._sub(sid, "unsubscribed" if r is not None and r.status_code == 204 else "unknown")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


@dataclass
class Publisher:
    tenant: Tenant
    rec: Recorder
    rng: random.Random
    serial: int = 0

    def _mark(self, kind: str) -> str:
        self.serial += 1
        return f"{kind}:{self.tenant.service}:{self.serial}"

    def publish(self) -> None:
        mark, body = self._mark("topic"), dict[str, Any]()
        not_before = None
        roll = self.rng.random()
        if roll < 0.15:
            not_before = time.time() + self.rng.uniform(15, 45)
            body["send_at"] = _iso(not_before)
        elif roll < 0.25:
            minute = due_minute(datetime.now(UTC), 1)
            not_before, body["local_time"] = minute.timestamp(), minute.strftime("%H:%M")
        body["variables"] = {"mark": mark}
        t_req = time.time()
        r = self.tenant.api.call(
            "POST", f"/v1/topics/news/{TOPIC}/publish", op="publish", json=body, headers={"Idempotency-Key": mark}
        )
        if r is None or r.status_code != 202:
            return
        job = r.json()["job_id"]
        self.rec.write(
            "publish", mark=mark, job_id=job, scope=TOPIC, t_req=t_req, t_ack=time.time(), not_before=not_before,
            populations=self.tenant.populations, service=self.tenant.service, webhook=bool(self.tenant.webhook_id),
        )  # fmt: skip
        if self.rng.random() < 0.15:
            time.sleep(self.rng.uniform(0.0, 2.0))
            c = self.tenant.api.call("POST", f"/v1/jobs/{job}/cancel", op="cancel")
            if c is not None and c.status_code == 200:
                self.rec.write("cancel", mark=mark, job_id=job, t_ack=time.time(), state=c.json()["state"])

    def send(self) -> None:
        if not self.tenant.stable:
            return
        i = self.rng.randrange(len(self.tenant.stable))
        mark, body = self._mark("single"), dict[str, Any](type="direct")
        body["variables"] = {"mark": mark}
        not_before = None
        if self.rng.random() < 0.3:
            not_before = time.time() + self.rng.uniform(10, 40)
            body["send_at"] = _iso(not_before)
        t_req = time.time()
        r = self.tenant.api.call(
            "POST", f"/v1/users/ext:s-{i}/send", op="send", json=body, headers={"Idempotency-Key": mark}
        )
        if r is None or r.status_code not in (200, 202):
            return
        answer = r.json()
        token = self.tenant.token(i)
        self.rec.write(
            "publish", mark=mark, job_id=answer.get("job_id"), scope=f"user:s-{i}", t_req=t_req, t_ack=time.time(),
            not_before=not_before, expect=[token], service=self.tenant.service, answer=answer,
            webhook=bool(self.tenant.webhook_id) and "job_id" in answer,
        )  # fmt: skip
        if r.status_code == 200 and answer.get("failed"):
            self.rec.write("dead_letter", job=mark, token=token, reason="single send answer")


def subscribe_cycles(tenant: Tenant, rec: Recorder, minutes: int, per_minute: int) -> int:
    """``per_minute`` users of their own, each due at one of the next ``minutes`` minutes (from the
    second minute on); returns how many were acknowledged."""
    api, made, now = tenant.api, 0, datetime.now(UTC)
    for m in range(2, minutes + 2):
        minute = due_minute(now, m)
        for k in range(per_minute):
            sid, token = f"cyc-{m}-{k}", f"cycle-{tenant.service}-{m}-{k}"
            r = api.call("PUT", f"/v1/users/ext:{sid}", op="setup", json={"name": sid, "timezone": "UTC"})
            if r is None or r.status_code >= 300:
                continue
            uid = r.json()["user_id"]
            d = api.call("POST", f"/v1/users/{uid}/devices", op="setup", json={"token": token, "os": "AOS"})
            s = api.call("PUT", f"/v1/users/{uid}/subscriptions/cycle/daily", op="setup", json=cycle_body(minute))
            if d is not None and d.status_code < 300 and s is not None and s.status_code < 300:
                rec.write("cycle_sub", token=token, mark=f"cycle:{tenant.service}", minute=minute.timestamp())
                made += 1
    return made


@dataclass
class Workload:
    """The actors' threads until ``stop`` is set."""

    tenants: list[Tenant]
    rec: Recorder
    seed: int
    publish_every_s: list[float]  # per tenant
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def _loop(self, name: str, every_s: float, step: object) -> None:
        rng = random.Random(f"{self.seed}:{name}")
        while not self.stop.wait(rng.uniform(0.5, 1.5) * every_s):
            try:
                step()  # type: ignore[operator]
            except Exception as exc:  # an actor survives anything the API answers; the ledger shows the gap
                self.rec.write("actor_error", actor=name, error=repr(exc)[:300])

    def start(self) -> None:
        for n, tenant in enumerate(self.tenants):
            churn = Churner(tenant, self.rec, random.Random(f"{self.seed}:churn:{n}"))
            pub = Publisher(tenant, self.rec, random.Random(f"{self.seed}:pub:{n}"))
            for name, every, step in (
                (f"churn-{n}", 0.3, churn.step),
                (f"publish-{n}", self.publish_every_s[n], pub.publish),
                (f"send-{n}", 2.0, pub.send),
            ):
                t = threading.Thread(target=self._loop, args=(name, every, step), name=name, daemon=True)
                t.start()
                self.threads.append(t)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
