"""An import chunk whose MySQL transaction is chosen as a deadlock's victim runs that transaction
again by itself (``notee.store.mysql.retried`` in ``usecases.imports.run_chunk``), instead of failing
the chunk so that it is claimed again and redone whole (docs/AUDIENCES.md "Processing")."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import REGISTRY
from sqlalchemy import text

from notee.store import imports_sql
from notee.usecases import imports
from tests.support.lock_waits import running
from tests.support.waiting import wait_for


def _lines(*docs: dict[str, object]) -> bytes:
    return "".join(json.dumps(d) + "\n" for d in docs).encode()


def _retries() -> float:
    labels = {"transaction": "import_rows", "kind": "deadlock", "outcome": "retried"}
    return REGISTRY.get_sample_value("notee_mysql_transaction_retries_total", labels) or 0.0


def test_a_chunk_rolled_back_by_a_deadlock_runs_its_mysql_step_again_not_the_whole_chunk(tenant, runtime):
    service = tenant.service
    for user in ["dl-a", "dl-b", *(f"pad-{i}" for i in range(10))]:
        tenant.user(user)
    with runtime.sessions() as s:
        first, second = s.execute(
            text(
                "SELECT user_id FROM `user` WHERE service = :s AND service_user_id IN ('dl-a', 'dl-b') ORDER BY user_id"
            ),
            {"s": service},
        ).scalars()
    with runtime.sessions.begin() as s:
        body = _lines({"user": "dl-a", "name": "applied"}, {"user": "dl-b", "name": "applied"})
        import_id = imports.start_import(s, service, body, "ndjson", chunk_lines=1000, max_line_bytes=65536)
    claim = imports_sql.claim(runtime.sessions, owner="test", lease_s=60, services=[service])
    assert claim is not None and claim.import_id == import_id
    retried_before = _retries()
    with runtime.sessions() as other, ThreadPoolExecutor(1) as pool:
        # The other transaction holds the chunk's second user and has changed more rows than the chunk
        # (so InnoDB picks the chunk as the victim); the chunk locks its users in user_id order.
        other.execute(
            text(
                "UPDATE `user` SET service_user_name = 'held' WHERE service = :s AND (user_id = :u OR service_user_id LIKE 'pad-%')"
            ),
            {"s": service, "u": second},
        )
        applied = pool.submit(imports.run_chunk, runtime, claim)

        wait_for(
            lambda: running(runtime, f"%{service}%FOR UPDATE%"),
            timeout=30,
            what="the chunk waiting for its second user's lock",
        )
        other.execute(  # the cycle: the chunk holds the first user and waits for the second
            text("SELECT user_id FROM `user` WHERE service = :s AND user_id = :u FOR UPDATE"),
            {"s": service, "u": first},
        )
        other.commit()
        applied.result(timeout=60)  # without the retry: the deadlock's OperationalError
    assert _retries() == retried_before + 1
    with runtime.sessions() as s:
        chunk = s.execute(text("SELECT state, attempts FROM import_chunk WHERE import_id = :i"), {"i": import_id}).one()
        names = s.execute(
            text(
                "SELECT service_user_id, service_user_name FROM `user` WHERE service = :s"
                " AND service_user_id IN ('dl-a', 'dl-b') ORDER BY service_user_id"
            ),
            {"s": service},
        ).all()
        job = s.execute(
            text("SELECT state, lines_done, lines_failed FROM import_job WHERE import_id = :i"), {"i": import_id}
        ).one()
    assert tuple(chunk) == ("done", 1)  # claimed once: the chunk was not given back and redone
    assert [tuple(r) for r in names] == [("dl-a", "applied"), ("dl-b", "applied")]
    assert tuple(job) == ("done", 2, 0)
