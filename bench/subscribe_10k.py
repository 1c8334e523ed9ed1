"""Measure (not assert) the time to subscribe 10,000 users to a topic through a real `notee api`.

    .venv/bin/python -m bench.subscribe_10k [--users 10000] [--threads 16]

Runs against the bench stores (bench/env.py). Users and one device each are created straight in
MySQL first (not measured). Then, through HTTP on a real uvicorn server:
  bulk    POST /v1/topics/{type}/{topic}/subscribers, 1,000 user ids per request
  single  PUT  /v1/users/{id}/subscriptions/topic/{type}/{topic}, one request per user, N client threads
Each run subscribes every user to a fresh topic, so every request materialises one device row.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import httpx

from bench import env


def _seed_users(runtime, service: str, n: int) -> list[str]:
    from notee.store import users_sql

    now = datetime.now(UTC).replace(tzinfo=None)
    ids = [str(uuid.uuid4()) for _ in range(n)]
    with runtime.sessions.begin() as s:
        for i, u in enumerate(ids):
            users_sql.upsert_user(
                s,
                service=service,
                service_user_id=f"bench-{i}",
                new_user_id=u,
                now=now,
                profile={"service_user_name": "bench"},
            )
            users_sql.upsert_device(
                s,
                service=service,
                user_id=u,
                token=f"bench-{secrets.token_hex(16)}",
                os="AOS" if i % 2 else "IOS",
                region="KR",
                now=now,
            )
    return ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()

    env.use_bench_stores()
    os.environ.setdefault("NOTEE_ADMIN_TOKEN", "bench-admin-" + secrets.token_urlsafe(32))
    from notee.core.settings import Settings
    from notee.store.runtime import Runtime

    settings = Settings()
    env.migrate(settings)
    port = env.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "notee", "api", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runtime = Runtime(settings)
    try:
        base = f"http://127.0.0.1:{port}"
        admin = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
        with httpx.Client(base_url=base, timeout=60) as http:
            for _ in range(300):
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            service = "B" + secrets.token_hex(5).upper()
            http.post(
                "/v1/admin/services", json={"service": service, "display_name": "bench"}, headers=admin
            ).raise_for_status()
            key = http.post(f"/v1/admin/services/{service}/api-keys", json={"label": "bench"}, headers=admin)
            key.raise_for_status()
            h = {"Authorization": f"Bearer {key.json()['api_key']}"}
            http.put("/v1/templates/TOPIC/news", json={"title": "t", "body": "b"}, headers=h).raise_for_status()
            users = _seed_users(runtime, service, args.users)

            t0 = time.perf_counter()
            for i in range(0, len(users), 1000):
                r = http.post("/v1/topics/news/bulk/subscribers", json={"user_ids": users[i : i + 1000]}, headers=h)
                r.raise_for_status()
                assert r.json()["subscribed"] == len(users[i : i + 1000])
            bulk_s = time.perf_counter() - t0

        def one(u: str) -> int:
            return client.put(f"/v1/users/{u}/subscriptions/topic/news/single", headers=h).status_code

        with httpx.Client(base_url=base, timeout=60, limits=httpx.Limits(max_connections=args.threads)) as client:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.threads) as pool:
                codes = list(pool.map(one, users))
            single_s = time.perf_counter() - t0
        assert codes.count(201) == len(users), {c: codes.count(c) for c in set(codes)}  # each one new
        print(
            f"users={len(users)} bulk(1000/request)={bulk_s:.1f}s ({len(users) / bulk_s:.0f} users/s) "
            f"single(threads={args.threads})={single_s:.1f}s ({len(users) / single_s:.0f} users/s) "
            f"cpus={os.cpu_count()}"
        )
    finally:
        runtime.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
