"""Who is calling: the admin token, or a service's API key.

Both come as ``Authorization: Bearer ...`` and are checked by the edge middleware
(``notee.api.edge``) before the body is read; the dependencies here hand its result to the routes
(and declare the security schemes in OpenAPI). Missing or wrong credentials answer 401 (never a hint
about which part was wrong); the admin API answers 403 to everyone while ``NOTEE_ADMIN_TOKEN`` is
unset. Service keys are refused by the admin routes (they do not match the admin token).
"""

from __future__ import annotations

from typing import Annotated

from anyio import to_thread
from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from notee import crypto
from notee.api.deps import RuntimeDep
from notee.domain import ratelimit, registry
from notee.domain.credentials import credentials_box
from notee.errors import Forbidden, Unauthorized
from notee.runtime import Runtime
from notee.settings import Settings
from notee.vocabulary import RateClass

_admin_scheme = HTTPBearer(
    auto_error=False, scheme_name="AdminToken", description="NOTEE_ADMIN_TOKEN of the deployment"
)
_key_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="A service API key `nk_<key_id>_<secret>` (admin API creates them)",
)

Credentials = HTTPAuthorizationCredentials | None


def check_admin(settings: Settings, token: str | None) -> None:
    expected = settings.admin_token
    if expected is None or not expected.get_secret_value():
        raise Forbidden("admin API is disabled (NOTEE_ADMIN_TOKEN is not set)")
    if token is None or not crypto.tokens_equal(token, expected.get_secret_value()):
        raise Unauthorized("missing or invalid admin token")


def authenticate_service(
    runtime: Runtime, settings: Settings, token: str | None, rate_class: RateClass | None = None
) -> str:
    """The calling service's id: one indexed lookup in a short session of its own (the edge
    middleware runs it before the route's session exists), so its connection is back in the pool
    before the route runs. With ``rate_class``, one token of the service's bucket is taken on the
    same connection (RateLimited: 429)."""
    with runtime.sessions() as session:
        service = registry.authenticate(session, token)
        if rate_class is not None and settings.rate_limits_enabled:
            try:
                ratelimit.admit(session, settings, service, rate_class)
            finally:
                session.commit()
        return service


# ``async def`` (no I/O, or I/O on a worker thread): FastAPI would run a plain ``def`` dependency on
# a worker thread, one more hop per request.
async def require_admin(request: Request, creds: Annotated[Credentials, Security(_admin_scheme)]) -> None:
    check_admin(request.app.state.settings, creds.credentials if creds is not None else None)


async def require_service(
    request: Request, runtime: RuntimeDep, creds: Annotated[Credentials, Security(_key_scheme)]
) -> str:
    """The service the edge middleware authenticated (looked up here only if it did not run)."""
    service = getattr(request.state, "service", None)
    if isinstance(service, str):
        return service
    token = creds.credentials if creds is not None else None
    return await to_thread.run_sync(authenticate_service, runtime, request.app.state.settings, token)


async def get_secrets_box(request: Request) -> crypto.SecretsBox | None:
    return credentials_box(request.app.state.settings)


AdminDep = Depends(require_admin)
ServiceDep = Annotated[str, Depends(require_service)]
BoxDep = Annotated[crypto.SecretsBox | None, Depends(get_secrets_box)]
