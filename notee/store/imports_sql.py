"""Imports SQL: the ``import_job``, ``import_chunk`` and ``import_error`` tables (schema/mysql/0028_imports.sql).

A worker leases a chunk like a fan-out task (notee/store/task_leases.py): ``claim`` (its own
transaction) locks a queued chunk, or a running one whose lease expired, with SKIP LOCKED and stamps
it with a ``lease_token``; every later write about the chunk is fenced by that token (``LeaseLost``).
The other functions take the caller's Session and never commit."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, bindparam, text
from sqlalchemy.orm import Session, sessionmaker

from notee.store.mysql import AnyRow, affected
from notee.store.sql_literals import Literals

# A chunk claimed this many times without finishing (its workers crashed, or it keeps failing) is a
# poison chunk: its lines are reported failed and it is done, so the import still ends.
MAX_CHUNK_ATTEMPTS = 10
GAVE_UP = f"its chunk failed {MAX_CHUNK_ATTEMPTS} times (the worker's log says why); not applied, or only in part"


class LeaseLost(RuntimeError):
    """The chunk's lease was taken over (it expired and another worker claimed it)."""


@dataclass(frozen=True, slots=True)
class ChunkClaim:
    import_id: str
    chunk_no: int
    service: str
    format: str
    header: list[str] | None
    first_line: int
    last_line: int
    lines: list[tuple[int, Any]]
    stored: bool
    copies: list[tuple[str, str, str]] | None  # (user_id, token, os) added to users that existed before
    lease_token: str


@dataclass(frozen=True, slots=True)
class NewImport:
    import_id: str
    service: str
    format: str
    header: list[str] | None
    lines_total: int
    now: datetime


def create(session: Session, job: NewImport, chunks: Sequence[list[tuple[int, Any]]]) -> None:
    """The import's row and its chunks (each a list of (line number, raw) records)."""
    session.execute(
        text(
            "INSERT INTO import_job (import_id, service, format, state, header, lines_total, chunks_total,"
            " created_at) VALUES (:i, :s, :f, 'queued', :h, :t, :c, :now)"
        ),
        {
            "i": job.import_id,
            "s": job.service,
            "f": job.format,
            "h": json.dumps(job.header) if job.header is not None else None,
            "t": job.lines_total,
            "c": len(chunks),
            "now": job.now,
        },
    )
    if not chunks:
        return
    # Rendered here (notee/store/sql_literals.py): PyMySQL's escaping of a chunk's ~300 KB of JSON,
    # one str.translate, cost more than the rest of the split. A statement per CHUNK_STATEMENT_BYTES
    # at most (a chunk alone may be up to 4 MB: usecases.imports.CHUNK_MAX_BYTES), so none nears
    # max_allowed_packet.
    conn = session.connection()
    lit = Literals(conn)
    head = "INSERT INTO import_chunk (import_id, chunk_no, service, first_line, last_line, line_count, `lines`) VALUES "
    import_id, service = lit.string(job.import_id), lit.string(job.service)
    parts: list[str] = []
    size = 0
    for n, chunk in enumerate(chunks):
        lines = lit.text(encode_lines(chunk))
        part = f"({import_id},{n},{service},{int(chunk[0][0])},{int(chunk[-1][0])},{len(chunk)},{lines})"
        if parts and size + len(part) > CHUNK_STATEMENT_BYTES:
            conn.exec_driver_sql(head + ",".join(parts), execution_options={"no_parameters": True})
            parts, size = [], 0
        parts.append(part)
        size += len(part)
    conn.exec_driver_sql(head + ",".join(parts), execution_options={"no_parameters": True})


CHUNK_STATEMENT_BYTES = 2 * 1024 * 1024

# A chunk of NDJSON lines is kept as text: this marker, then "<line number>\t<line>" per line, joined
# by "\n" (a line holds none: the upload was split there). As a JSON list, each line's every `"` was
# escaped twice (JSON, then SQL) and decoded again by the claim: about a fifth of the Python CPU of an
# imported user (docs/AUDIENCES.md "Import and export"). CSV records (lists of fields, which may hold
# newlines) and the chunks of an older version stay JSON lists, which never start with the marker.
LINES_TEXT = "#lines\n"


