"""The web console at ``/console`` (docs/CONSOLE.md): server-rendered pages over the same domain
functions the API routes call (each request owns its unit of work), signed in with the admin token
or a service's API key, a server-side session behind an HttpOnly SameSite=Strict cookie, CSRF tokens
on every form, and every asset served from this package."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from notee.api.console import (
    compose_pages,
    engagement_pages,
    job_pages,
    pages,
    segment_pages,
    service_pages,
    template_pages,
    web,
)
from notee.api.errors import known_error_response


def install(app: FastAPI) -> None:
    """Add the console's routes, its static files and its error pages to ``app``."""
    app.state.console_templates = web.templates()
    app.state.console_throttle = web.SignInThrottle(app.state.settings.console_signin_failures)
    app.include_router(pages.router)
    app.include_router(service_pages.router)
    app.include_router(template_pages.router)
    app.include_router(job_pages.router)
    app.include_router(compose_pages.router)
    app.include_router(segment_pages.router)
    app.include_router(engagement_pages.router)
    app.mount(web.PREFIX + "/static", StaticFiles(packages=[("notee.api.console", "static")]), name="console-static")

    @app.exception_handler(web.SignInRequired)
    async def _sign_in(request: Request, exc: web.SignInRequired) -> Response:
        if exc.path.endswith(".json"):
            return web.json_answer(
                {"error": {"code": "unauthorized", "message": "sign in to the console first", "details": []}}, 401
            )
        return web.redirect(web.sign_in_url(exc.path if request.method == "GET" else web.PREFIX + "/"))

    @app.exception_handler(web.CsrfRejected)
    async def _csrf(request: Request, _exc: web.CsrfRejected) -> Response:
        return web.render(
            request,
            "error.html",
            None,
            403,
            title="Form rejected",
            message="This form did not carry the session's security token (an old page, or a forged request). "
            "Nothing was changed; reload the page and try again.",
        )

    # Domain errors and store outages on a console page are an HTML page with the API's status and
    # message; everywhere else (and on the console's .json endpoints) the API's JSON error as before.
    # errors.install registered exactly these classes with one handler (known_error_response).
    for exc_class, previous in list(app.exception_handlers.items()):
        if isinstance(exc_class, type) and exc_class not in _NOT_DOMAIN:
            app.add_exception_handler(exc_class, _html_or(previous))


_NOT_DOMAIN: tuple[type, ...] = (RequestValidationError, StarletteHTTPException, web.SignInRequired, web.CsrfRejected)


def _html_or(previous: Callable[[Request, Any], Response | Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    async def handler(request: Request, exc: Exception) -> Response:
        if not request.url.path.startswith(web.PREFIX + "/") or request.url.path.endswith(".json"):
            answer = previous(request, exc)
            return await answer if inspect.isawaitable(answer) else answer
        response = known_error_response(exc)
        if response is None:
            raise exc
        error = json.loads(bytes(response.body))["error"]
        page = web.render(request, "error.html", None, response.status_code, title="Error", message=error["message"])
        if "Retry-After" in response.headers:
            page.headers["Retry-After"] = response.headers["Retry-After"]
        return page

    return handler
