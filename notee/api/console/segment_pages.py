"""Console pages of a service's segments (``/console/s/{service}/segments``, docs/CONSOLE.md): the
list with what each reaches now, a builder to create or edit one (groups of predicates, edited by
``static/segments.js``, with a live estimate from ``segments/estimate.json``), and delete after a
confirmation page. The same domain calls as ``/v1/segments`` and ``/v1/audience/estimate``; a
service's session opens only its own service (404 otherwise)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from notee.api.console import web
from notee.api.console.service_pages import _open, _page
from notee.api.console.web import PostedForm, SessionDep
from notee.api.deps import DbDep, RuntimeDep
from notee.core.errors import InvalidInput, NoteeError
from notee.domain import segments
from notee.domain.console import ConsoleSession
from notee.domain.segments import SegmentInput
from notee.usecases.estimate import EstimateTarget, estimate

router = APIRouter(prefix=web.PREFIX + "/s/{service}/segments", include_in_schema=False)

PAGE = 20  # segments a page, each counted (docs/AUDIENCES.md: counts cost a read of the devices each)
NEW_FILTER = '[[{"tag": "", "op": "=", "value": ""}]]'


@router.get("")
def segments_page(
    request: Request,
    service: str,
    who: SessionDep,
    db: DbDep,
    after: str | None = None,
    saved: str | None = None,
    deleted: str | None = None,
) -> Response:
    """The service's segments in name order, each with what it reaches now."""
    _open(db, who, service)
    listed = segments.list_segments(db, service, after, PAGE, counted=True)
    next_after = listed[-1].name if len(listed) == PAGE else None
    return _page(
        request, "segments.html", who, service, segments=listed, next_after=next_after, saved=saved, deleted=deleted
    )


def _edit_page(
    request: Request, who: ConsoleSession, service: str, form: dict[str, str], status_code: int = 200, **ctx: Any
) -> Response:
    ctx.setdefault("error", None)
    return _page(request, "segment_edit.html", who, service, status_code, form=form, **ctx)


@router.get("/new")
def new_segment(request: Request, service: str, who: SessionDep, db: DbDep) -> Response:
    _open(db, who, service)
    return _edit_page(request, who, service, {"mode": "create", "name": "", "description": "", "filter": NEW_FILTER})


@router.get("/{name}/edit")
def edit_segment(request: Request, service: str, name: str, who: SessionDep, db: DbDep) -> Response:
    _open(db, who, service)
    found = segments.get_segment(db, service, name, counted=False)
    form = {"mode": "update", "name": found.name, "description": found.description, "filter": json.dumps(found.filter)}
    return _edit_page(request, who, service, form)


def _filter_of(form: dict[str, str]) -> Any:
    try:
        return json.loads(form.get("filter", ""))
    except ValueError:
        msg = "the filter is not JSON"
        raise InvalidInput(msg, details=[{"loc": ["body", "filter"], "type": "json_invalid", "msg": msg}]) from None


@router.post("")
def save_segment(
    request: Request, service: str, who: SessionDep, form: PostedForm, db: DbDep, runtime: RuntimeDep
) -> Response:
    """Create (``mode=create``: a taken name is refused) or replace (``mode=update``) a segment."""
    _open(db, who, service)
    limit = runtime.settings.segments_per_service_max
    try:
        given = SegmentInput(form.get("name", "").strip(), form.get("description", ""), _filter_of(form))
        if form.get("mode") == "update":
            segments.put_segment(db, service, given, limit)
        else:
            segments.create_segment(db, service, given, limit)
        db.commit()
    except NoteeError as exc:
        db.rollback()
        return _edit_page(request, who, service, form, exc.status, error=exc.message)
    return web.redirect(f"{web.PREFIX}/s/{service}/segments?{urlencode({'saved': given.name})}")


@router.get("/{name}/delete")
def confirm_delete(request: Request, service: str, name: str, who: SessionDep, db: DbDep) -> Response:
    """Asks before deleting: the delete is a POST from this page."""
    _open(db, who, service)
    found = segments.get_segment(db, service, name)
    return _page(request, "segment_delete.html", who, service, segment=found)


@router.post("/{name}/delete")
def delete_segment(service: str, name: str, who: SessionDep, form: PostedForm, db: DbDep) -> Response:
    _open(db, who, service)
    segments.delete_segment(db, service, name)
    db.commit()
    return web.redirect(f"{web.PREFIX}/s/{service}/segments?{urlencode({'deleted': name})}")


@router.post("/estimate.json")
def estimate_json(service: str, who: SessionDep, form: PostedForm, db: DbDep, runtime: RuntimeDep) -> Response:
    """The builder's live estimate: the form's ``filter`` (JSON) counted as POST /v1/audience/estimate
    does; the session's CSRF token in the form, like every console POST."""
    _open(db, who, service)
    found = estimate(db, runtime.statements, service, EstimateTarget(filter=_filter_of(form)))
    db.rollback()  # read only
    return web.json_answer(
        {
            "users": found.users,
            "devices": found.devices,
            "devices_by_platform": found.devices_by_platform,
            "exact": found.exact,
            "method": found.method,
        }
    )
