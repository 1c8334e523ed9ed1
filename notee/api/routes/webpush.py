"""Web Push (docs/WEB-PUSH.md): the service's VAPID public key, which its web page passes to
``pushManager.subscribe`` (the key pair itself is the admin's: notee/api/routes/admin.py)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from notee.api.auth import BoxDep, ServiceDep
from notee.api.deps import DbDep
from notee.api.models import errors
from notee.domain import vapid

router = APIRouter(prefix="/v1/service", tags=["devices"])


class VapidPublicKey(BaseModel):
    public_key: str = Field(
        description="The VAPID public key (uncompressed P-256 point, base64url): "
        "`pushManager.subscribe`'s `applicationServerKey`"
    )
    subject: str = Field(description="The contact (mailto: or https:) push services see in the VAPID JWT")


@router.get("/webpush", response_model=VapidPublicKey, responses=errors(404))
def get_vapid_public_key(service: ServiceDep, db: DbDep, box: BoxDep) -> VapidPublicKey:
    """The service's VAPID public key (404 until an admin has generated or uploaded one)."""
    key = vapid.vapid_public_key(db, box, service)
    return VapidPublicKey(public_key=key.public_key, subject=key.subject)
