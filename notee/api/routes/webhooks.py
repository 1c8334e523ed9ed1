"""Delivery webhooks: a service's endpoints and their recent deliveries (docs/WEBHOOKS.md).

``POST /v1/webhooks`` answers the signing secret once; nothing else ever returns it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from notee.api import cursors
from notee.api.auth import BoxDep, ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.models import Answer, OneLineText, errors
from notee.core.vocabulary import WEBHOOK_EVENTS, WebhookDeliveryState, WebhookEvent
from notee.domain import webhooks
from notee.domain.webhooks import Delivery, Endpoint

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: StrictStr = Field(
        min_length=8,
        max_length=webhooks.MAX_URL_LEN,
        description="HTTPS URL Notee POSTs events to (http:// too where NOTEE_WEBHOOK_ALLOW_HTTP is set). Loopback, "
        "private and link-local addresses are refused (also when a host name resolves to one at send time).",
        json_schema_extra={"format": "uri", "pattern": webhooks.URL_PATTERN},
    )
    events: list[WebhookEvent] | None = Field(
        None,
        min_length=1,
        max_length=len(WEBHOOK_EVENTS),
        description="The events it receives; default the four job and token events. The receipt.* events "
        "(engagement, batched) only when named.",
    )
    description: OneLineText | None = Field(None, max_length=200)


class WebhookOut(Answer):
    endpoint_id: str
    url: str
    events: list[WebhookEvent]
    description: str | None
    created_at: datetime


class WebhookCreated(WebhookOut):
    secret: str = Field(
        description="The signing secret (HMAC-SHA256 key, docs/WEBHOOKS.md). Shown only in this answer; "
        "store it now. Stored encrypted, never returned again."
    )


class WebhookList(Answer):
    items: list[WebhookOut]


class WebhookDeliveryOut(Answer):
    delivery_id: int
    event_id: str = Field(description="The event's id (also the Notee-Event-Id header): dedupe on it.")
    event_type: WebhookEvent
    state: WebhookDeliveryState = Field(
        description="pending (due at next_attempt_at), delivered (a 2xx), failed (gave up after the retry window)."
    )
    attempts: int
    last_status: int | None = Field(description="HTTP status of the last attempt; null: no answer.")
    last_error: str | None
    next_attempt_at: datetime | None = Field(description="When a pending delivery is tried next.")
    created_at: datetime
    resent_at: datetime | None
    finished_at: datetime | None
    event: dict[str, Any] = Field(description="The body that is POSTed (id, type, created_at, service, data).")


class WebhookDeliveryList(Answer):
    items: list[WebhookDeliveryOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null at the end.")
    next_before_id: int | None = Field(
        description="Deprecated (use next_cursor): pass as before_id for the next page.", deprecated=True
    )


EndpointPath = Annotated[UUID, Path(description="The endpoint_id POST /v1/webhooks answered.")]


def _out(endpoint: Endpoint) -> WebhookOut:
    return WebhookOut(
        endpoint_id=endpoint.endpoint_id,
        url=endpoint.url,
        events=endpoint.events,  # type: ignore[arg-type]  # stored from the checked list
        description=endpoint.description,
        created_at=endpoint.created_at,
    )


def _delivery(d: Delivery) -> WebhookDeliveryOut:
    return WebhookDeliveryOut(
        delivery_id=d.delivery_id,
        event_id=d.event_id,
        event_type=d.event_type,  # type: ignore[arg-type]  # checked by the table's constraint
        state=d.state,  # type: ignore[arg-type]  # checked by the table's constraint
        attempts=d.attempts,
        last_status=d.last_status,
        last_error=d.last_error,
        next_attempt_at=d.next_attempt_at if d.state == "pending" else None,
        created_at=d.created_at,
        resent_at=d.resent_at,
        finished_at=d.finished_at,
        event=d.payload,
    )


@router.post("", status_code=201, response_model=WebhookCreated, responses=errors(409, 422, 424))
def create_webhook(body: WebhookIn, service: ServiceDep, db: DbDep, box: BoxDep, runtime: RuntimeDep) -> WebhookCreated:
    """Register an endpoint for this service's events; the answer holds its signing secret, once."""
    created = webhooks.create_endpoint(
        db, box, runtime.settings, service, url=body.url, events=body.events, description=body.description
    )
    db.commit()
    return WebhookCreated(**_out(created.endpoint).model_dump(), secret=created.secret)


@router.get("", response_model=WebhookList)
def list_webhooks(service: ServiceDep, db: DbDep) -> WebhookList:
    """This service's endpoints (never their secrets)."""
    return WebhookList(items=[_out(e) for e in webhooks.list_endpoints(db, service)])


@router.get("/{endpoint_id}", response_model=WebhookOut, responses=errors(404))
def get_webhook(endpoint_id: EndpointPath, service: ServiceDep, db: DbDep) -> WebhookOut:
    """One endpoint (never its secret)."""
    return _out(webhooks.get_endpoint(db, service, str(endpoint_id)))


@router.delete("/{endpoint_id}", status_code=204, response_class=Response, responses=errors(404))
def delete_webhook(endpoint_id: EndpointPath, service: ServiceDep, db: DbDep) -> None:
    """Delete the endpoint; its pending and past deliveries go with it."""
    webhooks.delete_endpoint(db, service, str(endpoint_id))
    db.commit()


@router.get("/{endpoint_id}/deliveries", response_model=WebhookDeliveryList, responses=errors(404))
def list_deliveries(
    endpoint_id: EndpointPath,
    service: ServiceDep,
    db: DbDep,
    state: Annotated[WebhookDeliveryState | None, Query(description="Only deliveries in this state.")] = None,
    cursor: Annotated[str | None, cursors.query(200)] = None,
    before_id: Annotated[
        int | None,
        Query(ge=1, description="Deprecated (use cursor): only deliveries older than this id.", deprecated=True),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> WebhookDeliveryList:
    """The endpoint's recent deliveries, newest first, with their attempts and last answer, a page at
    a time (``next_cursor``)."""
    before = cursors.decode_id(cursor) if cursor else before_id
    rows = webhooks.list_deliveries(db, service, str(endpoint_id), state=state, before_id=before, limit=limit)
    last = rows[-1].delivery_id if len(rows) == limit else None
    return WebhookDeliveryList(
        items=[_delivery(d) for d in rows], next_cursor=cursors.encode_id(last) if last else None, next_before_id=last
    )


@router.post(
    "/{endpoint_id}/deliveries/{delivery_id}/resend",
    status_code=202,
    response_model=WebhookDeliveryOut,
    responses=errors(404),
)
def resend_delivery(
    endpoint_id: EndpointPath,
    delivery_id: Annotated[int, Path(ge=1, le=2**63 - 1, description="From the deliveries listing.")],
    service: ServiceDep,
    db: DbDep,
) -> WebhookDeliveryOut:
    """Send a delivery again (delivered or failed ones too): the same event id and body, due at once,
    with a fresh retry window."""
    delivery = webhooks.resend(db, service, str(endpoint_id), delivery_id)
    db.commit()
    return _delivery(delivery)
