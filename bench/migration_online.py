"""Do the schema changes of migrations 0026-0030 and 0037 block writes on a large table? (issue 37,
docs/UPGRADING.md "Online safety, measured").

For each statement that changes an existing table, a scratch database (``notee_online_<pid>``, dropped
at the end) gets a copy of the table with ``ROWS`` rows in the shape it had before the migration
(copied from the bench database's ``device`` and ``user_tag`` of its 1M-user service, or generated
for ``fanout_job`` and ``notification_template``), then the statement runs exactly as the migration
file has it while one writer thread inserts rows into the same table, one autocommit INSERT at a time.
Printed per statement: how long it took, how many writes finished while it ran, the longest a single
write waited, and the algorithm MariaDB chose (the statement is first tried with ``ALGORITHM=INSTANT``,
then ``INPLACE, LOCK=NONE``: the first it accepts is what the plain statement does; ``COPY`` means
writes wait for the whole copy).

Run by hand (it reads this checkout's bench database, ``bench.env.DATABASE``; ``make bench`` fills it):
    .venv/bin/python -m bench.migration_online [ROWS]
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pymysql

from bench import env

SOURCE = env.DATABASE


def connect(db: str | None = None) -> Any:
    return pymysql.connect(
        host="127.0.0.1", user="notee", password=os.environ.get("NOTEE_BENCH_MYSQL_PASSWORD", "notee"),
        database=db, autocommit=True,
    )  # fmt: skip


@dataclass
class Writes:
    """One writer's INSERTs, (start, end) in monotonic seconds, while ``running``."""

    spans: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    running: bool = True


def writer(db: str, insert: str, make: Any, out: Writes) -> None:
    conn = connect(db)
    with conn.cursor() as cur:
        while out.running:
            started = time.monotonic()
            try:
                cur.execute(insert, make())
            except pymysql.MySQLError as exc:
                out.errors.append(str(exc)[:120])
            out.spans.append((started, time.monotonic()))
    conn.close()


@dataclass(frozen=True)
class Case:
    name: str  # the migration and what it does
    table: str
    prepare: list[str]  # build the table in its shape before the migration
    statement: str  # as the migration file has it
    insert: str
    make: Any  # () -> the INSERT's parameters


