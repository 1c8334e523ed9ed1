"""API process CPU per request, by kind: what the HTTP stack costs, apart from the subscribe path.

``python -m bench.api_cpu [--n 1000] [--rounds 2] [--tree DIR ...]`` starts ``notee api`` (the
bench's ``ApiProcess``, rate limits off like ``subscribe_ratio``), drives ``n`` requests of each kind
from ``concurrency`` keep-alive clients after a warm-up, and reads the API process's CPU (user +
system, psutil) before and after each kind:

* ``floor``: the subscribe route with a user id that is not a UUID (422): the key cached, uvicorn,
  the middlewares, the edge, routing to the route, its dependencies and path validation, an error
  answer: everything between the socket and the route function, and nothing of it;
* ``unmatched``: an authenticated ``GET`` of a path no route serves (404): routing tries every
  route (the worst case of routing, not a floor);
* ``get_user``: ``GET /v1/users/{id}`` of an existing user (the floor plus one MySQL query on a
  worker thread, a response model);
* ``subscribe``: ``PUT /v1/users/{id}/subscriptions/topic/{type}/{topic}``, each user once (what
  ``subscribe_ratio`` reports as ``api_server_cpu_ms_per_sub``).

``--tree DIR`` (repeatable) serves the API from another source tree (``PYTHONPATH=DIR``, same venv):
an export of older code measured in the same run, trees alternating round by round. Medians of the
rounds are printed, ms of API CPU per request. Not part of ``make bench``: a tool to take the HTTP
stack apart (docs/BENCHMARKS.md, "The API's HTTP stack").
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import threading
import uuid
from typing import Any

from bench import env
from bench.subscribe import TYPE, ApiProcess, _split
from bench.tenant import bulk_users, make_template, make_tenant

KINDS = ("floor", "unmatched", "get_user", "subscribe")


def drive(port: int, api_key: str, requests: list[tuple[str, str]], concurrency: int) -> None:
    """Send every (method, path) once from ``concurrency`` keep-alive connections; any answer other
    than the one its kind expects fails the run."""
    failures: list[str] = []
    lock = threading.Lock()

    def work(chunk: list[tuple[str, str]]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": f"Bearer {api_key}", "Content-Length": "0"}
        for method, path in chunk:
            conn.request(method, path, headers=headers)
            r = conn.getresponse()
            body = r.read()
            expected = (404,) if path.startswith("/v1/nothing") else (422,) if "/not-a-uuid-" in path else (200, 201)
            if r.status not in expected:
                with lock:
                    failures.append(f"{method} {path}: {r.status} {body[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=work, args=(c,)) for c in _split(requests, concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise AssertionError(f"{len(failures)} requests failed, first: {failures[0]}")


def requests_of(kind: str, users: list[str], topic: str) -> list[tuple[str, str]]:
    if kind == "floor":
        return [("PUT", f"/v1/users/not-a-uuid-{i}/subscriptions/topic/{TYPE}/{topic}") for i in range(len(users))]
    if kind == "unmatched":
        return [("GET", f"/v1/nothing/{uuid.uuid4()}") for _ in users]
    if kind == "get_user":
        return [("GET", f"/v1/users/{u}") for u in users]
    return [("PUT", f"/v1/users/{u}/subscriptions/topic/{TYPE}/{topic}") for u in users]


def start_api(tree: str | None) -> ApiProcess:
    """An API process serving ``tree`` (None: this checkout)."""
    saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    if tree is not None:
        # `python -m notee` puts its working directory first on sys.path: run it from the tree too
        os.environ["PYTHONPATH"] = tree
        os.chdir(tree)
    try:
        return ApiProcess()
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def measure(
    tree: str | None, label: str, api_key: str, users: list[str], n: int, concurrency: int, kinds: list[str]
) -> dict[str, float]:
    """One API process serving ``tree`` (None: this checkout): ms of its CPU per request, per kind."""
    api = start_api(tree)
    out: dict[str, float] = {}
    try:
        warm = users[: max(50, n // 10)]
        for kind in KINDS:  # warm-up: every code path imported, pools filled, keys cached
            drive(api.port, api_key, requests_of(kind, warm, f"warm-{label}"), concurrency)
        for kind in kinds:
            batch = requests_of(kind, users[len(warm) : len(warm) + n], label)
            before = api.cpu_s()
            drive(api.port, api_key, batch, concurrency)
            out[kind] = (api.cpu_s() - before) / len(batch) * 1000
    finally:
        api.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api_cpu", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="requests per kind and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tree", action="append", default=[], help="another source tree to serve from")
    parser.add_argument("--kinds", nargs="*", choices=KINDS, default=list(KINDS))
    args = parser.parse_args(argv)
    env.use_bench_stores()
    from notee.core.settings import Settings
    from notee.store.runtime import Runtime

    env.migrate(Settings())
    runtime = Runtime(Settings())
    trees: list[str | None] = [None, *args.tree]
    results: dict[str | None, list[dict[str, float]]] = {t: [] for t in trees}
    try:
        tenant = make_tenant(runtime)
        make_template(runtime, tenant.service, "TOPIC", TYPE)
        per_process = args.n + max(50, args.n // 10)
        people = [uid for uid, _ in bulk_users(runtime, tenant.service, per_process * len(trees) * args.rounds)]
        chunks = iter(people[i : i + per_process] for i in range(0, len(people), per_process))
        for r in range(args.rounds):
            for tree in trees if r % 2 == 0 else list(reversed(trees)):
                got = measure(
                    tree,
                    f"t{r}-{trees.index(tree)}",
                    tenant.api_key,
                    next(chunks),
                    args.n,
                    args.concurrency,
                    args.kinds,
                )
                results[tree].append(got)
                print(f"round {r} {tree or 'this checkout'}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in got.items()))
    finally:
        runtime.close()
    print(f"\nAPI process CPU per request, ms (median of {args.rounds} rounds, {args.n} requests each):")
    for tree, rounds in results.items():
        line: dict[str, Any] = {k: statistics.median(x[k] for x in rounds) for k in args.kinds}
        print(f"  {tree or 'this checkout'}: " + ", ".join(f"{k} {v:.3f}" for k, v in line.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
