"""Who is calling: the admin token, or a service's API key.

Both come as ``Authorization: Bearer ...``. Missing or wrong credentials answer 401 (never a hint
about which part was wrong); the admin API answers 403 to everyone while ``NOTEE_ADMIN_TOKEN`` is
unset. Service keys are refused by the admin routes (they do not match the admin token).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from notee import secrets as keys
from notee.api.deps import DbDep
from notee.domain import registry
from notee.errors import Forbidden, Unauthorized

_admin_scheme = HTTPBearer(auto_error=False, scheme_name="AdminToken",
                           description="NOTEE_ADMIN_TOKEN of the deployment")
_key_scheme = HTTPBearer(auto_error=False, scheme_name="ApiKey",
                         description="A service API key `nk_<key_id>_<secret>` (admin API creates them)")

Credentials = HTTPAuthorizationCredentials | None


def require_admin(request: Request, creds: Annotated[Credentials, Security(_admin_scheme)]) -> None:
    expected = request.app.state.settings.admin_token
    if expected is None or not expected.get_secret_value():
        raise Forbidden("admin API is disabled (NOTEE_ADMIN_TOKEN is not set)")
    if creds is None or not keys.tokens_equal(creds.credentials, expected.get_secret_value()):
        raise Unauthorized("missing or invalid admin token")


def require_service(db: DbDep, creds: Annotated[Credentials, Security(_key_scheme)]) -> str:
    """The calling service's id (one indexed lookup on the request's own Session)."""
    service = registry.authenticate(db, creds.credentials if creds is not None else None)
    # End the read-only transaction so its connection goes back to the pool while the route works:
    # routes whose domain code opens its own short sessions (subscriptions) then need one
    # connection per request, not two (docs/BENCHMARKS.md, subscribe).
    db.rollback()
    return service


def get_secrets_box(request: Request) -> keys.SecretsBox | None:
    key = request.app.state.settings.credentials_key
    return keys.SecretsBox(key.get_secret_value()) if key is not None else None


AdminDep = Depends(require_admin)
ServiceDep = Annotated[str, Depends(require_service)]
BoxDep = Annotated[keys.SecretsBox | None, Depends(get_secrets_box)]
