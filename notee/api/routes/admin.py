"""Admin API (admin token): services, their API keys and provider credentials; operators' actions
on jobs (requeue a failed one) and on any service's dead letters."""

from __future__ import annotations

import asyncio
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Request, Response

from notee.api.auth import AdminDep, BoxDep, key_cache
from notee.api.deps import DbDep, RuntimeDep, SenderDep
from notee.api.models import (
    ApiKeyCreated,
    ApiKeyIn,
    ApiKeyList,
    ApiKeyOut,
    ApnsCredentialsIn,
    CredentialsStatus,
    FcmCredentialsIn,
    RateLimitIn,
    RateLimitList,
    RateLimitOut,
    ServiceIn,
    ServiceList,
    ServiceOut,
    ServiceUpdate,
    errors,
)
from notee.api.routes.deadletters import (
    DeadLetterList,
    LetterPageDep,
    ReplayIn,
    ReplayOut,
    list_letters,
    replay,
)
from notee.api.routes.publish import JobList, JobQueryDep, JobStatus, job_page, status_of
from notee.api.routes.webpush import VapidGenerateIn, VapidKeyIn, VapidKeyOut
from notee.core.vocabulary import RateClass
from notee.domain import credentials, ratelimit, services, vapid
from notee.domain.rules import SERVICE_PATTERN
from notee.usecases import jobs

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[AdminDep], responses=errors(403))

ServicePath = Annotated[str, Path(pattern=SERVICE_PATTERN, description="Tenant identifier")]
KeyIdPath = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")]
ProviderPath = Annotated[str, Path(pattern=r"^(fcm|apns|webpush)$")]
RateClassPath = Annotated[RateClass, Path(description="publish | send | write | read | receipt")]


@router.post("/services", status_code=201, response_model=ServiceOut, responses=errors(409))
def create_service(body: ServiceIn, db: DbDep) -> services.Service:
    """Create a tenant. Its timezone (IANA) defaults to Asia/Seoul."""
    created = services.create_service(
        db,
        service=body.service,
        display_name=body.display_name,
        timezone=body.timezone,
        delivery_mode=body.delivery_mode,
    )
    db.commit()
    return created


@router.get("/services", response_model=ServiceList)
def list_services(db: DbDep) -> ServiceList:
    """Every service (tenant) of this deployment."""
    return ServiceList(items=[ServiceOut.model_validate(s) for s in services.list_services(db)])


@router.get("/services/{service}", response_model=ServiceOut, responses=errors(404))
def get_service(service: ServicePath, db: DbDep) -> services.Service:
    """One service: its display name, default time zone and creation time."""
    return services.get_service(db, service)


@router.patch("/services/{service}", response_model=ServiceOut, responses=errors(404))
def update_service(service: ServicePath, body: ServiceUpdate, db: DbDep) -> services.Service:
    """Set the delivery mode: ``dry_run`` sends nothing (the log provider records each push), ``live``
    sends. Jobs already made keep the mode they were made in."""
    updated = services.set_delivery_mode(db, service, body.delivery_mode)
    db.commit()
    return updated


@router.post("/services/{service}/api-keys", status_code=201, response_model=ApiKeyCreated, responses=errors(404))
def create_api_key(service: ServicePath, db: DbDep, body: ApiKeyIn | None = None) -> ApiKeyCreated:
    """Create an API key: a server key, or a client key (``kind: client``) an app may carry, which can
    only post receipts. The key is in this response only; Notee keeps its SHA-256."""
    created = services.create_api_key(
        db, service, label=body.label if body else "", kind=body.kind if body else "server"
    )
    db.commit()
    return ApiKeyCreated(**ApiKeyOut.model_validate(created.info).model_dump(), api_key=created.api_key)


