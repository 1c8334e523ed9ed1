"""Bulk import (docs/AUDIENCES.md "Import and export"): an upload becomes an import job of chunks
(``start_import``, the API), and a worker applies one leased chunk at a time (``run_chunk``).

A chunk is applied in three short transactions, each safe to redo:

1. MySQL: its users, devices and tags, upserted in batches (one statement per batch, whatever the
   number of lines), its failed lines recorded, and the chunk marked ``stored`` with the devices that
   were added to users who existed before (``copies``). Store order as in notee/domain/users.py:
   additions commit MySQL first, then Cassandra.
2. Cassandra: the ``copies`` get their users' subscriptions (``subscriptions.on_devices_added``),
   then the lines' topic subscriptions, a type at a time (``subscribe_topics``: idempotent).
3. The chunk is marked done and counted into its import (fenced by the lease).

A worker that dies anywhere leaves the chunk leased until ``import_lease_s``; the next claim redoes it
from step 1, or from step 2 when it was stored (the upserts and subscribes make redoing harmless).
A line is checked whole before anything of it is written: a bad line is reported and skipped.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from notee.core.clock import stored_now
from notee.core.errors import InvalidInput, NotFound
from notee.core.user_ids import new_user_id
from notee.domain import subscriptions, tags
from notee.domain.import_lines import (
    FORMATS,
    ImportLine,
    LineRejected,
    LineRules,
    check_record,
    split_upload,
)
from notee.domain.topic_subscriptions import BULK_MAX, subscribe_topics
from notee.store import import_rows_sql as rows_sql
from notee.store import imports_sql, templates_sql, users_sql
from notee.store.cql.statements import Statements
from notee.store.imports_sql import ChunkClaim, NewImport
from notee.store.mysql import retried
from notee.store.runtime import Runtime

log = logging.getLogger(__name__)


def start_import(
    session: Session, service: str, body: bytes, fmt: str, *, chunk_lines: int, max_line_bytes: int
) -> str:
    """Split an uploaded file into chunks kept with a new import job (the caller commits); its id.
    422 (nothing written) when the file as a whole is not an import."""
    if fmt not in FORMATS:
        raise InvalidInput("unknown format", details=[{"loc": ["header", "content-type"], "type": "format"}])
    upload = split_upload(body, fmt, max_line_bytes)
    import_id = str(uuid.uuid4())
    chunks = _chunks(upload.records, chunk_lines)
    job = NewImport(import_id, service, fmt, upload.header, len(upload.records) + len(upload.failed), stored_now())
    imports_sql.create(session, job, chunks)
    imports_sql.add_errors(session, import_id, upload.failed)
    imports_sql.count_upload_failures(session, import_id, len(upload.failed))
    if not chunks:
        imports_sql.finish_empty(session, import_id, len(upload.failed))
    log.info("import %s of %s: %d line(s) in %d chunk(s)", import_id, service, job.lines_total, len(chunks))
    return import_id


# A chunk's lines stay well under MariaDB's max_allowed_packet (16 MiB by default) whatever their length.
CHUNK_MAX_BYTES = 4 * 1024 * 1024


def _chunks(records: list[tuple[int, Any]], chunk_lines: int) -> list[list[tuple[int, Any]]]:
    """The records in chunks of at most ``chunk_lines`` lines and about ``CHUNK_MAX_BYTES``."""
    chunks: list[list[tuple[int, Any]]] = []
    current: list[tuple[int, Any]] = []
    size = 0
    for record in records:
        length = len(record[1]) if isinstance(record[1], str) else sum(len(c) + 3 for c in record[1])
        if current and (len(current) >= chunk_lines or size + length > CHUNK_MAX_BYTES):
            chunks.append(current)
            current, size = [], 0
        current.append(record)
        size += length
    if current:
        chunks.append(current)
    return chunks


def get_import(session: Session, service: str, import_id: str) -> Any:
    row = imports_sql.get(session, service, import_id) if _is_uuid(import_id) else None
    if row is None:
        raise NotFound("import not found")
    return row


def list_imports(session: Session, service: str, before: tuple[datetime, str] | None, limit: int) -> list[Any]:
    """A service's imports, newest first, after ``before`` (created_at, import_id)."""
    return imports_sql.list_imports(session, service, before, limit)