def encode_lines(chunk: Sequence[tuple[int, Any]]) -> str:
    """A chunk's records as kept in ``import_chunk.lines`` (read back by ``decode_lines``)."""
    if all(raw.__class__ is str and "\n" not in raw for _, raw in chunk):
        return LINES_TEXT + "\n".join([f"{n}\t{raw}" for n, raw in chunk])
    return json.dumps(chunk, ensure_ascii=False)


def decode_lines(stored: str) -> list[tuple[int, Any]]:
    """The (line number, raw) records of a chunk's ``lines`` (either form ``encode_lines`` writes)."""
    if stored.startswith(LINES_TEXT):
        out: list[tuple[int, Any]] = []
        for item in stored[len(LINES_TEXT) :].split("\n"):
            n, _, raw = item.partition("\t")
            out.append((int(n), raw))
        return out
    return [(int(n), raw) for n, raw in json.loads(stored)]


def add_errors(session: Session, import_id: str, errors: Sequence[tuple[int, str]]) -> None:
    """Record failed lines (idempotent: a chunk redone writes the same rows again)."""
    if errors:
        session.execute(
            text(
                "INSERT INTO import_error (import_id, line_no, reason) VALUES (:i, :n, :r) ON DUPLICATE KEY UPDATE reason = VALUES(reason)"
            ),
            [{"i": import_id, "n": n, "r": r[:500]} for n, r in errors],
        )


def finish_empty(session: Session, import_id: str, lines_failed: int) -> None:
    """An import whose every line failed at upload (no chunk): done at once."""
    session.execute(
        text(
            "UPDATE import_job SET state = 'done', lines_done = lines_total, lines_failed = :f,"
            " started_at = UTC_TIMESTAMP(6), finished_at = UTC_TIMESTAMP(6) WHERE import_id = :i"
        ),
        {"i": import_id, "f": lines_failed},
    )


def claim(
    sessions: sessionmaker[Session], *, owner: str, lease_s: float, services: Sequence[str] | None = None
) -> ChunkClaim | None:
    """Lease one chunk (queued, or running with an expired lease; oldest import first), in its own
    transaction at READ COMMITTED: a plain read ranks the candidates, each is then locked by its key
    with SKIP LOCKED until one is free. A claim locks no row but the one it takes (a locking scan
    locked each row it passed for a moment, and a claim meeting one skipped it: its lane idled a poll
    with chunks queued); it is empty only when every claimable chunk is another claim's in progress."""
    token = secrets.token_hex(16)
    with sessions.begin() as session:
        session.connection(execution_options={"isolation_level": "READ COMMITTED"})
        row = _lock_first_free(session, services)
        if row is None:
            return None
        session.execute(
            text(
                "UPDATE import_chunk SET state = 'running', lease_owner = :o, lease_token = :tok, attempts = attempts + 1,"
                " lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND WHERE import_id = :i AND chunk_no = :n"
            ),
            {"o": owner[:100], "tok": token, "ms": int(lease_s * 1000), "i": row.import_id, "n": row.chunk_no},
        )
        job = session.execute(
            text("SELECT format, header FROM import_job WHERE import_id = :i"), {"i": row.import_id}
        ).one()
        session.execute(
            text(
                "UPDATE import_job SET state = 'running', started_at = COALESCE(started_at, UTC_TIMESTAMP(6))"
                " WHERE import_id = :i AND state = 'queued'"
            ),
            {"i": row.import_id},
        )
    return ChunkClaim(
        row.import_id,
        row.chunk_no,
        row.service,
        job.format,
        json.loads(job.header) if job.header else None,
        row.first_line,
        row.last_line,
        decode_lines(row.lines),
        bool(row.stored),
        [(c[0], c[1], c[2]) for c in json.loads(row.copies)] if row.copies else None,
        token,
    )


# A queued chunk has no lease (lease_until NULL: 0028); a running one is claimable once its lease ended.
_CLAIMABLE = (
    "(c.state = 'queued' AND c.lease_until IS NULL OR c.state = 'running' AND c.lease_until < UTC_TIMESTAMP(6))"
)
CANDIDATES = 16  # ranked per read (when all are taken meanwhile, the next 16)


