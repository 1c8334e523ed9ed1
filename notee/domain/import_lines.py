"""The lines of a bulk import, pure: splitting an upload into numbered records, and checking one record
into an ``ImportLine`` with the rules the API's own routes use (users: ``notee/domain/users.py`` via
``notee/domain/rules.py``; tags: ``notee/domain/tags.py``; topics: ``notee/domain/schedule.py``).
The format is docs/AUDIENCES.md "Import and export".

A record is ``(line number, raw)``: an NDJSON line's text, or a CSV record's list of fields; line
numbers are the file's (1-based; a CSV header is line 1). A record that breaks a rule raises
``LineRejected`` with the reason kept for the import's error list.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from notee.core.errors import InvalidInput
from notee.core.vocabulary import OSES
from notee.domain import tags, versions
from notee.domain.rules import (
    REGION_RE,
    check_choice,
    check_locale,
    check_pattern,
    check_text,
    check_timezone,
)
from notee.domain.schedule import validate_topic
from notee.domain.web_devices import check_device_token

FORMATS = ("ndjson", "csv")
MAX_DEVICES_PER_LINE = 100
MAX_TOPICS_PER_LINE = 1000
CSV_COLUMNS = ("user", "name", "locale", "timezone", "device_token", "platform", "app_version", "country")
# A CSV tag column: "tag.<key>" (numbers and true/false parsed, else a string), "tag.<key>@string"
# (always a string) or "tag.<key>@timestamp" (RFC 3339 with its offset).
TAG_PREFIX = "tag."
TOPIC_PREFIX = "topic."
TOPIC_SEPARATOR = "|"
_FIELDS = {"user", "name", "locale", "timezone", "tags", "devices", "topics"}
_DEVICE_FIELDS = {"token", "platform", "app_version", "country"}


class LineRejected(Exception):
    """A line that breaks a rule: nothing of it is written; ``reason`` is kept with its number."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason[:500]


@dataclass(frozen=True)
class DeviceLine:
    token: str
    os: str
    region: str | None = None  # None: left as it is (a new device: '')
    app_version: str | None = None
    app_version_key: str | None = None
    app_version_given: bool = False  # False: left as it is; True with None: cleared (as a registration)


@dataclass
class ImportLine:
    """One checked line: ``profile`` holds the user columns given (``service_user_name``, ``locale``,
    ``timezone``); ``tags`` is a merge patch; ``topics`` (type, topic) pairs."""

    line_no: int
    user: str
    profile: dict[str, Any] = field(default_factory=dict)
    tags: tags.TagPatch | None = None
    devices: list[DeviceLine] = field(default_factory=list)
    topics: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Upload:
    """An upload split into records: the CSV header's columns (None for NDJSON), the records, and the
    lines already failed (too long, not UTF-8)."""

    header: list[str] | None
    records: list[tuple[int, Any]]
    failed: list[tuple[int, str]]


def _upload_error(loc: list[str | int], msg: str, type_: str) -> InvalidInput:
    return InvalidInput(f"the file is not an import: {msg}", details=[{"loc": loc, "type": type_, "msg": msg}])


def split_upload(body: bytes, fmt: str, max_line_bytes: int) -> Upload:
    """The numbered records of an uploaded file (422 when the file as a whole is unusable: empty, not
    UTF-8 CSV, a CSV header without ``user`` or with an unknown column)."""
    upload = _split_ndjson(body, max_line_bytes) if fmt == "ndjson" else _split_csv(body, max_line_bytes)
    if not upload.records and not upload.failed:
        raise _upload_error(["body"], "it holds no line", "empty")
    return upload


def _split_ndjson(body: bytes, max_line_bytes: int) -> Upload:
    records: list[tuple[int, Any]] = []
    failed: list[tuple[int, str]] = []
    for number, raw in enumerate(body.split(b"\n"), start=1):
        if not raw.strip():
            continue
        if len(raw) > max_line_bytes:
            failed.append((number, f"the line is longer than {max_line_bytes} bytes"))
            continue
        try:
            records.append((number, raw.decode("utf-8")))
        except UnicodeDecodeError:
            failed.append((number, "the line is not UTF-8"))
    return Upload(None, records, failed)


def _split_csv(body: bytes, max_line_bytes: int) -> Upload:
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _upload_error(["body"], "a CSV file must be UTF-8", "unicode") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise _upload_error(["body"], "it holds no line", "empty")
        _check_header(header)
        records: list[tuple[int, Any]] = []
        failed: list[tuple[int, str]] = []
        start = reader.line_num + 1
        for row in reader:
            if any(cell.strip() for cell in row):
                if sum(len(c) for c in row) > max_line_bytes:
                    failed.append((start, f"the line is longer than {max_line_bytes} bytes"))
                else:
                    records.append((start, row))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise _upload_error(["body"], f"not CSV: {exc}", "csv") from None
    return Upload(header, records, failed)


def _check_header(header: list[str]) -> None:
    if "user" not in header:
        raise _upload_error(["body", "header"], "the CSV header must name a user column", "csv_header")
    for i, name in enumerate(header):
        if name in CSV_COLUMNS:
            continue
        if name.startswith(TAG_PREFIX):
            key, _, kind = name[len(TAG_PREFIX) :].partition("@")
            if tags.TAG_KEY_RE.fullmatch(key) and kind in ("", "string", "timestamp"):
                continue
        if name.startswith(TOPIC_PREFIX) and name[len(TOPIC_PREFIX) :]:
            continue
        raise _upload_error(["body", "header", i], f"unknown column {name!r}", "csv_column")
    if len(set(header)) != len(header):
        raise _upload_error(["body", "header"], "a column is named twice", "csv_column")


