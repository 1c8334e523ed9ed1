"""subscribe_ratio: topic subscriptions per second through the HTTP API against the raw driver
performing the same Cassandra writes, at the same concurrency.

* API side: ``notee api`` (uvicorn, one process, its default settings) in a subprocess; ``concurrency``
  client threads, each with its own keep-alive ``http.client`` connection (a lean client, so the
  client's CPU takes little from the server on a small machine), each user subscribed once:
  ``PUT /v1/users/{user_id}/subscriptions/topic/{type}/{topic}``. Latency p50/p99 per request. The
  API answers the requests that arrive during a store call of their type together in the next call
  (notee/api/subscribe_groups.py); the mean group size is a side figure.
* Raw side: ``concurrency`` threads with the raw driver doing, per user, what a first topic
  subscription of a one-device user writes: one logged batch of slot row + target_slots row +
  device index row + token index row + user-level index row, and one counter batch of the topic's
  subscribers +1 and ``count`` +1 (2 round trips per subscription; Notee also reads the users'
  index rows before, and per group of subscriptions, not per subscription). The row's number comes from a range the threads share, reserved like Notee's
  (``notee.store.cql.counters.NUMBER_RANGE`` numbers per ``no`` increment and its read).

Users and devices are inserted in bulk beforehand (not measured). Each side gets its own users and
topic. Sides run raw, API, raw, API; medians are reported. Then one more API pass with rate limits
on (the tenant at the highest limits): its rate and CPU per subscription are side figures.

``run_bulk`` (bulk_subscribe_ratio): the bulk endpoint, 1,000 users per request, against the raw
writes those subscriptions need (see ``bulk_raw_side``).
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.env import free_port, stop_process
from bench.report import Measure, figure
from bench.tenant import bulk_users, make_template, make_tenant

TYPE = "bench_sub"


class ApiProcess:
    def __init__(self, *, rate_limits: bool = False) -> None:
        self.port = free_port()
        self.log = Path(tempfile.mkstemp(prefix="notee-bench-api-", suffix=".log")[1])
        self._out = self.log.open("wb")
        # the admin token reads the process's /metrics (``metric``)
        self.admin_token = os.environ.get("NOTEE_ADMIN_TOKEN") or "bench-admin-" + secrets.token_urlsafe(32)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "notee", "api", "--host", "127.0.0.1", "--port", str(self.port)],
            # The figure is the subscribe path's throughput; tenant rate limits are a policy with their
            # own tests (tests/integration/test_rate_limits.py) and would cap or refuse the load here. Their cost
            # per request is measured apart (``rate_limits=True``, the tenant's limits at the maximum).
            env={
                **os.environ,
                "NOTEE_RATE_LIMITS_ENABLED": "true" if rate_limits else "false",
                "NOTEE_ADMIN_TOKEN": self.admin_token,
            },
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"notee api exited: {self.log.read_text()[-2000:]}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/healthz")
                if c.getresponse().status in (200, 503):
                    c.close()
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("notee api did not answer within 30 s")
            time.sleep(0.1)

    def cpu_s(self) -> float:
        import psutil

        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def metric(self, sample: str) -> float:
        """One unlabelled sample of the process's ``GET /metrics`` (0 when absent)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/metrics", headers={"Authorization": f"Bearer {self.admin_token}"})
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        if r.status != 200:
            raise RuntimeError(f"GET /metrics answered {r.status}")
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == sample:
                return float(value)
        return 0.0

    def stop(self) -> None:
        stop_process(self.proc, 15)
        self._out.close()


def _split(items: list, parts: int) -> list[list]:
    return [items[i::parts] for i in range(parts)]