def _lock_first_free(session: Session, services: Sequence[str] | None) -> AnyRow | None:
    """The first candidate no other claim holds, locked; a poison one met on the way is given up."""
    after: tuple[str, int] | None = None
    while True:
        keys = _candidates(session, services, after)
        for import_id, chunk_no in keys:
            row = session.execute(
                text(
                    "SELECT c.import_id, c.chunk_no, c.service, c.first_line, c.last_line, c.`lines`, c.stored,"
                    f" c.copies, c.attempts FROM import_chunk c WHERE c.import_id = :i AND c.chunk_no = :n AND {_CLAIMABLE}"
                    " FOR UPDATE SKIP LOCKED"
                ),
                {"i": import_id, "n": chunk_no},
            ).one_or_none()
            if row is None:
                continue  # another claim's in progress, or taken since the read
            if row.attempts < MAX_CHUNK_ATTEMPTS:
                return row
            _give_up(session, row.import_id, row.chunk_no, [n for n, _ in decode_lines(row.lines)])
        if len(keys) < CANDIDATES:
            return None
        after = keys[-1]


def _candidates(
    session: Session, services: Sequence[str] | None, after: tuple[str, int] | None
) -> list[tuple[str, int]]:
    """Claimable chunks in claim order (oldest import first), a plain read: no lock. Of some services:
    each service's own open chunks (ix_import_chunk_service_open, 0043), never another tenant's."""
    where, params = _CLAIMABLE, dict[str, Any](k=CANDIDATES)
    if after is not None:
        where += " AND (c.import_id, c.chunk_no) > (:ai, :an)"
        params.update(ai=after[0], an=after[1])
    if not services:
        sql = f"SELECT c.import_id, c.chunk_no FROM import_chunk c WHERE {where} ORDER BY c.import_id, c.chunk_no LIMIT :k"
        return [(r.import_id, int(r.chunk_no)) for r in session.execute(text(sql), params)]
    # One read per service (an equality on the index's first column), merged here in claim order.
    found: list[tuple[str, int]] = []
    for service in dict.fromkeys(services):
        sql = (
            f"SELECT c.import_id, c.chunk_no FROM import_chunk c WHERE c.service = :s AND {where}"
            " ORDER BY c.import_id, c.chunk_no LIMIT :k"
        )
        found += [(r.import_id, int(r.chunk_no)) for r in session.execute(text(sql), {**params, "s": service})]
    return sorted(found)[:CANDIDATES]


def _expanding(name: str) -> BindParameter[Any]:
    return bindparam(name, expanding=True)


def _give_up(session: Session, import_id: str, chunk_no: int, line_numbers: Sequence[int]) -> None:
    """A poison chunk: every line not failed already is reported failed; the chunk is done."""
    if line_numbers:
        session.execute(
            text("INSERT IGNORE INTO import_error (import_id, line_no, reason) VALUES (:i, :n, :r)"),
            [{"i": import_id, "n": n, "r": GAVE_UP} for n in line_numbers],
        )
    session.execute(
        text(
            "UPDATE import_chunk SET state = 'done', `lines` = '[]', copies = NULL, lease_token = NULL"
            " WHERE import_id = :i AND chunk_no = :n"
        ),
        {"i": import_id, "n": chunk_no},
    )
    _count_done(session, import_id, len(line_numbers), len(line_numbers))


def _count_done(session: Session, import_id: str, lines: int, failed: int) -> None:
    """A chunk of ``lines`` lines (``failed`` of them failed) is done: counted into its import, which is
    done with its last chunk."""
    session.execute(
        text(
            "UPDATE import_job SET lines_done = lines_done + :d, lines_failed = lines_failed + :f,"
            " chunks_done = chunks_done + 1 WHERE import_id = :i"
        ),
        {"d": lines, "f": failed, "i": import_id},
    )
    session.execute(
        text(
            "UPDATE import_job SET state = 'done', finished_at = UTC_TIMESTAMP(6)"
            " WHERE import_id = :i AND chunks_done >= chunks_total AND state <> 'done'"
        ),
        {"i": import_id},
    )


def _fenced(session: Session, claim_: ChunkClaim, sql: str, params: dict[str, Any]) -> None:
    result = session.execute(
        text(sql + " WHERE import_id = :i AND chunk_no = :n AND lease_token = :tok AND state = 'running'"),
        {**params, "i": claim_.import_id, "n": claim_.chunk_no, "tok": claim_.lease_token},
    )
    if affected(result) != 1:
        raise LeaseLost(f"chunk {claim_.import_id}/{claim_.chunk_no} is no longer leased by this worker")


