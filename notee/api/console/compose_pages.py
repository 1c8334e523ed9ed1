"""The console's composer (``/console/s/{service}/publish``): a publish to any target the API
accepts (a topic, a condition, a filter, segments or a list of users; optionally some platforms
only), the template's variables from a form, its reach and its preview per locale and platform
(live, from ``publish/preview.json``), when to send (now, at a time in the service's zone or UTC,
or at a local time of each recipient), then a confirmation page that restates target, reach, time
and message before anything is sent.

The form becomes the body of ``POST /v1/publish/{type}`` and is checked by that route's own model
(``GeneralPublishRequest``); the preview and the send are the same use-case calls as
``POST /v1/publish/{type}/preview`` and the publish. The page carries an Idempotency-Key made when
it was rendered, so a double click (or a resubmitted confirmation) makes one job."""

from __future__ import annotations

import json
import secrets
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from notee.api.console import devices, web, when
from notee.api.console.compose_payload import invalid_fields, payload_of
from notee.api.console.service_pages import _open
from notee.api.console.template_pages import json_object, pairs
from notee.api.console.web import PostedForm, SessionDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.routes.audience_publish import GeneralPublishRequest, publish_of
from notee.core import clock
from notee.core.errors import InvalidInput, NoteeError
from notee.domain import liquid, services, templates
from notee.domain.console import ConsoleSession
from notee.usecases.audience_publish import publish_to
from notee.usecases.estimate import Estimate, EstimateTarget, estimate
from notee.usecases.preview import Preview, preview

router = APIRouter(prefix=web.PREFIX + "/s/{service}", include_in_schema=False)

TARGETS = ("topic", "condition", "filter", "segments", "users")
PLATFORMS = ("AOS", "IOS", "WEB")
VAR_PREFIX = "var."
# Form fields that are the page's own, not the publish's (never carried to the confirmation page).
NOT_CARRIED = {"csrf", "confirmed", "zero_ok"}


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.replace("\n", ",").split(",") if n.strip()]


def _target(form: dict[str, str]) -> tuple[str, Any]:
    kind = form.get("target", "topic")
    if kind not in TARGETS:
        raise InvalidInput("target: one of " + ", ".join(TARGETS), details=[{"loc": ["target"], "type": "enum"}])
    if kind == "filter":
        return kind, json_object(form.get("filter", ""), "filter")
    if kind == "segments":
        include, exclude = _names(form.get("include", "")), _names(form.get("exclude", ""))
        return kind, {"include": include, "exclude": exclude} if include or exclude else None
    if kind == "users":
        return kind, [u.strip() for u in form.get("users", "").splitlines() if u.strip()] or None
    return kind, form.get(kind, "").strip() or None


def _send_at(form: dict[str, str], zone_name: str) -> str | None:
    """The form's send time (``send_at``: a datetime-local, in the service's zone or UTC) as RFC 3339."""
    text = form.get("send_at", "").strip()
    if not text:
        raise InvalidInput(
            "send_at: give the date and time to send at", details=[{"loc": ["send_at"], "type": "missing"}]
        )
    try:
        naive = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput("send_at: a date and time", details=[{"loc": ["send_at"], "type": "datetime"}]) from None
    zone = clock.zone("UTC" if form.get("send_at_zone") == "UTC" else zone_name)
    return naive.replace(tzinfo=zone).isoformat()


def _variables(form: dict[str, str]) -> dict[str, str] | None:
    given = {k[len(VAR_PREFIX) :]: v for k, v in form.items() if k.startswith(VAR_PREFIX) and v != ""}
    return {**(pairs(form.get("variables", ""), "variables") or {}), **given} or None


def _delivery(form: dict[str, str]) -> dict[str, Any]:
    """The form's TTL, priority and quiet-hours choice (empty: the template's), as the API takes them:
    a TTL that is not a whole number goes as it is, so the route's model refuses it (422, ``ttl_seconds``)."""
    asked: dict[str, Any] = {}
    ttl = form.get("ttl_seconds", "").strip()
    if ttl:
        asked["ttl_seconds"] = int(ttl) if ttl.isdigit() else ttl
    for field in ("priority", "quiet_hours"):
        if form.get(field, "").strip():
            asked[field] = form[field].strip()
    return asked


def request_body(form: dict[str, str], zone_name: str) -> dict[str, Any]:
    """The body of ``POST /v1/publish/{type}`` the form asks for (before the route's model checks it)."""
    kind, value = _target(form)
    body: dict[str, Any] = {"method": form.get("method") or "TOPIC", kind: value}
    platforms = [p for p in PLATFORMS if form.get(f"platform_{p}")]
    if platforms and len(platforms) < len(PLATFORMS):
        body["platforms"] = platforms
    body["variables"] = _variables(form)
    for field in ("title", "body"):
        if form.get(field, "").strip():
            body[field] = form[field].replace("\r\n", "\n")
    body |= _delivery(form)
    body["payload"] = payload_of(form)
    moment = form.get("when", "now")
    if moment == "at":
        body["send_at"] = _send_at(form, zone_name)
    elif moment == "local":
        body["local_time"] = form.get("local_time", "").strip()[:5]
    return {k: v for k, v in body.items() if v is not None}