# --- one record -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineRules:
    """What checking a line needs besides the line: the service's topic template types, the tag limit."""

    topic_types: frozenset[str]
    tags_per_user_max: int


def check_record(fmt: str, header: list[str] | None, record: tuple[int, Any], rules: LineRules) -> ImportLine:
    """The ``ImportLine`` of one record, or ``LineRejected``."""
    line_no, raw = record
    try:
        doc = _ndjson_doc(raw) if fmt == "ndjson" else _csv_doc(header or [], raw)
        return _check_doc(line_no, doc, rules)
    except InvalidInput as exc:
        raise LineRejected(exc.message) from None


def _ndjson_doc(raw: str) -> Mapping[str, Any]:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise LineRejected(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise LineRejected("a line is a JSON object")
    unknown = sorted(set(doc) - _FIELDS)
    if unknown:
        raise LineRejected(f"unknown field {unknown[0]!r}")
    return doc


def _csv_cell_tag(kind: str, cell: str) -> Any:
    if kind == "string":
        return cell
    if kind == "timestamp":
        return {"timestamp": cell}
    if cell in ("true", "false"):
        return cell == "true"
    try:
        return int(cell) if cell.lstrip("-").isdigit() else float(cell)
    except ValueError:
        return cell


def _csv_doc(header: list[str], row: list[str]) -> Mapping[str, Any]:
    if len(row) != len(header):
        raise LineRejected(f"{len(row)} fields where the header has {len(header)}")
    doc: dict[str, Any] = {}
    device: dict[str, str] = {}
    names = {"device_token": "token", "platform": "platform", "app_version": "app_version", "country": "country"}
    for name, cell in zip(header, row, strict=True):
        if cell == "":
            continue  # an empty cell: the field is left as it is
        if name in names:
            device[names[name]] = cell
        elif name.startswith(TAG_PREFIX):
            key, _, kind = name[len(TAG_PREFIX) :].partition("@")
            doc.setdefault("tags", {})[key] = _csv_cell_tag(kind, cell)
        elif name.startswith(TOPIC_PREFIX):
            type_ = name[len(TOPIC_PREFIX) :]
            doc.setdefault("topics", []).extend({"type": type_, "topic": t} for t in cell.split(TOPIC_SEPARATOR))
        else:
            doc[name] = cell
    if device:
        doc["devices"] = [device]
    return doc


def _check_doc(line_no: int, doc: Mapping[str, Any], rules: LineRules) -> ImportLine:
    if "user" not in doc:
        raise LineRejected("user: required")
    line = ImportLine(line_no, check_text("user", doc["user"], min_len=1, max_len=191))
    if "name" in doc:
        line.profile["service_user_name"] = check_text("name", doc["name"], max_len=191)
    if "locale" in doc:
        line.profile["locale"] = None if doc["locale"] is None else check_locale(doc["locale"])
    if "timezone" in doc:
        line.profile["timezone"] = None if doc["timezone"] is None else check_timezone(doc["timezone"])
    if doc.get("tags") is not None:
        line.tags = tags.check_patch(doc["tags"], limit=rules.tags_per_user_max, loc=("tags",))
    line.devices = [_check_device(i, d) for i, d in enumerate(_list(doc, "devices", MAX_DEVICES_PER_LINE))]
    line.topics = [_check_topic(i, t, rules) for i, t in enumerate(_list(doc, "topics", MAX_TOPICS_PER_LINE))]
    return line


def _list(doc: Mapping[str, Any], name: str, most: int) -> list[Any]:
    value = doc.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise LineRejected(f"{name}: must be a list")
    if len(value) > most:
        raise LineRejected(f"{name}: at most {most} per line")
    return value


def _check_device(i: int, item: Any) -> DeviceLine:
    where = f"devices[{i}]"
    if not isinstance(item, dict):
        raise LineRejected(f"{where}: must be an object")
    unknown = sorted(set(item) - _DEVICE_FIELDS)
    if unknown:
        raise LineRejected(f"{where}: unknown field {unknown[0]!r}")
    if "token" not in item or "platform" not in item:
        raise LineRejected(f"{where}: token and platform are required")
    os_ = check_choice(f"{where}.platform", item["platform"], OSES)
    token = check_device_token(os_, item["token"], f"{where}.token")
    region = item.get("country")
    if region is not None:
        region = check_pattern(f"{where}.country", region, REGION_RE, "up to 8 letters, digits, _ or -")
    version = item.get("app_version")
    if version is not None:  # the registration's rule (notee/domain/users.py add_device)
        what = "1-32 letters, digits, '.', '-' or '+'"
        version = check_pattern(f"{where}.app_version", version, versions.APP_VERSION_RE, what)
    key = versions.version_key(version) if version is not None else None
    return DeviceLine(token, os_, region, version, key, "app_version" in item)


def _check_topic(i: int, item: Any, rules: LineRules) -> tuple[str, str]:
    where = f"topics[{i}]"
    if not isinstance(item, dict) or set(item) != {"type", "topic"}:
        raise LineRejected(f'{where}: must be {{"type": ..., "topic": ...}}')
    type_, topic = item["type"], item["topic"]
    if not isinstance(type_, str) or type_ not in rules.topic_types:
        raise LineRejected(f"{where}.type: no TOPIC template {type_!r} in this service")
    try:
        return type_, validate_topic(topic)
    except InvalidInput as exc:
        raise LineRejected(f"{where}.topic: {exc.message}") from None