@router.get("/services/{service}/api-keys", response_model=ApiKeyList, responses=errors(404))
def list_api_keys(service: ServicePath, db: DbDep) -> ApiKeyList:
    """Every key of the service, revoked ones included; never a secret."""
    return ApiKeyList(items=[ApiKeyOut.model_validate(k) for k in services.list_api_keys(db, service)])


@router.delete("/services/{service}/api-keys/{key_id}", status_code=204, response_class=Response, responses=errors(404))
def revoke_api_key(request: Request, service: ServicePath, key_id: KeyIdPath, db: DbDep) -> None:
    """Revoke a key: refused from the next request on by this process, within `NOTEE_API_KEY_CACHE_S`
    by any other."""
    services.revoke_api_key(db, service, key_id)
    db.commit()
    key_cache(request).forget(key_id)


@router.put("/services/{service}/credentials/fcm", response_model=CredentialsStatus, responses=errors(404, 424))
def put_fcm_credentials(
    service: ServicePath, body: FcmCredentialsIn, db: DbDep, box: BoxDep, runtime: RuntimeDep
) -> dict[str, bool]:
    """Store the Firebase service account (encrypted at rest, never returned). Its `token_uri` must
    be Google's token endpoint and its `project_id` a Google Cloud project id (else 422)."""
    credentials.set_fcm_credentials(db, box, service, body.service_account, emulator_url=runtime.settings.emulator_url)
    db.commit()
    return credentials.credentials_status(db, service)


@router.put("/services/{service}/credentials/apns", response_model=CredentialsStatus, responses=errors(404, 424))
def put_apns_credentials(service: ServicePath, body: ApnsCredentialsIn, db: DbDep, box: BoxDep) -> dict[str, bool]:
    """Store the APNs token-auth key (encrypted at rest, never returned)."""
    credentials.set_apns_credentials(
        db,
        box,
        service,
        key_id=body.key_id,
        team_id=body.team_id,
        bundle_id=body.bundle_id,
        private_key=body.private_key,
        sandbox=body.sandbox,
    )
    db.commit()
    return credentials.credentials_status(db, service)


@router.post(
    "/services/{service}/credentials/webpush/generate",
    response_model=VapidKeyOut,
    responses=errors(404, 424),
)
def generate_vapid_key(service: ServicePath, body: VapidGenerateIn, db: DbDep, box: BoxDep) -> VapidKeyOut:
    """Generate a new VAPID key pair for Web Push (docs/WEB-PUSH.md), replacing any previous one: the
    private key is encrypted at rest and never returned; the answer holds the public key."""
    key = vapid.set_vapid_key(db, box, service, subject=body.subject)
    db.commit()
    return VapidKeyOut(public_key=key.public_key, subject=key.subject, generated=key.generated)


@router.put("/services/{service}/credentials/webpush", response_model=VapidKeyOut, responses=errors(404, 424))
def put_vapid_key(service: ServicePath, body: VapidKeyIn, db: DbDep, box: BoxDep) -> VapidKeyOut:
    """Upload the service's VAPID private key (PEM, or 32 bytes in base64url as the web-push tools
    print it), replacing any previous one; encrypted at rest, never returned."""
    key = vapid.set_vapid_key(db, box, service, subject=body.subject, private_key=body.private_key)
    db.commit()
    return VapidKeyOut(public_key=key.public_key, subject=key.subject, generated=key.generated)


@router.get("/services/{service}/credentials/webpush", response_model=VapidKeyOut, responses=errors(404))
def get_vapid_key(service: ServicePath, db: DbDep, box: BoxDep) -> VapidKeyOut:
    """The service's VAPID public key and subject (never the private key)."""
    key = vapid.vapid_public_key(db, box, service)
    return VapidKeyOut(public_key=key.public_key, subject=key.subject, generated=False)


@router.get("/services/{service}/credentials", response_model=CredentialsStatus, responses=errors(404))
def get_credentials(service: ServicePath, db: DbDep) -> dict[str, bool]:
    """Which providers are configured (no secret material)."""
    return credentials.credentials_status(db, service)


