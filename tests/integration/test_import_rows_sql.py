"""notee/store/import_rows_sql.py's upserts render their VALUES themselves (PyMySQL's escaping, one
multi-row statement): every character a value can hold comes back as it went in, under both string
escaping modes of the session, numbers and NULLs included, and writing the same rows again changes
nothing (``updated_at`` stays)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from notee.core.clock import stored_now
from notee.store import import_rows_sql as rows_sql
from tests.support.registry import make_user

TRICKY = ["it's", 'say "hi"', "back\\slash", "new\nline\r\n", "nul\x00byte", "ctrl-z\x1a", "%s %(x)s", "한국어 ✓", ""]


@pytest.mark.parametrize("mode", ["default", "NO_BACKSLASH_ESCAPES"])
def test_tricky_values_come_back_as_written_and_a_rewrite_changes_nothing(runtime, store_tenant, mode):
    user = make_user(runtime, store_tenant)
    wanted = {f"k{i}": value for i, value in enumerate(TRICKY)}
    rows = [{"user_id": user, "tag_key": k, "kind": "s", "value_str": v, "value_num": None} for k, v in wanted.items()]
    rows.append({"user_id": user, "tag_key": "num", "kind": "n", "value_str": None, "value_num": -0.125})

    def write() -> None:
        with runtime.sessions.begin() as s:
            if mode != "default":
                s.execute(text("SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_BACKSLASH_ESCAPES')"))
            rows_sql.upsert_tags(s, store_tenant, rows, stored_now())
            if mode != "default":
                s.execute(text("SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'NO_BACKSLASH_ESCAPES', '')"))

    def read() -> dict[str, tuple[object, object, object]]:
        with runtime.sessions() as s:
            found = s.execute(
                text(
                    "SELECT tag_key, value_str, value_num, updated_at FROM user_tag WHERE service = :s AND user_id = :u"
                ),
                {"s": store_tenant, "u": user},
            )
            return {r.tag_key: (r.value_str, r.value_num, r.updated_at) for r in found}

    write()
    first = read()
    assert {k: first[k][0] for k in wanted} == wanted
    assert first["num"][:2] == (None, -0.125)
    write()
    assert read() == first  # the same rows again: updated_at included, nothing changed


@pytest.mark.parametrize("mode", ["default", "NO_BACKSLASH_ESCAPES"])
def test_users_are_found_by_tricky_service_ids_in_both_modes(runtime, store_tenant, mode):
    # users_by_service_id renders its IN list itself (_Literals): each id must match exactly itself.
    ids = [f"user {value}" for value in TRICKY]
    with runtime.sessions.begin() as s:
        rows_sql.upsert_users(
            s, store_tenant, [(u, f"00000000-0000-4000-8000-{i:012d}", {}) for i, u in enumerate(ids)], stored_now()
        )
    with runtime.sessions.begin() as s:
        if mode != "default":
            s.execute(text("SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_BACKSLASH_ESCAPES')"))
        found = rows_sql.users_by_service_id(s, store_tenant, [*ids, "user absent", "user it''s"])
        if mode != "default":
            s.execute(text("SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'NO_BACKSLASH_ESCAPES', '')"))
    assert {u: r.user_id for u, r in found.items()} == {
        u: f"00000000-0000-4000-8000-{i:012d}" for i, u in enumerate(ids)
    }