def release(sessions: sessionmaker[Session], claim_: ChunkClaim, *, counts: bool = True) -> None:
    """Give a chunk back after a failure: its lease ends now, so it is claimed again at once. A failure
    ``counts`` toward ``MAX_CHUNK_ATTEMPTS``; an outage (a store unreachable: passing) does not, as for
    fan-out tasks. Nothing when the lease is gone already."""
    with sessions.begin() as session:
        try:
            _fenced(
                session,
                claim_,
                "UPDATE import_chunk SET lease_until = UTC_TIMESTAMP(6), attempts = attempts - :back",
                {"back": 0 if counts else 1},
            )
        except LeaseLost:
            pass


def mark_stored(
    session: Session, claim_: ChunkClaim, copies: Sequence[tuple[str, str, str]], *, lease_s: float
) -> None:
    """The chunk's MySQL writes commit with this (fenced): a worker taking the chunk over goes on with
    its Cassandra writes, ``copies`` the devices that get their users' subscriptions."""
    _fenced(
        session,
        claim_,
        "UPDATE import_chunk SET stored = 1, copies = :c, lease_until = UTC_TIMESTAMP(6) + INTERVAL :ms * 1000 MICROSECOND",
        {"c": json.dumps([list(c) for c in copies]), "ms": int(lease_s * 1000)},
    )


def mark_done(session: Session, claim_: ChunkClaim, lines_failed: int) -> None:
    """The chunk is done (fenced; its lines emptied) and counted into its import, which is done with
    its last chunk."""
    _fenced(
        session, claim_, "UPDATE import_chunk SET state = 'done', `lines` = '[]', copies = NULL, lease_token = NULL", {}
    )
    _count_done(session, claim_.import_id, len(claim_.lines), lines_failed)


def count_upload_failures(session: Session, import_id: str, failed: int) -> None:
    """Lines failed at upload (too long, not UTF-8: in no chunk) count as done and failed at once."""
    if failed:
        session.execute(
            text(
                "UPDATE import_job SET lines_done = lines_done + :f, lines_failed = lines_failed + :f WHERE import_id = :i"
            ),
            {"f": failed, "i": import_id},
        )


# --- reads of the API ---------------------------------------------------------------------------------

_JOB_COLUMNS = (
    "import_id, service, format, state, lines_total, lines_done, lines_failed, chunks_total, chunks_done,"
    " created_at, started_at, finished_at"
)


def get(session: Session, service: str, import_id: str) -> AnyRow | None:
    return session.execute(
        text(f"SELECT {_JOB_COLUMNS} FROM import_job WHERE import_id = :i AND service = :s"),
        {"i": import_id, "s": service},
    ).one_or_none()


def list_imports(session: Session, service: str, before: tuple[datetime, str] | None, limit: int) -> list[AnyRow]:
    """A service's imports newest first (ix_import_job_service: keyset on (created_at, import_id))."""
    sql = f"SELECT {_JOB_COLUMNS} FROM import_job WHERE service = :s"
    params: dict[str, Any] = {"s": service, "l": limit}
    if before is not None:
        sql += " AND (created_at < :at OR (created_at = :at AND import_id < :id))"
        params |= {"at": before[0], "id": before[1]}
    return list(session.execute(text(sql + " ORDER BY created_at DESC, import_id DESC LIMIT :l"), params))


def errors_page(session: Session, import_id: str, after: int | None, limit: int) -> list[AnyRow]:
    """An import's failed lines in line order (the primary key: keyset on line_no)."""
    return list(
        session.execute(
            text(
                "SELECT line_no, reason FROM import_error WHERE import_id = :i AND line_no > :a"
                " ORDER BY line_no LIMIT :l"
            ),
            {"i": import_id, "a": -1 if after is None else after, "l": limit},
        )
    )


def prune_finished(session: Session, *, older_than_days: int, batch: int) -> int:
    """Delete up to ``batch`` imports finished more than ``older_than_days`` ago (ix_import_job_finished;
    their chunks and errors cascade)."""
    ids = [
        r[0]
        for r in session.execute(
            text(
                "SELECT import_id FROM import_job WHERE state = 'done'"
                " AND finished_at < UTC_TIMESTAMP(6) - INTERVAL :d DAY LIMIT :b"
            ),
            {"d": older_than_days, "b": batch},
        )
    ]
    if not ids:
        return 0
    session.execute(text("DELETE FROM import_job WHERE import_id IN :ids").bindparams(_expanding("ids")), {"ids": ids})
    return len(ids)
