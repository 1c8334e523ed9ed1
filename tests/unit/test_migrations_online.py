"""Migrations stay online-safe on large tables (docs/DEPLOY.md "Online safety, measured"): MariaDB adds
a CHECK constraint to an existing table only by copying it, holding every write meanwhile (58 s at 1M
fanout_job rows, bench/migration_online.py), so no migration from 0026 on does it; the revised 0026
is accepted where its first text was applied, and nothing else changed after it was applied is."""

from __future__ import annotations

import re

import pytest

from notee.core.settings import Settings
from notee.usecases import migrate, retention

FIRST_ONLINE_RULE = 26  # the first file measured (bench/migration_online.py); earlier ones predate it
_ADD_CHECK = re.compile(r"ALTER\s+TABLE\s+(\S+)[^;]*ADD\s+(CONSTRAINT\s+\S+\s+)?CHECK", re.I | re.S)


def test_no_migration_adds_a_check_to_an_existing_table():
    for m in migrate.load(migrate.SCHEMA_DIR / "mysql"):
        if m.version < FIRST_ONLINE_RULE:
            continue
        created = set(re.findall(r"CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)", m.text, re.I))
        for statement in m.statements():
            found = _ADD_CHECK.search(statement)
            assert found is None or found.group(1).strip("`") in created, (
                f"{m.name}: a CHECK added to an existing table copies it and blocks its writes: {statement[:120]}"
            )


def test_the_first_text_of_0026_is_accepted_as_applied_and_any_other_edit_is_not():
    files = migrate.load(migrate.SCHEMA_DIR / "mysql")
    applied = {m.version: m.checksum for m in files if m.version <= 30}
    [first] = migrate.REVISED["mysql"][26]
    pending = migrate._pending(applied | {26: first}, files, store="mysql")
    assert 26 not in {m.version for m in pending} and 35 in {m.version for m in pending}
    with pytest.raises(migrate.HistoryMismatch):
        migrate._pending(applied | {26: "0" * 64}, files, store="mysql")
    with pytest.raises(migrate.HistoryMismatch):
        migrate._pending(applied | {27: first}, files, store="mysql")


def test_the_first_texts_of_0004_and_0039_are_accepted_as_applied():
    """Their retention comments were corrected (SQL unchanged): a database that applied the first texts migrates."""
    files = migrate.load(migrate.SCHEMA_DIR / "mysql")
    applied = {m.version: m.checksum for m in files}
    for version in (4, 39):
        [first] = migrate.REVISED["mysql"][version]
        assert migrate._pending(applied | {version: first}, files, store="mysql") == []


def test_the_retention_comments_of_jobs_and_push_minute_say_what_the_retention_run_does():
    """0004 named jobs' retention "default 14" and 0039 "jobs 14" after jobs began to live as long as their
    receipts (30 days by default); the comments must give the windows the retention run really applies."""
    files = {m.version: m.text for m in migrate.load(migrate.SCHEMA_DIR / "mysql")}
    jobs_days = retention.job_retention_days(Settings())
    job_line = re.search(r"-- retention: (.*\n(?:-- .*\n)*?)CREATE TABLE IF NOT EXISTS fanout_job\b", files[4])
    assert job_line and f"(default {jobs_days}" in job_line.group(1), job_line
    assert "retention_days" in job_line.group(1) and "receipts_retention_days" in job_line.group(1)
    kept = retention.PUSH_MINUTES_KEPT.days
    assert f"-- retention: {kept} days after minute_utc" in files[39]
    assert f"live {kept} days" in files[39] and "jobs 14" not in files[39]
    assert f": {jobs_days} by default" in files[39]
