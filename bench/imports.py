"""Bulk import (docs/AUDIENCES.md "Import and export").

``import_users_per_s`` (``run_users``): new users with a name, locale, time zone, four tags and one
device each (no topics), from an NDJSON file: the upload's split into chunks kept in MySQL
(``usecases.imports.start_import``, what ``POST /v1/imports`` runs) plus every chunk applied by the
worker's import-lane code (``imports_sql.claim`` + ``usecases.imports.run_chunk``) in ``lanes``
threads of this process, until the import is done; the heap built before is frozen first, as the
worker freezes its startup heap (``notee.worker.process.freeze_startup_heap``). Users/s over that whole span; side figures: the
split's share, MySQL rows written per second.

``import_subscriptions_ratio`` (``run_subscriptions``): topic subscriptions/s of an import of lines
``{"user": ..., "topics": [one topic]}`` for users that exist with one device each (the import's
work is then the subscriptions), against the raw driver doing the writes those subscriptions need
(``bench.subscribe.bulk_raw_side``, the ceiling ``bulk_subscribe_ratio`` uses), at the same
concurrency; raw, import, raw, import; medians.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.receipts import _servers_cpu  # the shared servers' CPU, found by their listening port
from bench.report import Measure, figure
from bench.subscribe import BULK_TYPE, bulk_raw_side
from bench.tenant import bulk_users, make_template, make_tenant


def _import(runtime, service: str, body: bytes, lanes: int, chunk_lines: int) -> dict[str, float]:
    """Upload then apply every chunk in ``lanes`` threads; seconds of the split and of the whole."""
    from notee.store import imports_sql
    from notee.usecases import imports
    from notee.worker.process import freeze_startup_heap

    freeze_startup_heap()  # as ``notee worker`` does once started: this process's set-up is its startup
    servers0, cpu0, load0 = _servers_cpu(runtime), time.process_time(), os.getloadavg()[0]
    t0 = time.perf_counter()
    with runtime.sessions.begin() as session:
        imports.start_import(
            session,
            service,
            body,
            "ndjson",
            chunk_lines=chunk_lines,
            max_line_bytes=runtime.settings.import_max_line_bytes,
        )
    split = time.perf_counter() - t0

    def lane(n: int) -> int:
        done = 0
        while (
            claim := imports_sql.claim(runtime.sessions, owner=f"bench-{n}", lease_s=300, services=[service])
        ) is not None:
            imports.run_chunk(runtime, claim)
            done += 1
        return done

    with ThreadPoolExecutor(lanes) as pool:
        chunks = sum(pool.map(lane, range(lanes)))
    wall = time.perf_counter() - t0
    cpu, servers1 = time.process_time() - cpu0, _servers_cpu(runtime)
    spent = {f"{k}_cpu_s": None if v is None or servers1[k] is None else servers1[k] - v for k, v in servers0.items()}
    return {
        "split_s": split,
        "wall_s": wall,
        "chunks": chunks,
        "python_cpu_s": cpu,
        "load": max(load0, os.getloadavg()[0]),
    } | spent


def _user_line(r: int, i: int) -> str:
    return json.dumps(
        {
            "user": f"imp-{r}-{i}",
            "name": f"User {i}",
            "locale": "ko-KR",
            "timezone": "Asia/Seoul",
            "tags": {"plan": "pro" if i % 3 else "free", "age": 20 + i % 60, "beta": i % 2 == 0, "score": i / 7},
            "devices": [
                {
                    "token": f"bench-imp-{r}-{i:08d}-" + "x" * 140,
                    "platform": "AOS",
                    "app_version": "5.2.1",
                    "country": "KR",
                }
            ],
        },
        separators=(",", ":"),
    )


def run_users(runtime, *, users: int, lanes: int = 2, chunk_lines: int = 1000, repeats: int = 1) -> dict[str, Any]:
    """import_users_per_s: users/s of an import of new users with tags and one device each."""
    tenant = make_tenant(runtime)
    runs = []
    for r in range(repeats):
        body = ("\n".join(_user_line(r, i) for i in range(users)) + "\n").encode()
        runs.append(_import(runtime, tenant.service, body, lanes, chunk_lines))
    rate = statistics.median(users / x["wall_s"] for x in runs)
    return figure(
        "import_users_per_s",
        Measure("import: users with 4 tags and 1 device", rate, "users/s"),
        Measure("users per run", users, "users"),
        {
            "users": users,
            "tags_per_user": 4,
            "devices_per_user": 1,
            "lanes": lanes,
            "chunk_lines": chunk_lines,
            "repeats": repeats,
        },
        value=rate,
        extra={
            "split_share": statistics.median(x["split_s"] / x["wall_s"] for x in runs),
            "mysql_rows_per_s": rate * 6,  # the user, its device, its 4 tags
            # CPU per user over the timed span: this process (the split and both lanes) and the two
            # servers, whoever caused it (a shared server serves other runs too: read beside ``load``)
            **_cpu_per_item(runs, users),
        },
    )


def run_subscriptions(
    runtime, *, users: int, lanes: int = 2, chunk_lines: int = 1000, repeats: int = 2
) -> dict[str, Any]:
    """import_subscriptions_ratio: subscriptions/s of an import of one topic for existing one-device
    users, against the raw driver's writes of the same subscriptions; raw, import, raw, import."""
    tenant = make_tenant(runtime)
    key = make_template(runtime, tenant.service, "TOPIC", BULK_TYPE)
    people = bulk_users(runtime, tenant.service, users * repeats * 2)  # service_user_id u<i>
    runs: dict[str, list[dict[str, Any]]] = {"raw": [], "import": []}
    for r in range(repeats):
        base = r * 2 * users
        raw_users = [(uid, toks[0]) for uid, toks in people[base : base + users]]
        runs["raw"].append(bulk_raw_side(runtime, tenant.service, key, raw_users, f"raw-{r}", chunk_lines, lanes))
        lines = (
            json.dumps({"user": f"u{i}", "topics": [{"type": BULK_TYPE, "topic": f"imp-{r}"}]})
            for i in range(base + users, base + 2 * users)
        )
        body = ("\n".join(lines) + "\n").encode()
        runs["import"].append({"n": users} | _import(runtime, tenant.service, body, lanes, chunk_lines))
    imp = statistics.median(x["n"] / x["wall_s"] for x in runs["import"])
    extra = _cpu_per_item(runs["import"], users)
    raw = statistics.median(x["n"] / x["wall_s"] for x in runs["raw"])
    return figure(
        "import_subscriptions_ratio",
        Measure("import: topic subscriptions of existing one-device users", imp, "subscriptions/s"),
        Measure("raw driver same writes", raw, "subscriptions/s"),
        {"users": users, "lanes": lanes, "chunk_lines": chunk_lines, "repeats": repeats},
        extra=extra,
    )


def _cpu_per_item(runs: list[dict[str, Any]], items: int) -> dict[str, Any]:
    """Median µs of CPU per imported item of this process and of each server, and the highest load."""
    out: dict[str, Any] = {"load": max(x["load"] for x in runs)}
    for key in ("python", "mariadb", "cassandra"):
        values = [x[f"{key}_cpu_s"] for x in runs if x.get(f"{key}_cpu_s") is not None]
        out[f"{key}_cpu_us_per_item"] = statistics.median(values) / items * 1e6 if values else None
    return out
