"""The benchmarks' stores are their checkout's own (bench/env.py): two worktrees running benches
never share, or migrate, one database or keyspace, the way the tests' stores are the checkout's own."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from bench import env

CHECKOUT = Path(env.__file__).resolve().parents[1]
TAG = hashlib.sha256(str(CHECKOUT).encode()).hexdigest()[:6]


def _use(monkeypatch, url: str, keyspace: str | None = None) -> tuple[str, str, str]:
    monkeypatch.setenv("NOTEE_MYSQL_URL", url)
    for name in ("NOTIFICATION", "NUMBERING"):
        if keyspace is None:
            monkeypatch.delenv(f"NOTEE_CASSANDRA_KEYSPACE_{name}", raising=False)
        else:
            monkeypatch.setenv(f"NOTEE_CASSANDRA_KEYSPACE_{name}", f"{keyspace}_{name.lower()}")
    monkeypatch.setenv("NOTEE_CREDENTIALS_KEY", os.environ.get("NOTEE_CREDENTIALS_KEY") or "x" * 44)
    env.use_bench_stores()
    return (
        os.environ["NOTEE_MYSQL_URL"].rsplit("/", 1)[1],
        os.environ["NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION"],
        os.environ["NOTEE_CASSANDRA_KEYSPACE_NUMBERING"],
    )


def test_the_bench_stores_are_named_after_the_checkout(monkeypatch):
    db, notification, numbering = _use(monkeypatch, "mysql+pymysql://notee:notee@127.0.0.1:3306/notee")
    assert (db, notification, numbering) == (
        f"notee_bench_{TAG}",
        f"notification_bench_{TAG}",
        f"numbering_bench_{TAG}",
    )
    assert db == env.DATABASE  # what bench/migration_online.py reads


def test_a_store_name_that_already_says_bench_is_kept(monkeypatch):
    db, notification, _ = _use(monkeypatch, "mysql+pymysql://notee:notee@127.0.0.1:3306/notee_perf3_bench", "p3_bench")
    assert (db, notification) == ("notee_perf3_bench", "p3_bench_notification")