def import_errors(session: Session, service: str, import_id: str, after: int | None, limit: int) -> list[Any]:
    """An import's failed lines (line_no, reason) after line ``after``; NotFound for another service's."""
    get_import(session, service, import_id)
    return imports_sql.errors_page(session, import_id, after, limit)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


# --- applying a chunk -------------------------------------------------------------------------------


@dataclass
class _Checked:
    lines: list[ImportLine] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)
    ids: dict[str, str] | None = None  # service_user_id -> user_id, once step 1 wrote the users


def _check(runtime: Runtime, claim: ChunkClaim) -> _Checked:
    """The chunk's lines parsed and checked (once, however many times step 1 runs)."""
    with runtime.sessions() as session:
        topic_templates = templates_sql.list_templates(session, claim.service)
    types = frozenset(t.notification_type for t in topic_templates if t.notification_method == "TOPIC")
    rules = LineRules(types, runtime.settings.tags_per_user_max)
    out = _Checked()
    for record in claim.lines:
        try:
            out.lines.append(check_record(claim.format, claim.header, record, rules))
        except LineRejected as exc:
            out.rejected[record[0]] = exc.reason
    return out


def run_chunk(runtime: Runtime, claim: ChunkClaim) -> None:
    """Apply one leased chunk (module doc); ``imports_sql.LeaseLost`` when another worker took it over.

    Each transaction that meets a deadlock or a lock wait timeout is run again by itself
    (``notee.store.mysql.retried``): all three are safe to redo, as a redone chunk shows; only a
    failure that outlasts the retries gives the chunk back to be redone whole. Step 1 is not run again
    after a lost connection (its commit may have landed, and a second run would find the new devices
    old and lose their ``copies``): the chunk is redone from what it stored instead."""
    parsed = _check(runtime, claim)
    checked = parsed
    skipped = False
    if claim.stored:
        copies = claim.copies or []
    elif (ids := _topics_of_known_users(runtime, claim.service, parsed)) is not None:
        # Nothing for step 1 to write or to keep (no copies): its transaction, the chunk's mark and
        # their commit are skipped; a redo finds the chunk unstored and does the same.
        checked, copies, skipped = _Checked(parsed.lines, parsed.rejected, ids), [], True
    else:
        checked, copies = retried(
            runtime.sessions,
            lambda session: _step_mysql(session, runtime, claim, parsed),
            name="import_rows",
            idempotent=False,
        )
    if copies:
        grouped: dict[str, list[tuple[str, str]]] = {}
        for user_id, token, os_ in copies:
            grouped.setdefault(user_id, []).append((token, os_))
        retried(
            runtime.sessions,
            lambda session: subscriptions.on_devices_added(session, runtime.statements, claim.service, grouped),
            name="import_copies",
        )
    late = _subscribe(runtime, claim.service, checked)

    def done(session: Session) -> None:
        # The rejected lines go with step 1's commit, or with this one when step 1 was skipped.
        imports_sql.add_errors(session, claim.import_id, sorted((late | checked.rejected if skipped else late).items()))
        imports_sql.mark_done(session, claim, len(checked.rejected) + len(late))

    retried(runtime.sessions, done, name="import_done", idempotent=False)


def _topics_of_known_users(runtime: Runtime, service: str, parsed: _Checked) -> dict[str, str] | None:
    """service_user_id -> user_id of the chunk's users when its lines are topics alone (no profile,
    tags or devices) for users that all exist: step 1 would write nothing then. None otherwise."""
    if not parsed.lines or any(line.profile or line.devices or line.tags is not None for line in parsed.lines):
        return None
    with runtime.sessions() as session:
        found = rows_sql.users_by_service_id(session, service, {line.user for line in parsed.lines})
    if not all(line.user in found for line in parsed.lines):
        return None  # a user to make: step 1 makes it
    return {u: r.user_id for u, r in found.items()}


