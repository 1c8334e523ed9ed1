"""Single sends: one SINGLE template to every device of one user, delivered synchronously; with
``send_at``, a scheduled job instead (202), sent by a worker then (docs/API.md "Scheduled sends")."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, StringConstraints

from notee.api.auth import ServiceDep
from notee.api.deps import RuntimeDep, SenderDep
from notee.api.documented import DATA, PayloadObject, payload_field
from notee.api.errors import ErrorResponse
from notee.api.models import MultiLineText, OneLineText, Rfc3339, errors
from notee.api.routes.publish import (
    PRIORITY_FIELD,
    SEND_AT_FIELD,
    TTL_FIELD,
    IdempotencyKey,
    PublishAccepted,
    TemplateValue,
)
from notee.api.user_ref import UserDep
from notee.core.errors import QuietDropped, QuietHoursNow
from notee.core.vocabulary import Priority
from notee.domain import render
from notee.domain.rules import TYPE_PATTERN
from notee.store.runtime import Runtime
from notee.usecases.job_requests import ScheduledSingle
from notee.usecases.publish import schedule_single
from notee.usecases.send_once import Answer, send_once
from notee.usecases.single_send import SingleSend

router = APIRouter(prefix="/v1", tags=["sends"])


class SendIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: StrictStr = Field(pattern=TYPE_PATTERN, description="Type of a SINGLE template of this service.")
    variables: dict[
        Annotated[OneLineText, StringConstraints(min_length=1, max_length=64, pattern=rf"^{render.NAME_PATTERN}$")],
        TemplateValue,
    ] = Field(
        default_factory=dict,
        max_length=100,
        description="Values for the template's {{name}} placeholders; the template's defaults fill the rest. Every "
        "placeholder left unfilled is listed in one 422. A value is a text, or a list of texts or of objects of "
        "texts for {% for %} loops (docs/TEMPLATES.md).",
    )
    data: Annotated[dict[OneLineText, MultiLineText], DATA] | None = Field(
        None, description="Extra data keys, merged over the template's data (the template data rules apply)."
    )
    payload: PayloadObject | None = payload_field(merged=True)
    ttl_seconds: StrictInt | None = TTL_FIELD
    priority: Priority | None = PRIORITY_FIELD
    send_at: Rfc3339 | None = SEND_AT_FIELD
    quiet_hours: StrictBool = Field(
        False,
        description="Opt in to the user's quiet hours (its own window, else the service's, in its time zone): "
        "inside them nothing is sent now; a template that drops answers 200 with quiet_dropped, one that holds "
        "answers 202 with a job scheduled for the end of the window.",
    )


class SendOut(BaseModel):
    devices: int = Field(description="Devices of the user targeted.")
    delivered: int
    pruned: int = Field(description="Devices removed because the provider said their token is invalid.")
    retried: int = Field(description="Re-sends after retryable provider answers.")
    failed: int = Field(description="Messages that still failed, no_credentials included; recorded as dead letters.")
    dry_run: bool = Field(
        description="The service is in dry_run delivery mode: the log provider recorded the "
        "pushes and nothing was sent."
    )
    quiet_dropped: int = Field(
        0, description="Devices not sent: the send opted in to quiet hours, the user is in them, the template drops."
    )
    send_id: str | None = Field(
        None,
        description="The id of this send's pushes for engagement: the source part of their notification ids, and "
        "the id of `GET /v1/stats/jobs/{job_id}` (docs/ENGAGEMENT.md). Null when nothing was sent.",
    )


def _schedule(
    runtime: Runtime,
    service: str,
    user_id: str,
    body: SendIn,
    idempotency_key: str | None,
    send_at: datetime | None = None,
) -> Any:
    send_at = send_at or body.send_at
    assert send_at is not None  # the route only schedules a send that has one
    send = ScheduledSingle(
        service=service,
        user_id=user_id,
        type_=body.type,
        send_at=send_at,
        idempotency_key=idempotency_key,
        variables=body.variables,
        data=body.data,
        payload=body.payload,
        ttl_seconds=body.ttl_seconds,
        priority=body.priority,
    )
    with runtime.sessions.begin() as session:  # this route's unit of work: the job and its task
        job = schedule_single(runtime, session, send)
    return PublishAccepted(job_id=job.job_id, state=job.state, send_at=job.send_at).model_dump(mode="json")


@router.post(
    "/users/{user_id}/send",
    response_model=SendOut,
    responses={
        202: {"model": PublishAccepted, "description": "Scheduled (send_at given): the job that sends it then"},
        409: {"model": ErrorResponse, "description": "A request with this Idempotency-Key is still being sent"},
        **errors(404, 422, 424),
    },
)
async def send_to_user(
    user_id: UserDep,
    body: SendIn,
    service: ServiceDep,
    request: Request,
    runtime: RuntimeDep,
    sender: SenderDep,
    idempotency_key: IdempotencyKey = None,
) -> SendOut | JSONResponse:
    """Send a SINGLE template to every device of the user. A missing template variable or a payload
    over a provider's 4,096-byte limit answers 422 and nothing is sent. A device of a platform the
    service has no credentials for is counted failed (``no_credentials``); when that is every
    device, or a provider rejects the service's credentials, the answer is 424.

    With ``send_at`` nothing is sent now: the answer is 202 with a job (``scheduled``) that a worker
    sends at send_at to the devices the user has then; its counts are the job's (GET /v1/jobs/{job_id}),
    and it can be cancelled. The same ``Idempotency-Key`` returns the same job.

    An immediate send with an ``Idempotency-Key`` is sent once: the same key within 24 hours answers
    the first request's answer again (with ``Idempotent-Replayed: true``) and sends nothing; one that
    arrives while the first is still sending waits for that answer (409 after 30 s); the same key
    with a different request is 422. An error answer is not kept: a retry is tried afresh.

    With ``quiet_hours: true`` the user's quiet hours apply: inside them nothing is sent now; a
    template that drops answers 200 with ``quiet_dropped``, one that holds answers 202 with a job
    scheduled for the end of the window (as with ``send_at``)."""
    if body.send_at is not None:
        accepted = await asyncio.to_thread(_schedule, runtime, service, user_id, body, idempotency_key)
        return JSONResponse(accepted, status_code=202)
    send = SingleSend(
        service,
        user_id,
        body.type,
        variables=body.variables,
        data=body.data,
        quiet_hours=body.quiet_hours,
        payload=body.payload,
        ttl_seconds=body.ttl_seconds,
        priority=body.priority,
    )

    async def send_now() -> Answer:
        try:
            devices, result = await sender.send_single(send, stop=getattr(request.app.state, "stopping", None))
        except QuietDropped as exc:
            dropped = SendOut(
                devices=exc.devices,
                delivered=0,
                pruned=0,
                retried=0,
                failed=0,
                dry_run=False,
                quiet_dropped=exc.devices,
            )
            return Answer(200, dropped.model_dump(mode="json"))
        except QuietHoursNow as exc:  # held: a scheduled single send at the end of the window
            held = await asyncio.to_thread(_schedule, runtime, service, user_id, body, idempotency_key, exc.until_at)
            return Answer(202, held)
        sent = SendOut(
            devices=devices,
            delivered=result.delivered,
            pruned=result.pruned,
            retried=result.retried,
            failed=len(result.failed),
            dry_run=result.dry_run,
            send_id=send.send_id if devices else None,
        )
        return Answer(200, sent.model_dump(mode="json"))

    answer = await (send_now() if idempotency_key is None else send_once(runtime, send, idempotency_key, send_now))
    replayed = {"Idempotent-Replayed": "true"} if answer.replayed else None
    return JSONResponse(answer.body, status_code=answer.status_code, headers=replayed)
