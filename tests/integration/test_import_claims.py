"""The import chunk claim (``imports_sql.claim``) on the real MariaDB. A locking read locks each row
it reads for as long as InnoDB evaluates it (at READ COMMITTED a row that does not match is let go
at once); a claim meeting such a row skips it (SKIP LOCKED does not wait), and one that skipped its
last candidate came back empty with chunks queued: its lane idled a poll (``IDLE_POLL_S``, 0.5 s).
The claim of a worker serving some tenants read import_chunk in primary-key order, through every
chunk of every tenant (done ones too), so every tenant's claims kept skipping each other's rows (the
official CI of stop 43: an in-process claim loop ended with 2 of its 12 chunks untaken while other
tests' workers claimed). Now a plain read ranks the claim's own candidates and only the chunk taken
is locked, by its key (migration 0043's index serves a tenant's read). The rows-read test failed on
the old claim (it read 1,104 rows: every chunk in this checkout's database); the other two guard the
new claim's locking (a claim in progress holds no chunk but its own: so did the old one, measured)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from notee.store import imports_sql
from notee.store.imports_sql import NewImport
from notee.store.mysql import make_engine, make_sessionmaker
from tests.support.lock_waits import race_claims, running
from tests.support.registry import make_service
from tests.support.tenants import new_service_id
from tests.support.waiting import wait_for

_MADE: list[str] = []


@pytest.fixture(autouse=True)
def _forget_imports(runtime) -> Iterator[None]:
    """The imports a test made go with it: no worker of another test is to apply what is left."""
    yield
    with runtime.sessions.begin() as session:
        while _MADE:
            session.execute(text("DELETE FROM import_job WHERE import_id = :i"), {"i": _MADE.pop()})


def _import(runtime, service: str, chunks: int, *, first: bool = False) -> str:
    """An import of ``chunks`` one-line chunks; ``first``: its id sorts before every random one."""
    import_id = ("00000000" if first else "ffffffff") + str(uuid.uuid4())[8:]
    _MADE.append(import_id)
    lines = [[(n + 1, f'{{"user_id": "u{n}"}}')] for n in range(chunks)]
    with runtime.sessions.begin() as s:
        now = datetime.now(UTC).replace(tzinfo=None)
        imports_sql.create(s, NewImport(import_id, service, "ndjson", None, chunks, now), lines)
    return import_id


def _waiting_on_the_import_row(runtime, import_id: str) -> bool:
    """Is another connection of ours running the claim's update of this import's row (it waits)?"""
    return running(runtime, "UPDATE import_job SET state = %", f"%{import_id}%") > 0


def test_a_claim_in_progress_does_not_hide_the_chunks_it_does_not_take(runtime):
    """Lane W (a worker serving tenants T and S) is in the middle of its claim: it locked T's chunk
    (the older import: its id sorts first) and waits on T's import row (held here). Lane L (serving
    S) claims meanwhile: it gets one of S's three queued chunks, not None (W holds only its own)."""
    t, s = new_service_id(), new_service_id()
    for service in (t, s):
        make_service(runtime, service)
    t_import = _import(runtime, t, 1, first=True)
    _import(runtime, s, 3)
    taken: list[imports_sql.ChunkClaim | None] = []
    with runtime.sessions() as holder:
        holder.execute(text("SELECT state FROM import_job WHERE import_id = :i FOR UPDATE"), {"i": t_import})
        w = threading.Thread(
            target=lambda: taken.append(
                imports_sql.claim(runtime.sessions, owner="lane-w", lease_s=60, services=[t, s])
            ),
            daemon=True,
        )
        w.start()
        wait_for(
            lambda: not w.is_alive() or _waiting_on_the_import_row(runtime, t_import),
            timeout=60,
            what="lane W's claim to wait on T's import row",
        )
        assert w.is_alive(), taken
        claim = imports_sql.claim(runtime.sessions, owner="lane-l", lease_s=60, services=[s])
        holder.rollback()
    w.join(60)
    assert claim is not None and claim.service == s  # None before 0043: W's scan held all of S's chunks
    assert taken and taken[0] is not None and (taken[0].import_id, taken[0].chunk_no) == (t_import, 0)


def _rows_read(session) -> int:
    """The rows this connection's statements have read so far (its handler counters)."""
    rows = session.execute(text("SHOW SESSION STATUS LIKE 'Handler_read%'")).all()
    return sum(int(value) for name, value in rows if name != "Handler_read_key")


def test_a_claim_for_one_tenant_reads_none_of_another_tenants_chunks(runtime, settings):
    """Another tenant's 300 queued chunks, of an older import: a claim serving S reads (and so, for a
    locking read, locks for a moment) none of them. Before: it walked them all in primary-key order."""
    other, s = new_service_id(), new_service_id()
    for service in (other, s):
        make_service(runtime, service)
    _import(runtime, other, 300, first=True)
    _import(runtime, s, 3)
    one = make_engine(settings, pool_size=1)  # one connection: the claim's counters are read on it
    try:
        sessions = make_sessionmaker(one)
        with sessions() as probe:
            before = _rows_read(probe)
        claim = imports_sql.claim(sessions, owner="lane-s", lease_s=60, services=[s])
        with sessions() as probe:
            read = _rows_read(probe) - before - 1  # the first probe's own row
    finally:
        one.dispose()
    assert claim is not None and claim.service == s
    assert read < 50, read  # S's own chunks and the claim's own rows; the other tenant's 300: none


LANES = 3  # per tenant
CHUNKS = 60  # per tenant


def test_claims_racing_in_many_lanes_of_two_tenants_take_every_chunk_and_none_comes_back_empty_early(runtime):
    """Three lanes of each of two tenants claim at once until their queue is empty: each chunk is taken
    exactly once, and no lane is told "nothing" while chunks nobody is taking are queued for it (it
    would idle a poll): the other tenant's scans must not hide them."""
    services = [new_service_id(), new_service_id()]
    imports = {}
    for service in services:
        make_service(runtime, service)
        imports[service] = _import(runtime, service, CHUNKS)

    def claim(service: str) -> tuple[str, int] | None:
        taken = imports_sql.claim(runtime.sessions, owner="racer", lease_s=60, services=[service])
        return None if taken is None else (taken.import_id, taken.chunk_no)

    def queued(service: str) -> int:
        with runtime.sessions() as s:
            return int(
                s.execute(
                    text("SELECT COUNT(*) FROM import_chunk WHERE import_id = :i AND state = 'queued'"),
                    {"i": imports[service]},
                ).scalar_one()
            )

    claimed, early = race_claims(services, LANES, claim, queued)
    assert sorted(claimed) == sorted((imports[service], n) for service in services for n in range(CHUNKS))
    # A lane is told "nothing" only when every chunk of its tenant still queued is one its other lanes
    # are claiming (one each): never while chunks wait for nobody.
    assert all(queued < LANES for counts in early.values() for queued in counts), early