def _step_mysql(
    session: Session, runtime: Runtime, claim: ChunkClaim, parsed: _Checked
) -> tuple[_Checked, list[tuple[str, str, str]]]:
    """Step 1 (module doc) in ``session``'s transaction, on a copy of the parsed lines (the tag limit
    drops lines from it): the lines as applied, and the ``copies``."""
    session.connection(execution_options={"isolation_level": "READ COMMITTED"})
    checked = _Checked(list(parsed.lines), dict(parsed.rejected))
    copies = _store(session, lambda: runtime.statements, claim.service, checked, runtime.settings.tags_per_user_max)
    imports_sql.add_errors(session, claim.import_id, sorted(checked.rejected.items()))
    imports_sql.mark_stored(session, claim, copies, lease_s=runtime.settings.import_lease_s)
    return checked, copies


def _subscribe(runtime: Runtime, service: str, checked: _Checked) -> dict[int, str]:
    """The lines' topic subscriptions, a type and ``BULK_MAX`` pairs per transaction; the lines whose
    user was deleted meanwhile (line number -> reason)."""
    wanted = [line for line in checked.lines if line.topics]
    if not wanted:
        return {}
    ids = checked.ids
    if ids is None:  # a chunk taken over after step 1: the users are read again
        with runtime.sessions() as session:
            found = rows_sql.users_by_service_id(session, service, {line.user for line in wanted})
        ids = {u: r.user_id for u, r in found.items()}
    by_type: dict[str, list[tuple[int, str, str]]] = {}
    late: dict[int, str] = {}
    for line in wanted:
        if line.user not in ids:
            late[line.line_no] = "the user was deleted while the import ran"
            continue
        for type_, topic in dict.fromkeys(line.topics):
            by_type.setdefault(type_, []).append((line.line_no, ids[line.user], topic))
    for type_, pairs in sorted(by_type.items()):
        for start in range(0, len(pairs), BULK_MAX):
            batch = pairs[start : start + BULK_MAX]
            subscribing = [(u, t) for _, u, t in batch]
            results = retried(
                runtime.sessions,
                partial(_subscribe_batch, runtime, service, type_, subscribing),
                name="import_subscribe",
            )
            for (line_no, _, _), result in zip(batch, results, strict=True):
                if result is None:
                    late[line_no] = "the user was deleted while the import ran"
    return late


def _subscribe_batch(
    runtime: Runtime, service: str, type_: str, pairs: list[tuple[str, str]], session: Session
) -> list[Any]:
    # The lines' topics passed validate_topic when they were checked (import_lines._check_topic).
    return subscribe_topics(session, runtime.statements, service, type_, pairs, topics_checked=True)


def _tag_check(session: Session, service: str, checked: _Checked, existing: dict[str, Any], limit: int) -> None:
    """Reject the lines whose tags would leave their user with more than ``limit`` keys (lines of one
    user apply in order)."""
    with_tags = {line.user for line in checked.lines if line.tags is not None and line.user in existing}
    held = rows_sql.tag_keys(session, service, [existing[u].user_id for u in with_tags])
    keys: dict[str, set[str]] = {u: held.get(existing[u].user_id, set()) for u in with_tags}
    kept: list[ImportLine] = []
    for line in checked.lines:
        if line.tags is not None:
            after = tags.keys_after(keys.get(line.user, set()), line.tags)
            if len(after) > limit:
                checked.rejected[line.line_no] = tags.too_many(limit, ("tags",)).message
                continue
            keys[line.user] = after
        kept.append(line)
    checked.lines = kept