def measure(db: str, case: Case) -> dict[str, Any]:
    conn = connect(db)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {case.table}")  # a case of the same table before it
        for sql in case.prepare:
            cur.execute(sql)
        cur.execute(f"SELECT COUNT(*) FROM {case.table}")
        rows = cur.fetchone()[0]
        algorithm = probe(cur, case)
        out = Writes()
        thread = threading.Thread(target=writer, args=(db, case.insert, case.make, out))
        thread.start()
        warm = time.monotonic() + 30
        while len(out.spans) < 50 and time.monotonic() < warm:  # the writer's pace before the statement
            time.sleep(0.05)
        baseline = sorted(end - start for start, end in out.spans[-50:])
        started = time.monotonic()
        cur.execute(case.statement)
        ended = time.monotonic()
        time.sleep(1.0)
        out.running = False
        thread.join()
    conn.close()
    # every write whose span overlaps the statement's: how many, and how long the longest waited
    during = [end - start for start, end in out.spans if end >= started and start <= ended]
    return {
        "case": case.name,
        "rows": rows,
        "algorithm": algorithm,
        "statement_s": round(ended - started, 2),
        "writes_during": len(during),
        "longest_write_s": round(max(during, default=0.0), 3),
        "median_write_before_s": round(baseline[len(baseline) // 2], 4) if baseline else None,
        "write_errors": out.errors[:3],
    }


def probe(cur: Any, case: Case) -> str:
    """The least-locking algorithm MariaDB accepts for the statement (run on a throwaway copy)."""
    for clause in ("ALGORITHM=INSTANT", "ALGORITHM=NOCOPY, LOCK=NONE", "ALGORITHM=INPLACE, LOCK=NONE"):
        cur.execute(f"DROP TABLE IF EXISTS probe_{case.table}")
        cur.execute(f"CREATE TABLE probe_{case.table} LIKE {case.table}")
        statement = case.statement.replace(f"ALTER TABLE {case.table}", f"ALTER TABLE probe_{case.table}", 1)
        try:
            cur.execute(f"{statement.rstrip(';')}, {clause}")
            return clause
        except pymysql.MySQLError as exc:
            last = str(exc)[:100]
        finally:
            cur.execute(f"DROP TABLE IF EXISTS probe_{case.table}")
    return f"COPY ({last})"


def cases(rows: int) -> list[Case]:
    uid = lambda: str(uuid.uuid4())  # noqa: E731
    job_cols = (
        "job_id, service, notification_key, notification_method, notification_type, target_kind, target, "
        "payload, task_count, created_at"
    )
    return [
        Case(
            "0026: device ADD COLUMN app_version, app_version_key AFTER locale",
            "device",
            [
                f"CREATE TABLE device LIKE {SOURCE}.device",
                "ALTER TABLE device DROP COLUMN app_version, DROP COLUMN app_version_key",
                f"INSERT INTO device SELECT service, user_id, device_token, device_os, region, locale, created_at, "
                f"updated_at FROM {SOURCE}.device LIMIT {rows}",
            ],
            "ALTER TABLE device\n  ADD COLUMN IF NOT EXISTS app_version     VARCHAR(32)  CHARACTER SET ascii NULL AFTER "
            "locale,\n  ADD COLUMN IF NOT EXISTS app_version_key VARCHAR(100) CHARACTER SET ascii NULL AFTER app_version",
            "INSERT INTO device (service, user_id, device_token, device_os, created_at, updated_at) "
            "VALUES ('W', %s, %s, 'AOS', NOW(6), NOW(6))",
            lambda: (uid(), uid()),
        ),
        Case(
            "0026: fanout_job re-adds CHECK ck_job_target_kind",
            "fanout_job",
            [
                f"CREATE TABLE fanout_job LIKE {SOURCE}.fanout_job",
                f"INSERT INTO fanout_job ({job_cols}) SELECT UUID(), 'S', UUID(), 'TOPIC', 'news', 'TOPIC', '{{}}', "
                f"'{{}}', 1, NOW(6) FROM seq_1_to_{rows}",
                "ALTER TABLE fanout_job DROP CONSTRAINT IF EXISTS ck_job_target_kind",
            ],
            "ALTER TABLE fanout_job ADD CONSTRAINT ck_job_target_kind CHECK (target_kind IN ('TOPIC', 'CYCLE', "
            "'USER', 'COND', 'AUD'))",
            f"INSERT INTO fanout_job ({job_cols}) VALUES (%s, 'W', %s, 'TOPIC', 'news', 'TOPIC', '{{}}', '{{}}', 1, "
            "NOW(6))",
            lambda: (uid(), uid()),
        ),
        Case(
            "0026 revised: fanout_job DROP CONSTRAINT ck_job_target_kind",
            "fanout_job",
            [
                f"CREATE TABLE fanout_job LIKE {SOURCE}.fanout_job",
                f"INSERT INTO fanout_job ({job_cols}) SELECT UUID(), 'S', UUID(), 'TOPIC', 'news', 'TOPIC', '{{}}', "
                f"'{{}}', 1, NOW(6) FROM seq_1_to_{rows}",
            ],
            "ALTER TABLE fanout_job DROP CONSTRAINT IF EXISTS ck_job_target_kind",
            f"INSERT INTO fanout_job ({job_cols}) VALUES (%s, 'W', %s, 'TOPIC', 'news', 'TOPIC', '{{}}', '{{}}', 1, "
            "NOW(6))",
            lambda: (uid(), uid()),
        ),
        Case(
            "0029: user_tag DROP and ADD INDEX ix_user_tag_str, ix_user_tag_num",
            "user_tag",
            [
                f"CREATE TABLE user_tag LIKE {SOURCE}.user_tag",
                "ALTER TABLE user_tag DROP INDEX ix_user_tag_str, DROP INDEX ix_user_tag_num, "
                "ADD INDEX ix_user_tag_str (service, tag_key, value_str), "
                "ADD INDEX ix_user_tag_num (service, tag_key, value_num)",
                f"INSERT INTO user_tag SELECT * FROM {SOURCE}.user_tag LIMIT {rows}",
            ],
            "ALTER TABLE user_tag\n  DROP INDEX IF EXISTS ix_user_tag_str,\n  DROP INDEX IF EXISTS ix_user_tag_num,\n"
            "  ADD INDEX ix_user_tag_str (service, tag_key, kind, value_str),\n"
            "  ADD INDEX ix_user_tag_num (service, tag_key, kind, value_num)",
            "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, updated_at) "
            "VALUES ('W', %s, 'plan', 's', 'pro', NOW(6))",
            lambda: (uid(),),
        ),
        Case(
            "0030: notification_template ADD COLUMN payload JSON",
            "notification_template",
            [
                f"CREATE TABLE notification_template LIKE {SOURCE}.notification_template",
                "ALTER TABLE notification_template DROP COLUMN payload",
                f"INSERT INTO notification_template (service, notification_method, notification_type, "
                f"notification_key, title, body, priority, created_at, updated_at) SELECT 'S', 'TOPIC', "
                f"CONCAT('t', seq), UUID(), 'Hi', 'There', 'high', NOW(6), NOW(6) FROM seq_1_to_{rows}",
            ],
            "ALTER TABLE notification_template\n  ADD COLUMN IF NOT EXISTS payload JSON NULL AFTER variants",
            "INSERT INTO notification_template (service, notification_method, notification_type, notification_key, "
            "title, body, priority, created_at, updated_at) VALUES ('W', 'TOPIC', %s, %s, 'Hi', 'B', 'high', NOW(6), "
            "NOW(6))",
            lambda: (uid()[:30], uid()),
        ),
        Case(
            "0037: webhook_delivery DROP CONSTRAINT ck_webhook_delivery_type",
            "webhook_delivery",
            [
                "CREATE TABLE webhook_delivery (delivery_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, event_id CHAR(36) "
                "CHARACTER SET ascii NOT NULL, endpoint_id CHAR(36) CHARACTER SET ascii NOT NULL, service VARCHAR(32) "
                "NOT NULL, event_type VARCHAR(32) CHARACTER SET ascii NOT NULL, payload JSON NOT NULL, state VARCHAR(9) "
                "CHARACTER SET ascii NOT NULL DEFAULT 'pending', attempts INT NOT NULL DEFAULT 0, next_attempt_at "
                "DATETIME(6) NOT NULL, claim_token CHAR(32) CHARACTER SET ascii NULL, last_status INT NULL, last_error "
                "VARCHAR(500) NULL, created_at DATETIME(6) NOT NULL, resent_at DATETIME(6) NULL, finished_at DATETIME(6) "
                "NULL, PRIMARY KEY (delivery_id), KEY ix_webhook_delivery_due (state, next_attempt_at), KEY "
                "ix_webhook_delivery_endpoint (endpoint_id, delivery_id), KEY ix_webhook_delivery_finished (finished_at), "
                "CONSTRAINT ck_webhook_delivery_state CHECK (state IN ('pending', 'delivered', 'failed')), CONSTRAINT "
                "ck_webhook_delivery_type CHECK (event_type IN ('job.finished', 'job.failed', 'token.pruned', "
                "'dead_letter.created'))) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",  # 0019, no FK
                "INSERT INTO webhook_delivery (event_id, endpoint_id, service, event_type, payload, state, "
                "next_attempt_at, created_at, finished_at) SELECT UUID(), UUID(), 'S', 'job.finished', "
                f"'{{\"data\":{{}}}}', 'delivered', NOW(6), NOW(6), NOW(6) FROM seq_1_to_{rows}",
            ],
            "ALTER TABLE webhook_delivery DROP CONSTRAINT IF EXISTS ck_webhook_delivery_type",
            "INSERT INTO webhook_delivery (event_id, endpoint_id, service, event_type, payload, next_attempt_at, "
            "created_at) VALUES (%s, %s, 'W', 'token.pruned', '{}', NOW(6), NOW(6))",
            lambda: (uid(), uid()),
        ),
    ]


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    only = sys.argv[2:]
    db = f"notee_online_{os.getpid()}"
    admin = connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    try:
        for case in cases(rows):
            if only and not any(o in case.name for o in only):
                continue
            print(measure(db, case), flush=True)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")


if __name__ == "__main__":
    main()
