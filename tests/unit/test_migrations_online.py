"""Migrations stay online-safe on large tables (docs/DEPLOY.md "Online safety, measured"): MariaDB adds
a CHECK constraint to an existing table only by copying it, holding every write meanwhile (58 s at 1M
fanout_job rows, bench/migration_online.py), so no migration from 0026 on does it; the revised 0026
is accepted where its first text was applied, and nothing else changed after it was applied is."""

from __future__ import annotations

import re

import pytest

from notee.usecases import migrate

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