@router.delete(
    "/services/{service}/credentials/{provider}", status_code=204, response_class=Response, responses=errors(404)
)
def delete_credentials(service: ServicePath, provider: ProviderPath, db: DbDep) -> None:
    """Remove the service's `fcm` or `apns` credentials, or its `webpush` VAPID key."""
    credentials.delete_credentials(db, service, provider)
    db.commit()


def _limit_out(klass: RateClass, limit: ratelimit.Limit) -> RateLimitOut:
    return RateLimitOut(rate_class=klass, rate=limit.rate, burst=int(limit.burst), custom=limit.custom)


@router.get("/services/{service}/rate-limits", response_model=RateLimitList, responses=errors(404))
def get_rate_limits(service: ServicePath, db: DbDep, request: Request) -> RateLimitList:
    """The service's limit of each class: the admin's, or the deployment default."""
    services.get_service(db, service)
    limits = ratelimit.get_limits(db, request.app.state.settings, service)
    return RateLimitList(items=[_limit_out(k, v) for k, v in limits.items()])


@router.put("/services/{service}/rate-limits/{rate_class}", response_model=RateLimitOut, responses=errors(404))
def put_rate_limit(
    service: ServicePath, rate_class: RateClassPath, body: RateLimitIn, db: DbDep, request: Request
) -> RateLimitOut:
    """Set one class's limit for this service; every API process applies it from the next request."""
    services.get_service(db, service)
    klass = ratelimit.check_class(rate_class)
    limit = ratelimit.set_limit(db, request.app.state.settings, service, klass, rate=body.rate, burst=body.burst)
    db.commit()
    request.app.state.allowance.forget(service)  # tokens this process took ahead under the old limit
    return _limit_out(klass, limit)


@router.delete(
    "/services/{service}/rate-limits/{rate_class}", status_code=204, response_class=Response, responses=errors(404)
)
def reset_rate_limit(service: ServicePath, rate_class: RateClassPath, db: DbDep, request: Request) -> None:
    """Back to the deployment default (idempotent)."""
    services.get_service(db, service)
    ratelimit.reset_limit(db, service, rate_class)
    db.commit()
    request.app.state.allowance.forget(service)


@router.get("/services/{service}/jobs", response_model=JobList, responses=errors(404))
def list_service_jobs(service: ServicePath, db: DbDep, query: JobQueryDep) -> JobList:
    """Any service's jobs, newest first, with the filters and cursor of `GET /v1/jobs`."""
    services.get_service(db, service)
    return job_page(db, service, query)


@router.post("/jobs/{job_id}/requeue", response_model=JobStatus, responses=errors(404, 409))
def requeue_job(job_id: Annotated[UUID, Path(description="A failed job's id")], db: DbDep) -> JobStatus:
    """Resume a failed job from its tasks' checkpoints: its failed tasks are queued again (attempts
    reset) and workers carry on where they stopped. 409 unless the job failed."""
    job, progress = jobs.requeue_job(db, str(job_id))
    db.commit()
    return status_of(job, progress)


@router.get("/services/{service}/dead-letters", response_model=DeadLetterList, responses=errors(404))
def list_dead_letters(service: ServicePath, db: DbDep, page: LetterPageDep) -> DeadLetterList:
    """A service's dead letters, newest first, a page at a time (``next_cursor``)."""
    services.get_service(db, service)
    return list_letters(db, service, page)


@router.post("/services/{service}/dead-letters/replay", response_model=ReplayOut, responses=errors(404))
async def replay_dead_letters(
    service: ServicePath, runtime: RuntimeDep, sender: SenderDep, body: ReplayIn | None = None
) -> ReplayOut:
    """Send a service's dead letters again (given ids, a job's, or the oldest)."""

    def check() -> None:
        with runtime.sessions() as session:
            services.get_service(session, service)

    await asyncio.to_thread(check)
    return await replay(sender, service, body)
