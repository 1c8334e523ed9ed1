"""Service-scoped devices of a user, and provider token rotation."""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.models import LOCALE_FIELD, Answer, Locale, errors
from notee.api.user_ref import UserDep
from notee.core.logs import token_hint
from notee.core.vocabulary import Os
from notee.domain import subscriptions, users, web_devices
from notee.domain.rules import REGION_PATTERN, TOKEN_PATTERN
from notee.domain.versions import APP_VERSION_PATTERN

router = APIRouter(prefix="/v1", tags=["devices"])


class WebPushKeys(BaseModel):
    model_config = ConfigDict(extra="forbid")

    p256dh: StrictStr = Field(max_length=100, description="The browser's P-256 public key, base64url (65 bytes)")
    auth: StrictStr = Field(max_length=40, description="The subscription's auth secret, base64url (16 bytes)")


class WebPushSubscriptionIn(BaseModel):
    """A browser's ``PushSubscription.toJSON()``, as it gives it (docs/WEB-PUSH.md)."""

    model_config = ConfigDict(extra="forbid")

    endpoint: StrictStr = Field(max_length=2048, description="The push service URL (https)")
    expirationTime: int | None = Field(None, description="As the browser gives it; not used")
    keys: WebPushKeys


class DeviceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: StrictStr | None = Field(
        None,
        pattern=TOKEN_PATTERN,
        description="Provider push token (FCM registration token or APNs device token); for os WEB, "
        "the token a previous registration answered, or leave it out and give `subscription`.",
    )
    os: Os
    subscription: WebPushSubscriptionIn | None = Field(
        None,
        description="os WEB only: the browser's push subscription (`PushSubscription.toJSON()`); "
        "the device's token is made from it (`<p256dh>.<auth>.<endpoint>`).",
    )
    region: StrictStr = Field("", pattern=REGION_PATTERN, examples=["KR"])
    locale: Locale | None = Field(None, description=LOCALE_FIELD + " Wins over the user's locale.")
    app_version: StrictStr | None = Field(
        None,
        pattern=APP_VERSION_PATTERN,
        description="The app's version (`5.2.1`, `5.2.1-beta`), which filters compare as a version "
        "(docs/AUDIENCES.md); null clears it; left out: unchanged.",
        examples=["5.2.1"],
    )


class DeviceOut(Answer):
    model_config = ConfigDict(from_attributes=True)

    token: str
    os: Os
    region: str
    locale: str | None = Field(None, description="BCP 47 tag, canonical case; null: the user's")
    app_version: str | None = Field(None, description="The app's version as it registered it; null: never given")
    created_at: datetime
    updated_at: datetime


class DeviceList(BaseModel):
    items: list[DeviceOut]


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    old_token: StrictStr = Field(pattern=TOKEN_PATTERN)
    new_token: StrictStr = Field(pattern=TOKEN_PATTERN)


class RotateOut(BaseModel):
    rotated: int = Field(description="Users of this service whose device now holds new_token")


_CREATED: dict[int | str, dict[str, Any]] = {201: {"model": DeviceOut, "description": "Created"}}


@router.post("/users/{user_id}/devices", response_model=DeviceOut, responses=_CREATED | errors(404))
def add_device(
    user_id: UserDep, body: DeviceIn, service: ServiceDep, db: DbDep, runtime: RuntimeDep, response: Response
) -> users.Device:
    """Register a device (idempotent; updates os/region, and locale and app_version when given). A new
    device gets the user's subscriptions. A browser (os WEB) registers its push subscription; an
    endpoint that is not https or keys that are not a P-256 key and a 16-byte secret answer 422."""
    sub = body.subscription.model_dump() if body.subscription is not None else None
    token = web_devices.resolve_token(body.os, body.token, sub)
    device = users.add_device(
        db,
        service,
        user_id,
        token=token,
        os=body.os,
        region=body.region,
        locale=body.locale if "locale" in body.model_fields_set else users.KEEP,
        app_version=body.app_version if "app_version" in body.model_fields_set else users.KEEP,
    )
    db.commit()  # MySQL first: subscription rows are copied only to a device that exists
    subscriptions.on_device_added(db, runtime.statements, service, user_id, token, body.os)
    db.commit()  # ends the copy's transaction: releases the user's shared row lock
    response.status_code = 201 if device.created else 200
    return device


@router.get("/users/{user_id}/devices", response_model=DeviceList, responses=errors(404))
def list_devices(user_id: UserDep, service: ServiceDep, db: DbDep) -> DeviceList:
    """Every device (push token) of the user."""
    return DeviceList(items=[DeviceOut.model_validate(d) for d in users.list_devices(db, service, user_id)])


@router.delete("/users/{user_id}/devices/{token:path}", status_code=204, response_class=Response, responses=errors(404))
def delete_device(
    user_id: UserDep,
    token: Annotated[str, Path(pattern=TOKEN_PATTERN)],
    service: ServiceDep,
    db: DbDep,
    runtime: RuntimeDep,
) -> None:
    """Remove a device and its subscription rows. The token is URL-encoded in the path."""
    users.remove_device(db, runtime.statements, service, user_id, token)
    db.commit()


@router.post("/devices/rotate", response_model=RotateOut, responses=errors(404))
def rotate_token(body: RotateIn, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> RotateOut:
    """The provider replaced a token: every user of this service holding old_token gets new_token,
    keeping the device's registration time and subscriptions."""
    rotated = users.rotate_token(db, runtime.statements, service, old_token=body.old_token, new_token=body.new_token)
    db.commit()
    return RotateOut(rotated=rotated)


_TOKEN_IN_PATH = re.compile(r"(/devices/)(?!rotate(?:[?\s]|$))([^?\s]+)")


def shorten_tokens_in_path(path: str) -> str:
    return _TOKEN_IN_PATH.sub(lambda m: m.group(1) + token_hint(m.group(2)), path)


class TokenPathFilter(logging.Filter):
    """Shortens the device token in access-log lines (``DELETE /v1/users/{id}/devices/{token}``):
    a token is personal data and is never logged in full."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # A plain loop, no generator: this runs for every access line (docs/BENCHMARKS.md, "Round 3, fifth part").
        if isinstance(args, tuple):
            for a in args:
                if isinstance(a, str) and "/devices/" in a:
                    record.args = tuple(shorten_tokens_in_path(a) if isinstance(a, str) else a for a in args)
                    break
        return True


def install_access_log_filter() -> None:
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, TokenPathFilter) for f in access.filters):
        access.addFilter(TokenPathFilter())
