"""notee/store/import_rows_sql.py's upserts render their VALUES themselves (PyMySQL's escaping, one
multi-row statement): every character a value can hold comes back as it went in, under both string
escaping modes of the session, numbers and NULLs included, and writing the same rows again changes
nothing (``updated_at`` stays)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from notee.core.clock import stored_now
from notee.store import import_rows_sql as rows_sql
from notee.store import imports_sql
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


def test_parents_locked_skips_the_foreign_key_checks_inside_only_and_restores_them_after_an_error(
    runtime, store_tenant
):
    # The import writes device and tag rows of users its transaction holds locked without the checks;
    # the connection must come back with them on, or a later transaction on it could write orphans.
    def checks(s) -> int:
        return int(s.execute(text("SELECT @@SESSION.foreign_key_checks")).scalar_one())

    with runtime.sessions.begin() as s:
        with rows_sql.parents_locked(s):
            assert checks(s) == 0
        assert checks(s) == 1
        with pytest.raises(RuntimeError, match="inside"), rows_sql.parents_locked(s):
            raise RuntimeError("inside")
        assert checks(s) == 1
    orphan = {"user_id": "00000000-0000-4000-8000-00000000dead", "device_token": "t" * 40, "device_os": "AOS"}
    with pytest.raises(IntegrityError), runtime.sessions.begin() as s:  # still refused outside the block
        rows_sql.upsert_devices(s, store_tenant, [orphan], stored_now())


@pytest.mark.parametrize("mode", ["default", "NO_BACKSLASH_ESCAPES"])
def test_chunk_lines_come_back_from_the_claim_as_uploaded_in_both_modes(runtime, store_tenant, mode):
    # NDJSON chunks are kept as tab-separated text with a lexer-only escaping (imports_sql.encode_lines,
    # Literals.text); CSV records stay JSON: both come back exactly, whatever characters a line holds.
    ndjson = [(i + 1, f'{{"user": "u{i}", "name": {value!r}}}'.replace("\n", "\\n")) for i, value in enumerate(TRICKY)]
    ndjson += [(20, 'tab\there "quoted" \\ back'), (21, ""), (22, "raw\x00nul\x1a'\\0")]
    csv_rows = [(2, ["u1", "multi\nline", 'it\'s "x" \\ \x00']), (3, ["u2", "", ""])]
    got = {}
    for fmt, records in (("ndjson", ndjson), ("csv", csv_rows)):
        job = imports_sql.NewImport(str(uuid.uuid4()), store_tenant, fmt, None, len(records), stored_now())
        with runtime.sessions.begin() as s:
            if mode != "default":
                s.execute(text("SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_BACKSLASH_ESCAPES')"))
            imports_sql.create(s, job, [records])
            if mode != "default":
                s.execute(text("SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'NO_BACKSLASH_ESCAPES', '')"))
        claim = imports_sql.claim(runtime.sessions, owner="t", lease_s=60, services=[store_tenant])
        assert claim is not None and claim.import_id == job.import_id
        got[fmt] = claim.lines
        with runtime.sessions.begin() as s:
            imports_sql.mark_done(s, claim, 0)
    assert got == {"ndjson": ndjson, "csv": csv_rows}
    assert imports_sql.encode_lines(ndjson).startswith(imports_sql.LINES_TEXT)
    assert imports_sql.encode_lines(csv_rows).startswith("[")
