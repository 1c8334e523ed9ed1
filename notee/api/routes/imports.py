"""Bulk import and export of a service's users, devices, tags and topic subscriptions
(docs/AUDIENCES.md "Import and export"): an upload becomes an import job a worker applies chunk by
chunk; its progress and failed lines are read here; an export streams the same format back."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import Field

from notee.api import cursors
from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.models import Answer, errors
from notee.core import clock
from notee.core.errors import InvalidInput
from notee.usecases import exports, imports

router = APIRouter(prefix="/v1", tags=["imports"])

_MEDIA = {"application/x-ndjson": "ndjson", "application/jsonl": "ndjson", "text/csv": "csv"}
ImportIdPath = Annotated[str, Path(min_length=36, max_length=36, description="The import's id (a UUID)")]


class ImportCreated(Answer):
    import_id: str = Field(description="Follow it with GET /v1/imports/{import_id}.")


class ImportOut(Answer):
    import_id: str
    format: str = Field(description="ndjson or csv")
    state: str = Field(description="queued, running or done")
    lines_total: int = Field(description="Data lines of the file (blank lines and a CSV header are not counted).")
    lines_done: int = Field(description="Lines processed, applied or failed.")
    lines_failed: int = Field(description="Lines not applied: GET /v1/imports/{import_id}/errors says why.")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ImportList(Answer):
    items: list[ImportOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null at the end.")


class LineError(Answer):
    line: int = Field(description="The line's number in the file (1-based; a CSV header is line 1).")
    reason: str


class LineErrorList(Answer):
    items: list[LineError]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at the end.")


_UPLOAD = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-ndjson": {"schema": {"type": "string", "format": "binary"}},
            "text/csv": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


def _format(request: Request) -> str:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in _MEDIA:
        raise InvalidInput(
            "an import is application/x-ndjson or text/csv",
            details=[
                {"loc": ["header", "content-type"], "type": "media_type", "msg": "application/x-ndjson or text/csv"}
            ],
        )
    return _MEDIA[media]


@router.post(
    "/imports", status_code=202, response_model=ImportCreated, responses=errors(413, 422), openapi_extra=_UPLOAD
)
async def create_import(request: Request, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> ImportCreated:
    """Import users, devices, tags and topic subscriptions from an NDJSON or CSV file (the body, at
    most NOTEE_IMPORT_MAX_BODY_BYTES). The file is kept as chunks a worker applies; 202 with the
    import's id. Bad lines are reported by number and skipped; the same file twice changes nothing."""
    fmt = _format(request)
    body = await request.body()
    settings = runtime.settings

    def store() -> str:
        import_id = imports.start_import(
            db,
            service,
            body,
            fmt,
            chunk_lines=settings.import_chunk_lines,
            max_line_bytes=settings.import_max_line_bytes,
        )
        db.commit()
        return import_id

    return ImportCreated(import_id=await to_thread.run_sync(store))


def _out(row: Any) -> ImportOut:
    return ImportOut.model_validate(row, from_attributes=True)


@router.get("/imports", response_model=ImportList, responses=errors(422))
def list_imports(
    service: ServiceDep,
    db: DbDep,
    cursor: Annotated[str | None, cursors.query(200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> ImportList:
    """The service's imports, newest first, a page at a time."""
    before = None
    if cursor:
        at, import_id = cursors.decode_position(cursor)
        before = (clock.naive_utc(at), import_id)
    rows = imports.list_imports(db, service, before, limit)
    last = rows[-1] if len(rows) == limit else None
    return ImportList(
        items=[_out(r) for r in rows],
        next_cursor=cursors.encode_position(last.created_at, last.import_id) if last else None,
    )


@router.get("/imports/{import_id}", response_model=ImportOut, responses=errors(404))
def get_import(import_id: ImportIdPath, service: ServiceDep, db: DbDep) -> ImportOut:
    """An import's state and progress (lines total, done and failed)."""
    return _out(imports.get_import(db, service, import_id))


@router.get("/imports/{import_id}/errors", response_model=LineErrorList, responses=errors(404, 422))
def import_errors(
    import_id: ImportIdPath,
    service: ServiceDep,
    db: DbDep,
    cursor: Annotated[str | None, cursors.query(40)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> LineErrorList:
    """An import's failed lines in line order, a page at a time: the line number and why."""
    after = cursors.decode_id(cursor) if cursor else None
    rows = imports.import_errors(db, service, import_id, after, limit)
    last = rows[-1].line_no if len(rows) == limit else None
    return LineErrorList(
        items=[LineError(line=r.line_no, reason=r.reason) for r in rows],
        next_cursor=cursors.encode_id(last) if last is not None else None,
    )


@router.get(
    "/exports/users",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}, "text/csv": {}}, "description": "The export"}},
)
def export_users(
    service: ServiceDep,
    runtime: RuntimeDep,
    format: Annotated[Literal["ndjson", "csv"], Query(description="ndjson (lossless) or csv.")] = "ndjson",
) -> StreamingResponse:
    """The service's users, devices, tags and topic subscriptions in the import's format, streamed in
    order of the service's user id, a page at a time (not a snapshot: docs/AUDIENCES.md)."""
    if format == "csv":
        return StreamingResponse(exports.csv_rows(runtime, service), media_type="text/csv; charset=utf-8")
    return StreamingResponse(exports.ndjson(runtime, service), media_type="application/x-ndjson")
