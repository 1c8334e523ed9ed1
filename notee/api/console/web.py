"""The console's plumbing: the session cookie, CSRF, form bodies, sign-in throttling and rendering.

Pages are Jinja2 templates rendered on the server (autoescaped); the only script is
``static/console.js`` (live job progress). Every response carries a strict Content-Security-Policy
(scripts and styles from Notee only, no inline code), ``Cache-Control: no-store`` and framing off.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from notee.api.deps import RuntimeDep
from notee.core.settings import Settings
from notee.domain import console
from notee.domain.console import ConsoleSession

COOKIE = "notee_console"
SIGN_IN_COOKIE = "notee_console_signin"  # the sign-in form's double-submit CSRF token (no session yet)
PREFIX = "/console"
MAX_FORM_FIELDS = 200
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
    " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class SignInRequired(Exception):
    """No live session: pages redirect to the sign-in form, JSON endpoints answer 401."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class CsrfRejected(Exception):
    """A form without this session's CSRF token: 403, nothing done."""


def admin_token(settings: Settings) -> str | None:
    token = settings.admin_token
    return token.get_secret_value() if token is not None and token.get_secret_value() else None


def templates() -> Environment:
    """The console's template environment (one per app, built by ``install``)."""
    env = Environment(
        loader=PackageLoader("notee.api.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,  # a misspelt variable fails the test that renders it, not silently blank
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = lambda dt: "" if dt is None else dt.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    return env


def secured(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    return response


def render(
    request: Request,
    name: str,
    who: ConsoleSession | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    env: Environment = request.app.state.console_templates
    html = env.get_template(name).render(
        who=who,
        principal=who.principal if who else None,
        csrf=who.csrf_token if who else "",
        path=request.url.path,
        **context,
    )
    response = HTMLResponse(html, status_code=status_code)
    secured(response)
    return response


def redirect(url: str) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)  # after a POST: the browser GETs the next page
    secured(response)
    return response


def json_answer(body: Mapping[str, Any], status_code: int = 200) -> JSONResponse:
    response = JSONResponse(dict(body), status_code=status_code)
    secured(response)
    return response


def sign_in_url(next_path: str) -> str:
    return f"{PREFIX}/sign-in?next={quote(next_path, safe='/')}"


def safe_next(value: str | None) -> str:
    """Where to go after sign-in: only a console path (no open redirect to another site)."""
    if value and value.startswith(PREFIX + "/") and not any(bad in value for bad in ("//", "\\", "..", "\n", "\r")):
        return value
    return PREFIX + "/"


def set_session_cookie(request: Request, response: Response, session_id: str, ttl_s: int) -> None:
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=ttl_s,
        path=PREFIX,
        httponly=True,  # no script reads it
        samesite="strict",  # never sent on a request another site starts
        secure=request.url.scheme == "https",  # served over TLS: never sent in clear
    )


def set_sign_in_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        SIGN_IN_COOKIE,
        token,
        max_age=3600,
        path=PREFIX + "/sign-in",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_sign_in_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        SIGN_IN_COOKIE, path=PREFIX + "/sign-in", httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )


def sign_in_csrf_matches(request: Request, given: str | None) -> bool:
    expected = request.cookies.get(SIGN_IN_COOKIE)
    return bool(expected) and given is not None and hmac.compare_digest(given.encode(), (expected or "").encode())


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict", secure=request.url.scheme == "https")


async def form_of(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (the last value of a repeated name);
    anything else is an empty form, which fails the CSRF check. The edge already bounded its size."""
    if request.method != "POST":
        return {}
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        return {}
    try:
        pairs = parse_qsl(
            (await request.body()).decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        return {}
    return dict(pairs)


def signed_in(request: Request, runtime: RuntimeDep) -> ConsoleSession:
    with runtime.sessions() as db:
        who = console.current_session(db, request.cookies.get(COOKIE), admin_token(request.app.state.settings))
    if who is None:
        raise SignInRequired(request.url.path)
    return who


SessionDep = Annotated[ConsoleSession, Depends(signed_in)]
FormDep = Annotated[dict[str, str], Depends(form_of)]


def checked_form(form: FormDep, who: SessionDep) -> dict[str, str]:
    """The POSTed form, once its CSRF token is this session's (synchronizer token)."""
    if not console.csrf_matches(who, form.get("csrf")):
        raise CsrfRejected
    return form


PostedForm = Annotated[dict[str, str], Depends(checked_form)]


class SignInThrottle:
    """Sign-in tries per client address in a sliding minute (in this process). Each try is taken
    before the secret is checked and given back only when it succeeds, so tries running at once
    cannot pass the limit together; past it, sign-in answers 429 without checking the secret, so
    guessing keys costs a minute per ``limit`` tries."""

    WINDOW_S = 60.0
    MAX_ADDRESSES = 10_000  # bounded memory: the oldest address is forgotten first

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(address, deque())
        while failures and failures[0] <= now - self.WINDOW_S:
            failures.popleft()
        return failures

    def take(self, address: str) -> tuple[int, float]:
        """One try for this address: (0, its time) when it may try now (the try counts as a failure
        until ``give_back``), else (seconds until it may try again, 0)."""
        now = time.monotonic()
        with self._lock:
            failures = self._recent(address, now)
            if len(failures) >= self.limit:
                return max(1, int(failures[0] + self.WINDOW_S - now) + 1), 0.0
            failures.append(now)
            if len(self._failures) > self.MAX_ADDRESSES:
                self._failures.pop(next(iter(self._failures)))
            return 0, now

    def give_back(self, address: str, taken: float) -> None:
        """A try that did not fail (it signed in, or the store was down): not counted."""
        with self._lock:
            failures = self._failures.get(address)
            if failures is not None and taken in failures:
                failures.remove(taken)


def client_address(request: Request) -> str:
    """The connection's peer address; a forwarded one only from NOTEE_API_TRUSTED_PROXIES (uvicorn's
    proxy headers, configured by notee.api.server), so a client cannot choose its own."""
    return request.client.host if request.client is not None else "unknown"