def checked(form: dict[str, str], zone_name: str) -> tuple[str, GeneralPublishRequest]:
    """(type, the request) or InvalidInput with the API model's own messages (422)."""
    try:
        return form.get("type", ""), GeneralPublishRequest.model_validate(request_body(form, zone_name))
    except ValidationError as exc:
        details = [{"loc": list(e["loc"]), "type": e["type"], "msg": e["msg"]} for e in exc.errors()]
        message = "; ".join(f"{'.'.join(str(p) for p in d['loc']) or 'body'}: {d['msg']}" for d in details)
        raise InvalidInput(message, details=details) from None


def _reach_json(reach: Estimate) -> dict[str, Any]:
    return {
        "users": reach.users,
        "devices": reach.devices,
        "devices_by_platform": reach.devices_by_platform,
        "exact": reach.exact,
        "unknown_users": reach.unknown_users,
    }


def reaches_nobody(reach: Estimate) -> bool:
    reached = reach.devices if reach.devices is not None else reach.users
    return reached == 0


def preview_json(found: Preview) -> dict[str, Any]:
    """What the composer's live panel shows (the API preview's fields it needs)."""
    return {
        "reach": _reach_json(found.reach),
        "zero": reaches_nobody(found.reach),
        "warnings": found.warnings,
        "ttl_seconds": found.ttl_seconds,
        "priority": found.priority,
        "variants": [
            {
                "locale": v.locale or "default",
                "title": v.title,
                "body": v.body,
                "subtitle": ((v.rich or {}).get("ios") or {}).get(
                    "subtitle"
                ),  # iOS only: the variant's or the payload's
                "platforms": {
                    os: {"provider": p.provider, "bytes": p.bytes, "limit": p.limit, "over": p.over}
                    for os, p in v.platforms.items()
                },
                # what each platform's device would show, from the body its provider would get
                "devices": [
                    devices.card(os, p.provider, p.body, p.headers, (v.rich or {}).get("kind") or "alert")
                    | {"bytes": p.bytes, "limit": p.limit, "over": p.over}
                    for os, p in v.platforms.items()
                ],
            }
            for v in found.variants
        ],
    }


def variable_names(template: templates.Template) -> list[str]:
    """The top-level names the template's text and its variants' read from a request's variables
    (first use order; ``recipient.*`` is the recipient's): the composer's variable fields."""
    texts = [template.title, template.body, *(template.data or {}).values()]
    for v in (template.variants or {}).values():
        texts += [v.get("title", ""), v.get("body", ""), *(v.get("data") or {}).values()]
    names: dict[str, None] = {}
    for text in texts:
        try:
            paths = liquid.parse(text).paths
        except liquid.TemplateError:
            continue  # a saved template parses; nothing to offer otherwise
        names |= {p.split(".")[0]: None for p in paths if p.split(".")[0] != "recipient"}
    return list(names)


def _template_choices(db: DbDep, runtime: RuntimeDep, service: str) -> list[templates.Template]:
    return [t for t in templates.list_templates(db, runtime.statements, service) if t.method in ("TOPIC", "SINGLE")]


def _composer(
    request: Request, who: ConsoleSession, found: services.Service, db: DbDep, runtime: RuntimeDep, **ctx: Any
) -> Response:
    status_code = ctx.pop("status_code", 200)
    form: dict[str, str] = ctx.pop("form", {})
    choices = _template_choices(db, runtime, found.service)
    chosen = next(
        (t for t in choices if t.type == form.get("type") and t.method == (form.get("method") or "TOPIC")),
        choices[0] if choices and not form.get("type") else None,
    )
    if chosen is not None:
        form = {"type": chosen.type, "method": chosen.method} | {
            k: v for k, v in form.items() if k not in ("type", "method")
        }
    form.setdefault("idempotency_key", secrets.token_urlsafe(18))
    return web.render(
        request,
        "publish.html",
        who,
        status_code,
        service=found.service,
        base=f"{web.PREFIX}/s/{found.service}",
        templates=choices,
        chosen=chosen,
        variables=variable_names(chosen) if chosen else [],
        form=form,
        zone=found.timezone,
        error=ctx.pop("error", None),
        invalid=ctx.pop("invalid", []),
        **ctx,
    )


@router.get("/publish")
def publish_form(request: Request, service: str, who: SessionDep, db: DbDep, runtime: RuntimeDep) -> Response:
    """The composer; ``?type=``, ``?method=``, ``?topic=`` preselect (the topics page links here)."""
    found = _open(db, who, service)
    query = request.query_params
    asked = {k: v for k, v in query.items() if k in ("type", "method", "topic") and v}
    method, _, type_ = (query.get("template") or "").partition("/")
    if type_:
        asked |= {"method": method, "type": type_}
    if asked.get("topic"):
        asked["target"] = "topic"
    return _composer(request, who, found, db, runtime, form=asked)