def _store(
    session: Session, st: Callable[[], Statements], service: str, checked: _Checked, limit: int
) -> list[tuple[str, str, str]]:
    """Step 1 (module doc) in the caller's transaction: users, devices, tags. Returns the devices
    added to users that existed before (user_id, token, os). ``st`` is called only for a zone change."""
    users = {line.user for line in checked.lines}
    existing = rows_sql.users_by_service_id(session, service, users)
    # Existing users the chunk writes anything of (profile, tags, devices) are locked exclusively first
    # (one statement, in index order), as every writer of them does (notee/domain/user_tags.py,
    # users.upsert_user): the tag limit then counts the last writer's keys, a zone change rewrites the
    # slot rows under it, and none of them can be deleted before this transaction commits.
    locked = sorted(
        {
            existing[line.user].user_id
            for line in checked.lines
            if line.user in existing and (line.tags is not None or line.profile or line.devices)
        }
    )
    if locked:
        users_sql.lock_users(session, service, locked, exclusive=True)
        existing = rows_sql.users_by_service_id(session, service, users)
    _tag_check(session, service, checked, existing, limit)
    profiles: dict[str, dict[str, Any]] = {}
    for line in checked.lines:
        profiles.setdefault(line.user, {}).update(line.profile)
    now = stored_now()
    # A user that exists and is given no field needs no write (a line of topics or tags alone).
    # New ids are slot-random and time-ordered (notee.core.user_ids): inserts stay on hot pages.
    writes = [(u, new_user_id(), p) for u, p in profiles.items() if p or u not in existing]
    rows_sql.upsert_users(session, service, writes, now)
    ids = {u: r.user_id for u, r in existing.items()}
    created = {u for u, _, _ in writes if u not in existing}
    ids |= {u: r.user_id for u, r in rows_sql.users_by_service_id(session, service, created).items()}
    checked.ids = ids
    for user, row in existing.items():
        given = profiles.get(user, {})  # (none: every line of the user was rejected)
        if "timezone" in given and given["timezone"] != row.timezone:
            subscriptions.on_user_zone_changed(session, st(), service, row.user_id, given["timezone"])
    if not any(line.devices or line.tags is not None for line in checked.lines):
        return []  # (lines of topics alone: the two statements that switch the checks need not run)
    # Every user a device or tag row is written for is now locked by this transaction (locked above,
    # or written by the upsert), so it exists until the commit: the rows' foreign-key look-ups of
    # `user` are skipped (about a sixth of MariaDB's work per imported user, docs/AUDIENCES.md).
    with rows_sql.parents_locked(session):
        copies = _store_devices(session, service, checked.lines, ids, {existing[u].user_id for u in existing})
        _store_tags(session, service, checked.lines, ids, now)
    return copies


def _store_devices(
    session: Session, service: str, lines: Sequence[ImportLine], ids: dict[str, str], old_users: set[str]
) -> list[tuple[str, str, str]]:
    wanted: dict[tuple[str, str], dict[str, Any]] = {}
    for line in lines:
        for d in line.devices:
            row: dict[str, Any] = {"user_id": ids[line.user], "device_token": d.token, "device_os": d.os}
            if d.region is not None:
                row["region"] = d.region
            if d.app_version_given:
                row |= {"app_version": d.app_version, "app_version_key": d.app_version_key}
            wanted[(row["user_id"], d.token)] = wanted.get((row["user_id"], d.token), {}) | row
    if not wanted:
        return []
    before = rows_sql.device_keys(session, service, {u for u, _ in wanted if u in old_users})
    rows_sql.upsert_devices(session, service, list(wanted.values()), stored_now())
    return [(u, t, r["device_os"]) for (u, t), r in wanted.items() if u in old_users and (u, t) not in before]


def _store_tags(session: Session, service: str, lines: Sequence[ImportLine], ids: dict[str, str], now: Any) -> None:
    final: dict[tuple[str, str], tags.StoredTag | None] = {}
    for line in lines:
        if line.tags is None:
            continue
        user_id = ids[line.user]
        for key in line.tags.remove:
            final[(user_id, key)] = None
        for key, tag in line.tags.set.items():
            final[(user_id, key)] = tag
    sets = [
        {"user_id": u, "tag_key": k, "kind": t.kind, "value_str": t.value_str, "value_num": t.value_num}
        for (u, k), t in final.items()
        if t is not None
    ]
    rows_sql.upsert_tags(session, service, sets, now)
    rows_sql.delete_tags(session, service, [key for key, t in final.items() if t is None])
