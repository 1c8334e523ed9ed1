"""Export of a service's users, devices, tags and topic subscriptions in the import's format
(docs/AUDIENCES.md "Import and export"), streamed a page of users at a time.

Users come in ``service_user_id`` order (the ``user`` primary key: keyset pages), each page read in a
short transaction of its own (its users, their devices and tags: three queries) with the users'
subscription index rows read from Cassandra concurrently. Never more than a page is in memory.
The export is not a snapshot: a user changed while it runs is written as its page found it.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from notee.domain import tags
from notee.store import import_rows_sql as rows_sql
from notee.store import subscription_sql, templates_sql
from notee.store.runtime import Runtime

PAGE = 500


def _page(runtime: Runtime, service: str, after: str | None) -> list[dict[str, Any]]:
    """One page of users as export records (the NDJSON objects), in order."""
    with runtime.sessions() as session:
        users = rows_sql.users_page(session, service, after, PAGE)
        ids = [u.user_id for u in users]
        reads = {u: runtime.statements.user_rows_async(u, service) for u in ids}
        devices: dict[str, list[dict[str, Any]]] = {}
        for d in rows_sql.devices_of(session, service, ids):
            item: dict[str, Any] = {"token": d.device_token, "platform": d.device_os}
            if d.app_version:
                item["app_version"] = d.app_version
            if d.region:
                item["country"] = d.region
            devices.setdefault(d.user_id, []).append(item)
        user_tags: dict[str, dict[str, Any]] = {}
        for t in rows_sql.tags_of(session, service, ids):
            user_tags.setdefault(t.user_id, {})[t.tag_key] = tags.to_json(
                tags.StoredTag(t.kind, t.value_str, t.value_num)
            )
        live = subscription_sql.live_template_keys(session, service)
    out: list[dict[str, Any]] = []
    for u in users:
        record: dict[str, Any] = {"user": u.service_user_id, "name": u.service_user_name}
        if u.locale is not None:
            record["locale"] = u.locale
        if u.timezone is not None:
            record["timezone"] = u.timezone
        if u.user_id in user_tags:
            record["tags"] = user_tags[u.user_id]
        if u.user_id in devices:
            record["devices"] = devices[u.user_id]
        topics = sorted(
            {
                (r.type_, r.target)
                for r in runtime.statements.index_rows_of(reads[u.user_id])
                if r.is_user_level and r.method == "TOPIC" and r.data.get("key") in live
            }
        )
        if topics:
            record["topics"] = [{"type": t, "topic": topic} for t, topic in topics]
        out.append(record)
    return out


def records(runtime: Runtime, service: str) -> Iterator[dict[str, Any]]:
    """Every user of the service as an export record, a page at a time."""
    after: str | None = None
    while True:
        page = _page(runtime, service, after)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1]["user"]


def ndjson(runtime: Runtime, service: str) -> Iterator[bytes]:
    """The export as NDJSON, a page of lines per chunk."""
    buffer: list[str] = []
    for record in records(runtime, service):
        buffer.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
        if len(buffer) >= PAGE:
            yield ("\n".join(buffer) + "\n").encode()
            buffer = []
    if buffer:
        yield ("\n".join(buffer) + "\n").encode()


def _columns(runtime: Runtime, service: str) -> tuple[list[str], list[str]]:
    """The CSV header's tag columns and topic types (every tag key and kind, every TOPIC template)."""
    with runtime.sessions() as session:
        kinds = rows_sql.tag_kinds(session, service)
        types = [
            t.notification_type
            for t in templates_sql.list_templates(session, service)
            if t.notification_method == "TOPIC"
        ]
    suffix = {tags.KIND_STRING: "@string", tags.KIND_TIMESTAMP: "@timestamp"}
    return sorted({f"tag.{key}{suffix.get(kind, '')}" for key, kind in kinds}), types


def _tag_cells(values: dict[str, Any]) -> dict[str, str]:
    cells: dict[str, str] = {}
    for key, value in values.items():
        if isinstance(value, str):
            cells[f"tag.{key}@string"] = value
        elif isinstance(value, dict):
            cells[f"tag.{key}@timestamp"] = value["timestamp"]
        elif isinstance(value, bool):
            cells[f"tag.{key}"] = "true" if value else "false"
        else:
            cells[f"tag.{key}"] = repr(value)
    return cells


def csv_rows(runtime: Runtime, service: str) -> Iterator[bytes]:
    """The export as CSV: a row per device (one for a user without), the user's fields, tags and
    topics on its first row."""
    tag_columns, types = _columns(runtime, service)
    header = ["user", "name", "locale", "timezone", "device_token", "platform", "app_version", "country"]
    header += tag_columns + [f"topic.{t}" for t in types]
    out = io.StringIO()
    writer = csv.DictWriter(out, header, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for n, record in enumerate(records(runtime, service), start=1):
        first: dict[str, str] = {"user": record["user"], "name": record["name"]}
        first |= {k: record[k] for k in ("locale", "timezone") if k in record}
        first |= _tag_cells(record.get("tags", {}))
        for t in types:
            joined = "|".join(x["topic"] for x in record.get("topics", []) if x["type"] == t)
            if joined:
                first[f"topic.{t}"] = joined
        for i, device in enumerate(record.get("devices") or [None]):
            row = first if i == 0 else {"user": record["user"]}
            if device is not None:
                row = row | {
                    "device_token": device["token"],
                    "platform": device["platform"],
                    "app_version": device.get("app_version", ""),
                    "country": device.get("country", ""),
                }
            writer.writerow(row)
        if n % PAGE == 0:
            yield out.getvalue().encode()
            out.seek(0)
            out.truncate()
    yield out.getvalue().encode()
