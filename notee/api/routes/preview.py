"""The preview (dry run) of a publish: ``POST /v1/publish/{type}/preview`` (and the topic publish's
``POST /v1/topics/{type}/{topic}/publish/preview``) takes the publish's body and answers what it would send, per locale variant and platform, with its reach and
warnings; nothing is written or sent (docs/API.md "Preview (dry run)")."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.documented import TopicPath
from notee.api.models import Answer, errors
from notee.api.routes import publish as topic_routes
from notee.api.routes.audience_publish import GeneralPublishRequest, TypePath, publish_of
from notee.api.routes.publish import PublishRequest, overrides_of, platforms_of
from notee.api.routes.segments import EstimateOut
from notee.usecases.job_requests import TopicPublish
from notee.usecases.preview import Preview, VariantPreview, preview, preview_topic

router = APIRouter(prefix="/v1", tags=["publish"])


class PreviewPlatform(BaseModel):
    provider: str = Field(description="fcm, apns or webpush: the provider this platform's devices go through.")
    body: dict[str, Any] = Field(
        description='What Notee would send: FCM\'s request body `{"message": ...}` (the token a placeholder), '
        "APNs' JSON payload; Web Push's JSON before encryption."
    )
    headers: dict[str, str] | None = Field(
        None,
        description="APNs' request headers, but `authorization` and the random `apns-id`; Web Push's "
        "`ttl`, `urgency`, `topic`; null for FCM.",
    )
    bytes: int = Field(
        description="The size the provider counts against its limit (FCM: notification, data and "
        "the device's platform blocks; APNs: the payload; Web Push: the encrypted body)."
    )
    limit: int = Field(description="The provider's limit in bytes.")
    over_limit: bool


class PreviewVariant(BaseModel):
    locale: str | None = Field(description="The locale variant; null: the template's own text.")
    title: str
    body: str
    data: dict[str, str]
    payload: dict[str, Any] | None = Field(None, description="The rich fields, rendered (docs/PAYLOADS.md).")
    platforms: dict[str, PreviewPlatform] = Field(
        description="By platform (AOS, IOS, and WEB for a service with a VAPID key): what its provider would get."
    )


class PublishPreview(Answer):
    dry_run: Literal[True] = Field(True, description="Always true: nothing was written or sent.")
    variants: list[PreviewVariant]
    ttl_seconds: int | None
    priority: str
    reach: EstimateOut = Field(description="What `POST /v1/audience/estimate` answers for the target.")
    unknown_users: int | None = Field(None, description="A user list: how many of its ids name no user.")
    warnings: list[str] = Field(description="The target reaches 0 devices; a sample recipient; a size over a limit.")
    sample_recipient: dict[str, Any] | None = Field(
        None, description="The recipient a template that reads `recipient.*` was previewed with; null otherwise."
    )


def _variant(v: VariantPreview) -> PreviewVariant:
    return PreviewVariant(
        locale=v.locale,
        title=v.title,
        body=v.body,
        data=v.data,
        payload=v.rich,
        platforms={
            os: PreviewPlatform(
                provider=p.provider, body=p.body, headers=p.headers, bytes=p.bytes, limit=p.limit, over_limit=p.over
            )
            for os, p in v.platforms.items()
        },
    )


def _answer(found: Preview) -> PublishPreview:
    reach = found.reach
    return PublishPreview(
        variants=[_variant(v) for v in found.variants],
        ttl_seconds=found.ttl_seconds,
        priority=found.priority,
        reach=EstimateOut(
            users=reach.users,
            devices=reach.devices,
            devices_by_platform=reach.devices_by_platform,
            exact=reach.exact,
            method=reach.method,
            unknown_users=reach.unknown_users,
            topics=reach.topics or None,
        ),
        unknown_users=found.unknown_users,
        warnings=found.warnings,
        sample_recipient=found.sample_recipient,
    )


@router.post("/publish/{type}/preview", response_model=PublishPreview, responses=errors(404, 422))
def preview_publish(
    type: TypePath, request: GeneralPublishRequest, runtime: RuntimeDep, db: DbDep, service: ServiceDep
) -> PublishPreview:
    """What `POST /v1/publish/{type}` with this body would send, without writing or sending
    anything: the rendered push per locale variant, each platform's provider body and its size
    against the provider's limit, the target's reach and warnings. A body the publish refuses is
    refused here with the same status and details (the same checks run)."""
    found = preview(runtime, db, publish_of(type, request, service, None))
    db.rollback()  # read only
    return _answer(found)


@router.post("/topics/{type}/{topic}/publish/preview", response_model=PublishPreview, responses=errors(404, 422))
def preview_topic_publish(
    type: topic_routes.TypePath,
    topic: TopicPath,
    runtime: RuntimeDep,
    db: DbDep,
    service: ServiceDep,
    request: PublishRequest | None = None,
) -> PublishPreview:
    """What `POST /v1/topics/{type}/{topic}/publish` with this body would send, as
    `POST /v1/publish/{type}/preview` answers it; the topic publish's own checks and errors."""
    request = request or PublishRequest()
    asked = TopicPublish(
        service=service,
        type_=type,
        topic=topic,
        variables=request.variables,
        overrides=overrides_of(request),
        send_at=request.send_at,
        local_time=request.local_time,
        platforms=platforms_of(request),
    )
    found = preview_topic(runtime, db, asked)
    db.rollback()  # read only
    return _answer(found)
