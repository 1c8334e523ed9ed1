"""What a publish asks for, as objects: ``JobRequest`` (what ``create_job`` is asked: the scheduler's
cycle minutes, the API's topic publishes and scheduled single sends), ``TopicPublish`` and
``ScheduledSingle`` (what the API's two calls are asked, notee/usecases/publish.py), the fingerprint
of a request (``request_hash``) and the idempotency-key namespaces."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from notee.core.errors import InvalidInput
from notee.core.vocabulary import Target
from notee.store.mysql import AnyRow

# Idempotency-key namespaces: a client's Idempotency-Key is stored as ``client:<key>``; the
# scheduler's keys are ``cycle:...`` (notee/core/clock.py). Neither can name the other's job.
CLIENT_KEY_PREFIX = "client:"


def client_idempotency_key(key: str | None) -> str | None:
    """The stored form of a client's Idempotency-Key header."""
    return None if key is None else CLIENT_KEY_PREFIX + key


def key_reused() -> InvalidInput:
    """The 422 of an idempotency key sent again with a different request (a publish, a single send)."""
    return InvalidInput(
        "Idempotency-Key was already used with a different request",
        details=[
            {
                "loc": ["header", "Idempotency-Key"],
                "type": "idempotency_key_reused",
                "msg": "reused with a different request body or target",
            }
        ],
    )


def request_hash(
    *,
    method: str,
    type_: str,
    target_kind: str,
    target: dict[str, Any],
    variables: dict[str, Any] | None,
    overrides: dict[str, Any] | None,
    send_at: datetime | None = None,
) -> str:
    """sha256 of what a publish asks for (canonical JSON; an empty and a missing map are the same
    request). Stored with the job: the same idempotency key with another hash is a different request.
    ``send_at`` enters only when given, so the hashes of unscheduled requests did not change."""
    fields: dict[str, Any] = {
        "method": method,
        "type": type_,
        "target_kind": target_kind,
        "target": target,
        "variables": variables or None,
        "overrides": overrides or None,
    }
    if send_at is not None:
        fields["send_at"] = send_at.isoformat()
    canonical = json.dumps(
        fields,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What a publish job is asked to do (``create_job``): the scheduler's cycle minutes, the topic
    publishes and scheduled single sends of the API, and tests.

    ``template``: the row of ``notification_key`` when the caller has read it already (the API's
    calls find it by method and type), so the job does not read it again; None: ``create_job`` reads
    it by its key, after the idempotency check (the scheduler). ``deadline_in_s``: seconds from now
    (database clock) after which the job's unfinished tasks expire instead of sending. ``send_at``:
    naive UTC, checked by ``check_send_at``; the job is scheduled until then. ``local_time`` ("HH:MM",
    a TOPIC target): the job reaches each recipient when the clock of its zone shows that time
    (``planning.local_parts``); ``at`` (naive UTC) replaces the database clock's now as the instant
    the releases are computed from (tests simulate a date with it)."""

    service: str
    notification_key: str
    method: str
    type_: str
    target: Target
    idempotency_key: str | None  # stored form: ``client:<key>`` or the scheduler's ``cycle:...``
    variables: dict[str, Any] | None = None
    overrides: dict[str, Any] | None = None
    deadline_in_s: float | None = None
    send_at: datetime | None = None
    local_time: str | None = None
    at: datetime | None = None
    template: AnyRow | None = None
    audience_users: tuple[str, ...] | None = None  # an AUD user list: platform ids, kept beside the job

    def asked_target(self, target_json: dict[str, Any]) -> dict[str, Any]:
        """The target as asked (the stored target, with ``local_time``): what the fingerprint covers."""
        return target_json if self.local_time is None else target_json | {"local_time": self.local_time}

    def quiet_mode(self, template: AnyRow) -> str | None:
        """What a push due in a recipient's quiet hours does: the template's ``hold`` or ``drop``, or
        ``override`` (sent whatever the hours: ``planning.placement``) when the publish asks it."""
        return "override" if (self.overrides or {}).get("quiet_hours") == "override" else template.quiet_hours

    def fingerprint(self, kind: str, target_json: dict[str, Any]) -> str:
        """``request_hash`` of this request, its target encoded as (``kind``, ``target_json``). A
        segments target is hashed by the names asked, not the definitions read: a retry after a
        segment changed is the same request (and gets the job made first)."""
        asked = self.asked_target(target_json)
        if "segments" in asked:
            asked = {k: v for k, v in asked.items() if k != "audience"}
        return request_hash(
            method=self.method,
            type_=self.type_,
            target_kind=kind,
            target=asked,
            variables=self.variables,
            overrides=self.overrides,
            send_at=self.send_at,
        )


@dataclass(frozen=True, slots=True)
class TopicPublish:
    """A topic publish as the API asks it (``publish_topic``). ``idempotency_key``: the client's
    Idempotency-Key header, as sent; ``send_at`` (aware): sent then, not now; ``local_time`` and
    ``at``: see ``JobRequest``."""

    service: str
    type_: str
    topic: str
    idempotency_key: str | None = None
    variables: dict[str, Any] | None = None
    overrides: dict[str, Any] | None = None
    send_at: datetime | None = None
    local_time: str | None = None
    at: datetime | None = None
    platforms: tuple[str, ...] = ()  # only devices of these OSes (empty: every OS)


@dataclass(frozen=True, slots=True)
class ScheduledSingle:
    """A single send with ``send_at`` (aware) as the API asks it (``schedule_single``);
    ``idempotency_key``: the client's Idempotency-Key header, as sent."""

    service: str
    user_id: str
    type_: str
    send_at: datetime
    idempotency_key: str | None = None
    variables: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    payload: dict[str, Any] | None = None  # the rich fields, over the template's (docs/PAYLOADS.md)
    ttl_seconds: int | None = None  # over the template's
    priority: str | None = None  # over the template's

    def overrides(self, data: dict[str, str] | None) -> dict[str, Any] | None:
        """What this send changes of its template: ``data`` (checked), payload, ttl and priority."""
        asked = {"data": data, "payload": self.payload, "ttl_seconds": self.ttl_seconds, "priority": self.priority}
        return {k: v for k, v in asked.items() if v is not None and v != {}} or None
