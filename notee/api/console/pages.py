"""Console pages outside one service: sign-in and sign-out, the home redirect, services and keys
(admin), and store and worker health."""

from __future__ import annotations

import asyncio
import logging
import secrets
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from notee.api.auth import key_cache
from notee.api.console import web
from notee.api.console.web import FormDep, PostedForm, SessionDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.routes.health import check_stores
from notee.core.errors import NoteeError, NotFound, Unauthorized
from notee.core.settings import Settings
from notee.domain import console, insight, services
from notee.usecases import heartbeats

log = logging.getLogger(__name__)
router = APIRouter(prefix=web.PREFIX, include_in_schema=False)
SERVICES_PAGE = 50


@router.get("/")
@router.get("")
def home(who: SessionDep) -> Response:
    if who.principal.is_admin:
        return web.redirect(f"{web.PREFIX}/services")
    return web.redirect(f"{web.PREFIX}/s/{who.principal.service}/jobs")


def _sign_in_page(request: Request, status_code: int, next_path: str, error: str | None) -> Response:
    """The form, with a fresh pre-session CSRF token in a cookie and in the form (double submit:
    another site cannot sign a browser in to a session of its choosing)."""
    token = secrets.token_urlsafe(24)
    page = web.render(request, "sign_in.html", None, status_code, next=next_path, error=error, signin_csrf=token)
    web.set_sign_in_cookie(request, page, token)
    return page


@router.get("/sign-in")
def sign_in_form(request: Request, next: str | None = None) -> Response:
    return _sign_in_page(request, 200, web.safe_next(next), None)


@router.post("/sign-in")
def sign_in(request: Request, form: FormDep, runtime: RuntimeDep) -> Response:
    """The pasted admin token or API key opens a session; it is never stored, logged or echoed."""
    throttle: web.SignInThrottle = request.app.state.console_throttle
    address = web.client_address(request)
    next_path = web.safe_next(form.get("next"))
    if not web.sign_in_csrf_matches(request, form.get("csrf")):
        raise web.CsrfRejected
    wait_s, taken = throttle.take(address)
    if wait_s:
        page = _sign_in_page(
            request, 429, next_path, f"Too many failed sign-ins from this address; try again in {wait_s} s."
        )
        page.headers["Retry-After"] = str(wait_s)
        return page
    settings: Settings = request.app.state.settings  # the app's own (the admin token it checks)
    failed = False
    try:
        with runtime.sessions() as db:
            try:
                principal = console.identify(db, form.get("secret", ""), web.admin_token(settings))
                session_id, _ = console.open_session(
                    db, principal, admin_token=web.admin_token(settings), ttl_s=settings.console_session_ttl_s
                )
            except Unauthorized:
                failed = True
                log.info("console sign-in refused from %s", address)
                return _sign_in_page(request, 401, next_path, "Unknown admin token or API key.")
            db.commit()
    finally:
        if not failed:
            throttle.give_back(address, taken)
    log.info(
        "console sign-in: %s",
        "admin" if principal.is_admin else f"service={principal.service} key_id={principal.key_id}",
    )
    response = web.redirect(next_path)
    web.set_session_cookie(request, response, session_id, settings.console_session_ttl_s)
    web.clear_sign_in_cookie(request, response)
    return response


@router.post("/sign-out")
def sign_out(request: Request, form: PostedForm, db: DbDep) -> Response:
    console.close_session(db, request.cookies.get(web.COOKIE))
    db.commit()
    response = web.redirect(f"{web.PREFIX}/sign-in")
    web.clear_session_cookie(request, response)
    return response


# --- services and keys (admin) ---------------------------------------------------------------------


def _require_admin(who: console.ConsoleSession) -> None:
    if not who.principal.is_admin:
        raise NotFound("no such page")  # a service's session does not learn the admin pages exist


