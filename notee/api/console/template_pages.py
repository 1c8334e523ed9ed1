"""Console pages of a service's templates (``/console/s/{service}/templates``): the list, a form to
create one, and an edit page per template that shows **every** field the template has (text,
Liquid included, locale variants, quiet-hours mode, TTL, priority, data, defaults and the rich
payload) so saving it keeps what the editor did not touch.

Saving is the same domain call as ``PUT /v1/templates/{method}/{type}`` (a whole replacement), so
the form is the template: a field the form does not carry at all (an older page, a hand-made POST)
keeps the stored value rather than being reset to its default."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from notee.api.console import web
from notee.api.console.service_pages import _open
from notee.api.console.web import PostedForm, SessionDep
from notee.api.deps import DbDep, RuntimeDep
from notee.core.errors import InvalidInput, NoteeError, NotFound
from notee.domain import templates
from notee.domain.console import ConsoleSession
from notee.domain.templates import Template, TemplateInput

router = APIRouter(prefix=web.PREFIX + "/s/{service}", include_in_schema=False)

METHODS = ("TOPIC", "CYCLE", "SINGLE")
# The form's fields, each the name of a TemplateInput field (what a save replaces).
FIELDS = ("title", "body", "data", "defaults", "ttl_seconds", "priority", "variants", "quiet_hours", "payload")


def pairs(text: str, what: str) -> dict[str, str] | None:
    """``name=value`` lines of a textarea as a map (None when empty); a line without ``=`` is 422."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise InvalidInput(f"{what}: each line is name=value", details=[{"loc": [what], "type": "format"}])
        out[name.strip()] = value.strip()
    return out or None


def json_object(text: str, what: str) -> Any:
    """A textarea's JSON (None when empty); text that is not JSON is 422 (the domain checks the rest)."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise InvalidInput(f"{what}: not JSON", details=[{"loc": [what], "type": "json_invalid"}]) from None


def _lines(values: dict[str, str] | None) -> str:
    return "\n".join(f"{k}={v}" for k, v in (values or {}).items())


def _pretty(value: Any) -> str:
    return "" if value is None else json.dumps(value, indent=2, ensure_ascii=False)


def form_of_template(t: Template) -> dict[str, str]:
    """The edit form's values for a stored template: every field, as the form's controls show it."""
    return {
        "method": t.method,
        "type": t.type,
        "title": t.title,
        "body": t.body,
        "data": _lines(t.data),
        "defaults": _lines(t.defaults),
        "ttl_seconds": "" if t.ttl_seconds is None else str(t.ttl_seconds),
        "priority": t.priority,
        "variants": _pretty(t.variants),
        "quiet_hours": t.quiet_hours,
        "payload": _pretty(t.payload),
        "kind": "background" if isinstance(t.payload, dict) and t.payload.get("kind") == "background" else "alert",
    }


def _ttl(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not text.isdigit():
        raise InvalidInput("ttl_seconds: a whole number of seconds", details=[{"loc": ["ttl_seconds"], "type": "int"}])
    return int(text)


def template_input(form: dict[str, str], stored: Template | None) -> TemplateInput:
    """What a posted form asks to save. A field the form does not carry keeps the stored template's
    value (or the API's default for a new template): a save never drops what it did not show."""
    kept = form_of_template(stored) if stored is not None else {}
    merged = {name: form[name] if name in form else kept.get(name, "") for name in FIELDS}
    payload = json_object(merged["payload"], "payload")
    if form.get("kind") == "background":  # a silent push: the payload's kind, no title or body
        payload = {**payload, "kind": "background"} if isinstance(payload, dict) else payload or {"kind": "background"}
    return TemplateInput(
        title=merged["title"],
        body=merged["body"].replace("\r\n", "\n"),
        data=pairs(merged["data"], "data"),
        defaults=pairs(merged["defaults"], "defaults"),
        ttl_seconds=_ttl(merged["ttl_seconds"]),
        priority=merged["priority"] or "high",
        variants=json_object(merged["variants"], "variants"),
        quiet_hours=merged["quiet_hours"] or "hold",
        payload=payload,
    )


def _stored(db: DbDep, runtime: RuntimeDep, service: str, method: str, type_: str) -> Template | None:
    try:
        return templates.get_template(db, runtime.statements, service, method, type_)
    except NotFound:
        return None


def _templates_page(
    request: Request, who: ConsoleSession, service: str, db: DbDep, runtime: RuntimeDep, **ctx: Any
) -> Response:
    status_code = ctx.pop("status_code", 200)
    listed = templates.list_templates(db, runtime.statements, service)
    ctx.setdefault("error", None)
    ctx.setdefault("saved", None)
    ctx.setdefault("form", {})
    ctx.setdefault("editing", False)
    return web.render(
        request,
        "templates.html",
        who,
        status_code,
        service=service,
        base=f"{web.PREFIX}/s/{service}",
        templates=listed,
        methods=METHODS,
        **ctx,
    )


@router.get("/templates")
def show_templates(
    request: Request, service: str, who: SessionDep, db: DbDep, runtime: RuntimeDep, saved: str | None = None
) -> Response:
    _open(db, who, service)
    return _templates_page(request, who, service, db, runtime, saved=saved)


@router.get("/templates/{method}/{type_}/edit")
def edit_template(
    request: Request, service: str, method: str, type_: str, who: SessionDep, db: DbDep, runtime: RuntimeDep
) -> Response:
    """The template's every field in the form (another service's or a missing template: 404)."""
    _open(db, who, service)
    found = templates.get_template(db, runtime.statements, service, method, type_)
    return _templates_page(request, who, service, db, runtime, form=form_of_template(found), editing=True)


@router.post("/templates")
def save_template(
    request: Request, service: str, who: SessionDep, form: PostedForm, db: DbDep, runtime: RuntimeDep
) -> Response:
    _open(db, who, service)
    method, type_ = form.get("method", ""), form.get("type", "").strip()
    try:
        stored = _stored(db, runtime, service, method, type_) if method in METHODS and type_ else None
        templates.put_template(db, runtime.statements, service, method, type_, template_input(form, stored))
        db.commit()
    except NoteeError as exc:
        db.rollback()
        editing = form.get("editing") == "1"
        return _templates_page(
            request, who, service, db, runtime, status_code=exc.status, error=exc.message, form=form, editing=editing
        )
    return web.redirect(f"{web.PREFIX}/s/{service}/templates?{urlencode({'saved': f'{method} {type_}'})}")