def api_side(port: int, api_key: str, users: list[str], topic: str, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def work(chunk: list[str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": f"Bearer {api_key}", "Content-Length": "0"}
        mine = []
        for uid in chunk:
            t = time.perf_counter()
            conn.request("PUT", f"/v1/users/{uid}/subscriptions/topic/{TYPE}/{topic}", headers=headers)
            r = conn.getresponse()
            body = r.read()
            mine.append(time.perf_counter() - t)
            if r.status not in (200, 201):
                with lock:
                    errors.append(f"{r.status} {body[:200]!r}")
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work, args=(c,)) for c in _split(users, concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise AssertionError(f"{len(errors)} subscribe requests failed, first: {errors[0]}")
    return {"n": len(users), "wall_s": wall, "latencies": latencies}


def raw_side(
    runtime, service: str, key: str, users: list[tuple[str, str]], topic: str, concurrency: int
) -> dict[str, Any]:
    from cassandra.query import BatchStatement, BatchType

    from notee.store.cassandra import COUNTER_PROFILE
    from notee.store.cql.counters import NUMBER_RANGE

    s, n, c = runtime.cql, runtime.keyspaces.notification, runtime.keyspaces.numbering
    add_no = s.prepare(
        f"UPDATE {c}.notification SET no = no + ? WHERE service = ? AND notification_method = ?"
        " AND notification_type = ?"
    )
    read_no = s.prepare(
        f"SELECT no FROM {c}.notification WHERE service = ? AND notification_method = ? AND notification_type = ?"
    )
    add_count = s.prepare(
        f"UPDATE {c}.notification SET count = count + ? WHERE service = ?"
        " AND notification_method = ? AND notification_type = ?"
    )
    add_topic = s.prepare(
        f"UPDATE {c}.topic_subscribers SET subscribers = subscribers + ?"
        " WHERE service = ? AND notification_type = ? AND topic = ?"
    )
    token_row = s.prepare(f"INSERT INTO {n}.notification_per_token (service, device_token, user_id) VALUES (?, ?, ?)")
    slot_row = s.prepare(
        f"INSERT INTO {n}.topic_notification (slot, notification_key, topic, no, device_token,"
        " device_os, user_id, registered_at, zone) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    index_row = s.prepare(
        f"INSERT INTO {n}.notification_per_user (user_id, service, notification_method,"
        " notification_type, target, device_token, data) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    occupancy_row = s.prepare(  # the target's (slot, block) row, in the slot row's batch (schema/cql/0005)
        f"INSERT INTO {n}.target_slots (notification_key, target, slot, block, noted) VALUES (?, ?, ?, ?, true)"
    )
    latencies: list[float] = []
    lock = threading.Lock()
    numbers = {"next": 1, "last": 0}
    numbering = threading.Lock()

    def number() -> int:  # Notee's Statements.take_numbers, for one device
        with numbering:
            if numbers["next"] > numbers["last"]:
                s.execute(add_no, (NUMBER_RANGE, service, "TOPIC", TYPE), execution_profile=COUNTER_PROFILE)
                numbers["last"] = int(s.execute(read_no, (service, "TOPIC", TYPE)).one().no)
                numbers["next"] = numbers["last"] - NUMBER_RANGE + 1
            numbers["next"] += 1
            return numbers["next"] - 1

    def work(chunk: list[tuple[str, str]]) -> None:
        mine = []
        for uid, token in chunk:
            t = time.perf_counter()
            at = time.time_ns() // 1_000_000
            no = number()
            batch = BatchStatement(batch_type=BatchType.LOGGED)
            batch.add(slot_row, (no // 30_000, key, topic, no, token, "AOS", uid, at, ""))
            batch.add(occupancy_row, (key, topic, no // 30_000, no // 1_000))
            batch.add(
                index_row,
                (
                    uid,
                    service,
                    "TOPIC",
                    TYPE,
                    topic,
                    token,
                    json.dumps({"key": key, "slot": no // 30_000, "no": no, "os": "AOS", "at": at}),
                ),
            )
            batch.add(token_row, (service, token, uid))
            batch.add(index_row, (uid, service, "TOPIC", TYPE, topic, "", json.dumps({"key": key, "at": at})))
            s.execute(batch)
            counters = BatchStatement(batch_type=BatchType.COUNTER)
            counters.add(add_topic, (1, service, TYPE, topic))
            counters.add(add_count, (1, service, "TOPIC", TYPE))
            s.execute(counters, execution_profile=COUNTER_PROFILE)
            mine.append(time.perf_counter() - t)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work, args=(c_,)) for c_ in _split(users, concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"n": len(users), "wall_s": time.perf_counter() - t0, "latencies": latencies}


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def run(runtime, *, users: int, concurrency: int = 16, repeats: int = 2) -> dict[str, Any]:
    tenant = make_tenant(runtime)
    key = make_template(runtime, tenant.service, "TOPIC", TYPE)
    people = bulk_users(runtime, tenant.service, users * (repeats * 2 + 1))
    api = ApiProcess()
    runs: dict[str, list[dict[str, Any]]] = {"raw": [], "api": []}
    try:
        for r in range(repeats):
            base = r * 2 * users
            raw_users = [(uid, toks[0]) for uid, toks in people[base : base + users]]
            api_users = [uid for uid, _ in people[base + users : base + 2 * users]]
            runs["raw"].append(raw_side(runtime, tenant.service, key, raw_users, f"raw-{r}", concurrency))
            before = api.cpu_s()
            groups = api.metric("notee_subscribe_group_size_count")
            runs["api"].append(api_side(api.port, tenant.api_key, api_users, f"api-{r}", concurrency))
            runs["api"][-1]["server_cpu_s"] = api.cpu_s() - before
            runs["api"][-1]["groups"] = api.metric("notee_subscribe_group_size_count") - groups
    finally:
        api.stop()
    # Once more with rate limits on (the bench tenant's limits are the highest an admin can set, so
    # nothing is refused): what the per-request bucket UPDATE costs. Any 429 fails the figure.
    limited = ApiProcess(rate_limits=True)
    try:
        before = limited.cpu_s()
        extra_users = [uid for uid, _ in people[repeats * 2 * users :]]
        with_limits = api_side(limited.port, tenant.api_key, extra_users, "api-limited", concurrency)
        with_limits_cpu = limited.cpu_s() - before
    finally:
        limited.stop()
    api_rate = statistics.median(x["n"] / x["wall_s"] for x in runs["api"])
    raw_rate = statistics.median(x["n"] / x["wall_s"] for x in runs["raw"])
    api_lat = [v for x in runs["api"] for v in x["latencies"]]
    raw_lat = [v for x in runs["raw"] for v in x["latencies"]]
    return figure(
        "subscribe_ratio",
        Measure("API PUT topic subscription", api_rate, "subs/s"),
        Measure("raw driver same writes", raw_rate, "subs/s"),
        {"users": users, "devices_per_user": 1, "concurrency": concurrency, "repeats": repeats},
        extra={
            "api_p50_ms": _pct(api_lat, 50) * 1000,
            "api_p99_ms": _pct(api_lat, 99) * 1000,
            "raw_p50_ms": _pct(raw_lat, 50) * 1000,
            "raw_p99_ms": _pct(raw_lat, 99) * 1000,
            # CPU of the API process per subscription: one process serves them all
            "api_server_cpu_ms_per_sub": statistics.median(x["server_cpu_s"] / x["n"] for x in runs["api"]) * 1000,
            # subscriptions per store call (notee/api/subscribe_groups.py)
            "api_mean_group_size": statistics.median(x["n"] / max(1.0, x["groups"]) for x in runs["api"]),
            "rate_limited_subs_per_s": with_limits["n"] / with_limits["wall_s"],
            "rate_limited_server_cpu_ms_per_sub": with_limits_cpu / with_limits["n"] * 1000,
        },
    )


# ---------------------------------------------------------------------- bulk_subscribe_ratio
BULK_TYPE = "bench_bulk"


def bulk_api_side(
    port: int, api_key: str, users: list[str], topic: str, chunk: int, concurrency: int
) -> dict[str, Any]:
    """``POST /v1/topics/{type}/{topic}/subscribers`` with ``chunk`` user ids per request, from
    ``concurrency`` client threads; every result must be ``subscribed``."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    chunks = [users[i : i + chunk] for i in range(0, len(users), chunk)]

    def work(mine: list[list[str]]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for ids in mine:
            body = json.dumps({"user_ids": ids}).encode()
            headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
            t = time.perf_counter()
            conn.request("POST", f"/v1/topics/{BULK_TYPE}/{topic}/subscribers", body=body, headers=headers)
            r = conn.getresponse()
            raw = r.read()
            took = time.perf_counter() - t
            with lock:
                latencies.append(took)
                if r.status != 200:
                    errors.append(f"{r.status} {raw[:200]!r}")
                elif json.loads(raw)["subscribed"] != len(ids):
                    errors.append(f"not every user subscribed: {raw[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=work, args=(c,)) for c in _split(chunks, concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise AssertionError(f"{len(errors)} bulk requests failed, first: {errors[0]}")
    return {"n": len(users), "wall_s": wall, "latencies": latencies}


def bulk_raw_side(
    runtime, service: str, key: str, users: list[tuple[str, str]], topic: str, chunk: int, concurrency: int
) -> dict[str, Any]:
    """The writes a bulk subscribe of new one-device users cannot do without, done the leanest way
    the driver allows, per chunk: one ``no`` counter +n and its read; per user its slot row, device
    index row, token index row and user-level row in a logged batch, users sharing batches up to the
    same byte budget as Notee's (``notee.store.cql.binder.BATCH_BYTES``), all in flight at once; one counter
    batch of the topic's subscribers +n and ``count`` +n. No reads:
    Notee also reads every user's index rows before (idempotency; its exclusive locks make a re-read
    after the write unnecessary)."""
    from cassandra.query import BatchStatement, BatchType

    from notee.store.cassandra import COUNTER_PROFILE
    from notee.store.cql.binder import BATCH_BYTES

    s, n, c = runtime.cql, runtime.keyspaces.notification, runtime.keyspaces.numbering
    where = "WHERE service = ? AND notification_method = ? AND notification_type = ?"
    add_no = s.prepare(f"UPDATE {c}.notification SET no = no + ? {where}")
    read_no = s.prepare(f"SELECT no FROM {c}.notification {where}")
    add_count = s.prepare(f"UPDATE {c}.notification SET count = count + ? {where}")
    add_topic = s.prepare(
        f"UPDATE {c}.topic_subscribers SET subscribers = subscribers + ?"
        " WHERE service = ? AND notification_type = ? AND topic = ?"
    )
    token_row = s.prepare(f"INSERT INTO {n}.notification_per_token (service, device_token, user_id) VALUES (?, ?, ?)")
    slot_row = s.prepare(
        f"INSERT INTO {n}.topic_notification (slot, notification_key, topic, no, device_token,"
        " device_os, user_id, registered_at, zone) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    index_row = s.prepare(
        f"INSERT INTO {n}.notification_per_user (user_id, service, notification_method,"
        " notification_type, target, device_token, data) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    occupancy_row = s.prepare(  # the target's (slot, block) row, in the slot row's batch (schema/cql/0005)
        f"INSERT INTO {n}.target_slots (notification_key, target, slot, block, noted) VALUES (?, ?, ?, ?, true)"
    )

    def weight(values: tuple) -> int:  # the same estimate as notee.store.cql.binder.row_bytes
        return 32 + sum(len(v) if isinstance(v, str) else 8 for v in values)

    latencies: list[float] = []
    lock = threading.Lock()
    chunks = [users[i : i + chunk] for i in range(0, len(users), chunk)]

    def work(mine: list[list[tuple[str, str]]]) -> None:
        for part in mine:
            t = time.perf_counter()
            at = time.time_ns() // 1_000_000
            s.execute(add_no, (len(part), service, "TOPIC", BULK_TYPE), execution_profile=COUNTER_PROFILE)
            no = int(s.execute(read_no, (service, "TOPIC", BULK_TYPE)).one().no) - len(part)
            futures = []
            batch, size = BatchStatement(batch_type=BatchType.LOGGED), 0
            in_batch: set[tuple] = set()
            for uid, token in part:
                no += 1
                data = json.dumps({"key": key, "slot": no // 30_000, "no": no, "os": "AOS", "at": at})
                rows = [
                    (slot_row, (no // 30_000, key, topic, no, token, "AOS", uid, at, "")),
                    (occupancy_row, (key, topic, no // 30_000, no // 1_000)),
                    (index_row, (uid, service, "TOPIC", BULK_TYPE, topic, token, data)),
                    (token_row, (service, token, uid)),
                    (index_row, (uid, service, "TOPIC", BULK_TYPE, topic, "", json.dumps({"key": key, "at": at}))),
                ]
                unit = sum(weight(v) for _, v in rows)
                if size and size + unit > BATCH_BYTES:
                    futures.append(s.execute_async(batch))
                    batch, size = BatchStatement(batch_type=BatchType.LOGGED), 0
                    in_batch = set()
                for stmt, values in rows:
                    if stmt is occupancy_row and values in in_batch:
                        continue  # one target_slots row per block and batch, as Notee's write_together
                    in_batch.add(values)
                    batch.add(stmt, values)
                size += unit
            if size:
                futures.append(s.execute_async(batch))
            for f in futures:
                f.result()
            counters = BatchStatement(batch_type=BatchType.COUNTER)
            counters.add(add_topic, (len(part), service, BULK_TYPE, topic))
            counters.add(add_count, (len(part), service, "TOPIC", BULK_TYPE))
            s.execute(counters, execution_profile=COUNTER_PROFILE)
            with lock:
                latencies.append(time.perf_counter() - t)

    threads = [threading.Thread(target=work, args=(c_,)) for c_ in _split(chunks, concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"n": len(users), "wall_s": time.perf_counter() - t0, "latencies": latencies}


def run_bulk(runtime, *, users: int, chunk: int = 1000, concurrency: int = 2, repeats: int = 2) -> dict[str, Any]:
    """bulk_subscribe_ratio: users/s through the bulk endpoint (``chunk`` users per request, new
    one-device users) against the raw writes those subscriptions need; raw, API, raw, API; medians."""
    tenant = make_tenant(runtime)
    key = make_template(runtime, tenant.service, "TOPIC", BULK_TYPE)
    people = bulk_users(runtime, tenant.service, users * repeats * 2)
    api = ApiProcess()
    runs: dict[str, list[dict[str, Any]]] = {"raw": [], "api": []}
    try:
        for r in range(repeats):
            base = r * 2 * users
            raw_users = [(uid, toks[0]) for uid, toks in people[base : base + users]]
            api_users = [uid for uid, _ in people[base + users : base + 2 * users]]
            runs["raw"].append(bulk_raw_side(runtime, tenant.service, key, raw_users, f"raw-{r}", chunk, concurrency))
            before = api.cpu_s()
            runs["api"].append(bulk_api_side(api.port, tenant.api_key, api_users, f"api-{r}", chunk, concurrency))
            runs["api"][-1]["server_cpu_s"] = api.cpu_s() - before
    finally:
        api.stop()
    api_rate = statistics.median(x["n"] / x["wall_s"] for x in runs["api"])
    raw_rate = statistics.median(x["n"] / x["wall_s"] for x in runs["raw"])
    api_lat = [v for x in runs["api"] for v in x["latencies"]]
    return figure(
        "bulk_subscribe_ratio",
        Measure("API POST bulk subscribe", api_rate, "users/s"),
        Measure("raw driver same writes", raw_rate, "users/s"),
        {"users": users, "per_request": chunk, "devices_per_user": 1, "concurrency": concurrency, "repeats": repeats},
        extra={
            "api_request_p50_ms": _pct(api_lat, 50) * 1000,
            "api_request_max_ms": max(api_lat) * 1000,
            "api_server_cpu_ms_per_user": statistics.median(x["server_cpu_s"] / x["n"] for x in runs["api"]) * 1000,
        },
    )
