"""One error format for the whole API, and the one place errors become HTTP responses.

Body: ``{"error": {"code": "<stable machine code>", "message": "<human text>", "details": [...]}}``.
"""

from __future__ import annotations

import logging
from typing import Any

from cassandra import DriverException
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException
from cassandra.protocol import ServerError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from pymysql import err as pymysql_err
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from notee.api.route_table import allowed_methods
from notee.core.errors import NoteeError
from notee.store.outage import is_store_outage

log = logging.getLogger(__name__)


class ErrorDetail(BaseModel):
    """One problem: where (``loc``, e.g. ``["body", "variables", "name"]``), what kind (``type``, a
    stable machine code) and a human ``msg``; ``ctx`` holds the numbers involved (a limit, say).
    Validation errors and domain errors use this one shape."""

    loc: list[str]
    type: str
    msg: str
    ctx: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[ErrorDetail] = []


class ErrorResponse(BaseModel):
    error: ErrorBody


def error_response(
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": [_detail(d, message) for d in details or []]}}
    return JSONResponse(body, status_code=status, headers=headers)


def _detail(detail: dict[str, Any], message: str) -> dict[str, Any]:
    """Any detail a domain error gave, in the one ``ErrorDetail`` shape: ``field``/``reason`` become
    ``loc``/``type``, other keys go to ``ctx``."""
    out: dict[str, Any] = {
        "loc": [str(p) for p in detail.get("loc") or ([detail["field"]] if "field" in detail else [])],
        "type": str(detail.get("type") or detail.get("reason") or "invalid"),
        "msg": str(detail.get("msg") or message),
    }
    ctx = {k: v for k, v in detail.items() if k not in ("loc", "type", "msg", "field", "reason", "ctx")}
    ctx |= detail.get("ctx") or {}
    if ctx:
        out["ctx"] = ctx
    return out


# Responses every route may give, for the OpenAPI document.
COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing, unknown or revoked credentials"},
    413: {"model": ErrorResponse, "description": "Request body over NOTEE_API_MAX_BODY_BYTES"},
    422: {"model": ErrorResponse, "description": "Invalid input; nothing was written"},
    429: {
        "model": ErrorResponse,
        "description": "The service's rate limit of this class of requests is used up "
        "(tenant routes; Retry-After says when to retry)",
    },
    503: {"model": ErrorResponse, "description": "A store is unavailable; retry later"},
}


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    details = []
    for err in exc.errors():
        details.append(
            {
                "loc": [str(p) for p in err.get("loc", ())],
                "type": str(err.get("type", "")),
                "msg": str(err.get("msg", "")),
            }
        )
    return details


_STORE_DOWN = {"Retry-After": "1"}


def known_error_response(exc: Exception) -> JSONResponse | None:
    """The answer for a domain error or a store outage, or None for anything else (a bug: 500).
    Shared by the exception handlers and the edge middleware, which runs outside them."""
    if isinstance(exc, NoteeError):
        return error_response(exc.status, exc.code, exc.message, exc.details, headers=exc.headers)
    if not is_store_outage(exc):
        # Any other store error (a bad statement, a missing keyspace) is a bug: a 500, not "retry later".
        return None
    if isinstance(exc, (SQLAlchemyError, pymysql_err.Error)):
        log.warning("mysql unavailable: %s", type(exc).__name__)
        return error_response(503, "store_unavailable", "database unavailable, retry later", headers=_STORE_DOWN)
    log.warning("cassandra unavailable: %s", type(exc).__name__)
    return error_response(503, "store_unavailable", "subscription store unavailable, retry later", headers=_STORE_DOWN)


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_input", "request failed validation", _validation_details(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's own 400 is a body it could not parse (bad JSON, not UTF-8): one format for all input errors.
            return error_response(422, "invalid_input", "request body could not be parsed")
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(exc.status_code, "http_error")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {"Allow": ", ".join(allowed_methods(_request.app, _request.url.path))}
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)

    @app.exception_handler(NoteeError)
    @app.exception_handler(SQLAlchemyError)
    @app.exception_handler(pymysql_err.Error)
    @app.exception_handler(DriverException)
    @app.exception_handler(NoHostAvailable)
    @app.exception_handler(ConnectionException)
    @app.exception_handler(ServerError)
    async def _known(_request: Request, exc: Exception) -> JSONResponse:
        response = known_error_response(exc)
        if response is None:
            raise exc
        return response

    @app.exception_handler(Exception)
    async def _bug(_request: Request, _exc: Exception) -> JSONResponse:
        # Starlette's outermost middleware sends this and then re-raises, so the server logs the trace.
        return error_response(500, "internal_error", "internal server error")