@router.post("/publish/edit")
def publish_edit(
    request: Request, service: str, who: SessionDep, form: PostedForm, db: DbDep, runtime: RuntimeDep
) -> Response:
    """Back from the confirmation page to the composer, with everything as it was filled in but the
    Idempotency-Key: a changed publish is another request, so the page gets a new one."""
    found = _open(db, who, service)
    kept = {k: v for k, v in form.items() if k not in NOT_CARRIED and k != "idempotency_key"}
    return _composer(request, who, found, db, runtime, form=kept)


@router.post("/publish/preview.json")
def publish_preview_json(service: str, who: SessionDep, form: PostedForm, db: DbDep, runtime: RuntimeDep) -> Response:
    """The composer's live reach and preview: what POST /v1/publish/{type}/preview answers for the
    form. A form the publish would refuse is that 4xx in the error format, with the target's reach
    when the target itself is countable (so the reach shows while a variable is still missing)."""
    found = _open(db, who, service)
    try:
        type_, asked = checked(form, found.timezone)
        answer = preview_json(preview(runtime, db, publish_of(type_, asked, service, None)))
    except NoteeError as exc:
        db.rollback()
        error: dict[str, Any] = {"code": exc.code, "message": exc.message, "details": exc.details or []}
        reach = _reach_only(db, runtime, service, form)
        return web.json_answer(
            {"error": error, "reach": reach, "invalid": invalid_fields(exc.details, form)}, exc.status
        )
    db.rollback()  # read only
    return web.json_answer(answer)


def _reach_only(db: DbDep, runtime: RuntimeDep, service: str, form: dict[str, str]) -> dict[str, Any] | None:
    try:
        kind, value = _target(form)
        platforms = tuple(p for p in PLATFORMS if form.get(f"platform_{p}")) or None
        found = estimate(
            db,
            runtime.statements,
            service,
            EstimateTarget(**{kind: value}, type=form.get("type") or None, platforms=platforms),
        )
    except (NoteeError, TypeError, ValueError):
        db.rollback()
        return None
    db.rollback()
    return _reach_json(found)


def _when_text(asked: GeneralPublishRequest, zone_name: str) -> str:
    if asked.send_at is not None:
        at = when.moment(asked.send_at, zone_name)
        return f"at {at.local} ({at.utc})"
    if asked.local_time is not None:
        return f"at {asked.local_time} on each recipient's clock (the user's time zone, else {zone_name})"
    return "now"


def chosen_quiet_mode(db: DbDep, runtime: RuntimeDep, service: str, asked: GeneralPublishRequest, type_: str) -> str:
    """The template's quiet-hours mode (hold or drop), for the confirmation page's words."""
    choices = _template_choices(db, runtime, service)
    found = next((t for t in choices if t.type == type_ and t.method == asked.method), None)
    return found.quiet_hours if found is not None else "hold"


def _quiet_text(asked: GeneralPublishRequest, template_mode: str) -> str:
    if asked.quiet_hours == "override":
        return "overridden: sent whatever the recipients' quiet hours"
    if template_mode == "drop":
        return "honoured: recipients in their quiet hours do not get it (the template drops)"
    return "honoured: recipients in their quiet hours get it when their quiet hours end"


@router.post("/publish")
def publish(
    request: Request, service: str, who: SessionDep, form: PostedForm, db: DbDep, runtime: RuntimeDep
) -> Response:
    """Without ``confirmed``: the confirmation page (target, reach, time, message, warnings). With
    it: the publish (its Idempotency-Key: the page's), then the job's live page. A target that
    reaches nobody is sent only when the confirmation's "send anyway" box is ticked."""
    found = _open(db, who, service)
    carried = {k: v for k, v in form.items() if k not in NOT_CARRIED}
    try:
        type_, asked = checked(form, found.timezone)
        key = form.get("idempotency_key") or None
        shown = preview(runtime, db, publish_of(type_, asked, service, None))
        db.rollback()  # the preview wrote nothing; the publish below owns the unit of work
        nobody = reaches_nobody(shown.reach)
        if form.get("confirmed") != "1" or (nobody and form.get("zero_ok") != "1"):
            error = (
                "This target reaches nobody: tick “send anyway” to send it." if form.get("confirmed") == "1" else None
            )
            return web.render(
                request,
                "publish_confirm.html",
                who,
                422 if error else 200,
                service=service,
                base=f"{web.PREFIX}/s/{service}",
                carried=carried,
                preview=preview_json(shown),
                nobody=nobody,
                when_text=_when_text(asked, found.timezone),
                quiet_text=_quiet_text(asked, chosen_quiet_mode(db, runtime, service, asked, type_)),
                target=json.dumps(request_body(form, found.timezone), ensure_ascii=False),
                type_=type_,
                error=error,
            )
        job = publish_to(runtime, db, publish_of(type_, asked, service, key)).job
        db.commit()
    except NoteeError as exc:
        db.rollback()
        invalid = invalid_fields(exc.details, form)
        return _composer(
            request, who, found, db, runtime, status_code=exc.status, error=exc.message, form=carried, invalid=invalid
        )
    return web.redirect(f"{web.PREFIX}/s/{service}/jobs/{job.job_id}")
