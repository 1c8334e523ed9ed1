"""Web Push (docs/WEB-PUSH.md): the service's VAPID public key, which its web page passes to
``pushManager.subscribe``; the models of the admin's VAPID routes (notee/api/routes/admin.py)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from notee.api.auth import BoxDep, ServiceDep
from notee.api.deps import DbDep
from notee.api.models import errors
from notee.domain import vapid
from notee.domain.vapid import SUBJECT_PATTERN

router = APIRouter(prefix="/v1/service", tags=["devices"])


_SUBJECT = Field(
    max_length=200,
    pattern=SUBJECT_PATTERN,
    description="The contact push services see in the VAPID JWT: a mailto: or https: URI (RFC 8292)",
    examples=["mailto:push@example.com"],
)


class VapidGenerateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subject: StrictStr = _SUBJECT


class VapidKeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subject: StrictStr = _SUBJECT
    private_key: StrictStr = Field(
        max_length=8192, description="The P-256 private key: PEM, or 32 bytes in base64url (web-push's format)"
    )


class VapidKeyOut(BaseModel):
    public_key: str = Field(description="The VAPID public key: `pushManager.subscribe`'s `applicationServerKey`")
    subject: str
    generated: bool = Field(description="This request generated the key pair")


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
