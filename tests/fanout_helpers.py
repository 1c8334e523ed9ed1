"""Helpers for the fan-out tests: seed topic subscribers straight into Cassandra (prepared inserts
with execute_concurrent, numbered from the real counter) and make TOPIC publish jobs."""

from __future__ import annotations

import logging
import time

from cassandra.concurrent import execute_concurrent
from cassandra.query import BatchStatement, BatchType
from sqlalchemy import text

from notee.fanout import jobs
from notee.vocabulary import SLOT_SIZE, TopicTarget
from notee.store.cql import for_runtime
from tests import factories


def seed_topic(runtime, service: str, type_: str, key: str, topic: str, n: int, *, os: str = "AOS",
               prefix: str | None = None) -> list[str]:
    """``n`` subscribers of (template key, topic): numbers come from the (service, TOPIC, type) ``no``
    counter exactly as subscribe allocates them; rows land in slots no // 30000."""
    st = for_runtime(runtime)
    top = st.allocate_numbers(service, "TOPIC", type_, n)
    first = top - n + 1
    prefix = prefix or f"{service}-{topic}-"
    tokens = [f"{prefix}{i:07d}" for i in range(n)]
    now = int(time.time() * 1000)
    rows = [((first + i) // SLOT_SIZE, key, topic, first + i, tok, os, f"user-{i}", now)
            for i, tok in enumerate(tokens)]
    # Single-partition UNLOGGED batches of 100 prepared inserts (one mutation each server-side):
    # rows arrive in number order, so a batch never spans two slots.
    batches = []
    for i in range(0, len(rows), 100):
        chunk = rows[i:i + 100]
        for slot in sorted({r[0] for r in chunk}):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for r in chunk:
                if r[0] == slot:
                    batch.add(st.topic_insert, r)
            batches.append((batch, ()))
    for ok, result in execute_concurrent(runtime.cql, batches, concurrency=32, raise_on_first_error=False):
        assert ok, result
    return tokens


def topic_template(runtime, service: str, type_: str = "news", title: str = "Hi {{name}}") -> str:
    """The service (with FCM credentials, so its jobs can send) and a TOPIC template; its key."""
    factories.make_service(runtime, service, fcm=True)
    return factories.make_template(runtime, service, "TOPIC", type_, title=title)


def topic_job(runtime, service: str, key: str, topic: str, *, type_: str = "news", idempotency_key=None,
              variables=None, overrides=None):
    with runtime.sessions.begin() as session:  # the caller owns the commit
        return jobs.create_job(runtime, session, service=service, notification_key=key, method="TOPIC",
                               type_=type_, target=TopicTarget(topic), idempotency_key=idempotency_key,
                               variables=variables if variables is not None else {"name": "there"},
                               overrides=overrides)


def count_rows(runtime, service: str) -> tuple[int, int]:
    with runtime.engine.connect() as conn:
        jobs_n = conn.execute(text("SELECT COUNT(*) FROM fanout_job WHERE service = :s"), {"s": service}).scalar()
        tasks_n = conn.execute(text("SELECT COUNT(*) FROM fanout_task t JOIN fanout_job j USING (job_id)"
                                    " WHERE j.service = :s"), {"s": service}).scalar()
    return int(jobs_n), int(tasks_n)


def run_worker_until_idle(runtime, services: list[str], *, lanes: int = 2, fetch_size: int | None = None):
    """Run an in-process worker with the production sender until the services' tasks are all done."""
    import asyncio

    from notee.delivery import DeliverySender
    from notee.fanout.worker import Worker

    async def go():
        sender = DeliverySender(runtime)
        worker = Worker(runtime, sender, lanes=lanes, services=services, fetch_size=fetch_size)
        try:
            await worker.run(until_idle=True)
        finally:
            await sender.close()
        return worker

    return asyncio.run(go())


def emulator_runtime():
    """A Runtime whose settings point at the emulator (the emulator fixture exported its URL/CA)."""
    from notee.runtime import Runtime
    from notee.settings import Settings

    return Runtime(Settings())


def per_token_counts(emulator, tokens: list[str], api: str = "fcm", threads: int = 8) -> dict[str, int]:
    """Deliveries per token as the emulator saw them. Its control API answers one token per request;
    a few keep-alive HTTP/1.1 clients in threads are the fastest way to ask (~2,000 tokens/s)."""
    import ssl
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    ctx = ssl.create_default_context(cafile=emulator.ca_file)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not one INFO line per token

    def chunk(part: list[str]) -> list[tuple[str, int]]:
        with httpx.Client(base_url=emulator.url, verify=ctx, timeout=30) as http:
            out = []
            for token in part:
                r = http.get("/_emu/deliveries", params={"token": token})
                r.raise_for_status()
                out.append((token, int(r.json()[api])))
            return out

    with ThreadPoolExecutor(threads) as pool:
        parts = pool.map(chunk, [tokens[i::threads] for i in range(threads)])
        return {token: n for part in parts for token, n in part}


def start_worker(service: str, log_path, *, lanes: int = 2, env: dict[str, str] | None = None):
    """A real `notee worker` process scoped to one test tenant (stdout/stderr to ``log_path``)."""
    import os
    import subprocess
    import sys

    out = open(log_path, "ab")
    return subprocess.Popen([sys.executable, "-m", "notee", "worker", "--lanes", str(lanes), "--service", service],
                            env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)


def job_progress(runtime, job_id: str):
    from notee.store import job_queue as store

    with runtime.sessions() as s:
        return store.get_job(s, job_id), store.progress(s, job_id)


def wait_for(predicate, *, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll until ``predicate()`` is truthy; fail the test after ``timeout`` s (a bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