def _services_page(
    request: Request,
    who: console.ConsoleSession,
    db: DbDep,
    status_code: int = 200,
    *,
    error: str | None = None,
    new_key: dict[str, str] | None = None,
    find: str | None = None,
) -> Response:
    """One page of services (50, in id order), those whose id starts with ``find`` or ``?q=``."""
    query = request.query_params
    prefix = (find if find is not None else query.get("q") or "").strip().upper()[:32]
    after = query.get("after") or None
    found = services.services_page(db, prefix=prefix, after=after, limit=SERVICES_PAGE + 1)
    more = len(found) > SERVICES_PAGE
    page = found[:SERVICES_PAGE]
    keys = services.api_keys_by_service(db, [s.service for s in page])
    activity = {svc: summary.totals for svc, summary in insight.summaries_of(db, [s.service for s in page]).items()}
    return web.render(
        request,
        "services.html",
        who,
        status_code,
        services=page,
        keys=keys,
        activity=activity,
        prefix=prefix,
        next_after=page[-1].service if more else None,
        error=error,
        new_key=new_key,
    )


@router.get("/services")
def show_services(request: Request, who: SessionDep, db: DbDep) -> Response:
    _require_admin(who)
    return _services_page(request, who, db)


@router.post("/services")
def create_service(request: Request, who: SessionDep, form: PostedForm, db: DbDep) -> Response:
    _require_admin(who)
    try:
        services.create_service(
            db,
            service=form.get("service", "").strip(),
            display_name=form.get("display_name", "").strip(),
            timezone=form.get("timezone", "").strip() or None,
            delivery_mode=form.get("delivery_mode", "live"),
        )
        db.commit()
    except NoteeError as exc:
        db.rollback()
        return _services_page(request, who, db, exc.status, error=exc.message)
    return web.redirect(f"{web.PREFIX}/services?{urlencode({'q': form.get('service', '').strip()})}")


@router.post("/services/{service}/keys")
def create_key(request: Request, service: str, who: SessionDep, form: PostedForm, db: DbDep) -> Response:
    """The new key is on this one page (not stored, not in a redirect URL); Notee keeps its hash."""
    _require_admin(who)
    kind = "client" if form.get("kind") == "client" else "server"  # a client key may only post receipts
    created = services.create_api_key(db, service, label=form.get("label", "").strip()[:100], kind=kind)
    db.commit()
    return _services_page(request, who, db, new_key={"service": service, "api_key": created.api_key}, find=service)


@router.post("/services/{service}/keys/{key_id}/revoke")
def revoke_key(request: Request, service: str, key_id: str, who: SessionDep, form: PostedForm, db: DbDep) -> Response:
    _require_admin(who)
    services.revoke_api_key(db, service, key_id)
    db.commit()
    key_cache(request).forget(key_id)
    return web.redirect(f"{web.PREFIX}/services?{urlencode({'q': service})}")


# --- health ----------------------------------------------------------------------------------------


@router.get("/health")
async def health(request: Request, who: SessionDep, runtime: RuntimeDep) -> Response:
    stores = await asyncio.to_thread(check_stores, runtime, request.app.state.settings.emulator_url)

    def work() -> tuple[console.QueueOverview, list[object], list[heartbeats.ProcessView]]:
        with runtime.sessions() as db:
            return (
                console.queue_overview(db, who.principal),
                list(console.recent_scheduler_minutes(db)),
                heartbeats.process_health(db),
            )

    queue, minutes, processes = await asyncio.to_thread(work)
    # A tenant sees kinds, counts, ages and breaker states; process ids, lease owners and scheduler
    # owners name hosts (the deployment's topology: the operator's, not a tenant's business).
    return web.render(
        request,
        "health.html",
        who,
        stores=stores,
        queue=queue,
        minutes=minutes,
        kinds=heartbeats.by_kind(processes),
        processes=processes if who.principal.is_admin else [],
        providers=heartbeats.PROVIDERS,
    )
