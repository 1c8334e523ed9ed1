"""The general publish (docs/AUDIENCES.md): one template type to exactly one target, a topic, a
condition over topics, a filter, saved segments or a list of users, optionally narrowed by platforms.
Every target becomes a job of ``create_job`` (notee/usecases/publish.py): the same rows, tasks,
claims, checkpoints, idempotency, schedule, local time, quiet hours and cancel as a topic publish;
only the worker's stream of recipients differs (notee/worker/reader.py).

In the caller's transaction; the caller commits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from notee.core.errors import InvalidInput, NotFound
from notee.core.vocabulary import AudienceTarget, ConditionTarget, Target, TopicTarget
from notee.domain.conditions import parse_condition
from notee.domain.rules import check_send_inputs
from notee.domain.schedule import parse_local_time, validate_topic
from notee.store import audience_users_sql, templates_sql
from notee.store.jobs_sql import JobRow
from notee.store.runtime import Runtime
from notee.usecases.audience_specs import audience_spec
from notee.usecases.job_requests import JobRequest, client_idempotency_key
from notee.usecases.publish import check_send_at, create_job

USERS_MAX = 20_000
TARGET_FIELDS = ("topic", "condition", "filter", "segments", "users")
# The template methods each target takes: topics and conditions address topic subscriptions; a
# filter, segments or a user list address users' devices, with a TOPIC or a SINGLE template.
METHODS_OF = {
    "topic": ("TOPIC",),
    "condition": ("TOPIC",),
    "filter": ("TOPIC", "SINGLE"),
    "segments": ("TOPIC", "SINGLE"),
    "users": ("TOPIC", "SINGLE"),
}


@dataclass(frozen=True, slots=True)
class Publish:
    """A publish as the general route asks it. ``targets``: the target fields the request gave (the
    route checks there is exactly one), by name; ``platforms``: IOS/AOS/WEB (empty: every platform)."""

    service: str
    type_: str
    targets: dict[str, Any]
    method: str = "TOPIC"
    platforms: tuple[str, ...] = ()
    idempotency_key: str | None = None
    variables: dict[str, Any] | None = None
    overrides: dict[str, Any] | None = None
    send_at: datetime | None = None
    local_time: str | None = None
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Published:
    job: JobRow
    unknown_users: int | None = None  # a user list: how many of its ids name no user of the service


def _one_target(publish: Publish) -> tuple[str, Any]:
    given = [(k, v) for k, v in publish.targets.items() if v is not None]
    if len(given) != 1:
        raise InvalidInput(
            f"give exactly one target of {', '.join(TARGET_FIELDS)} ({len(given)} given)",
            details=[
                {
                    "loc": ["body"],
                    "type": "one_target",
                    "msg": f"exactly one of {', '.join(TARGET_FIELDS)}",
                    "ctx": {"given": [k for k, _ in given]},
                }
            ],
        )
    name, value = given[0]
    if publish.method not in METHODS_OF[name]:
        raise InvalidInput(
            f"a {name} publish takes a {' or '.join(METHODS_OF[name])} template, not {publish.method}",
            details=[{"loc": ["body", "method"], "type": "method_not_allowed", "msg": f"not for a {name} target"}],
        )
    return name, value


def _users_spec(session: Session, service: str, ids: list[str]) -> tuple[dict[str, Any], tuple[str, ...], int]:
    """A user list's stored spec (its count and digest: what the request hash covers), its users'
    platform ids, and how many of its ids are unknown."""
    distinct = sorted(set(ids))
    if not 1 <= len(ids) <= USERS_MAX:
        raise InvalidInput(
            f"users: 1 to {USERS_MAX} ids",
            details=[{"loc": ["body", "users"], "type": "too_many_users", "msg": f"1 to {USERS_MAX} ids"}],
        )
    found = tuple(sorted(audience_users_sql.resolve_users(session, service, distinct)))
    digest = hashlib.sha256(json.dumps(distinct, separators=(",", ":")).encode()).hexdigest()
    return {"users": {"count": len(distinct), "sha256": digest}}, found, len(distinct) - len(found)


def _target_of(
    session: Session, publish: Publish, name: str, value: Any
) -> tuple[Target, tuple[str, ...] | None, int | None]:
    platforms = publish.platforms
    if name == "topic":
        try:
            return TopicTarget(validate_topic(value), platforms), None, None
        except InvalidInput as exc:  # its details say "topic": here the field is the body's
            raise InvalidInput(
                exc.message, details=[{"loc": ["body", "topic"], "type": "invalid_topic", "msg": exc.message}]
            ) from exc
    if name == "condition":
        return ConditionTarget(parse_condition(value).text, platforms), None, None
    if name == "users":
        spec, users, unknown = _users_spec(session, publish.service, list(value))
        return AudienceTarget(spec, platforms), users, unknown
    return AudienceTarget(audience_spec(session, publish.service, name, value), platforms), None, None


@dataclass(frozen=True, slots=True)
class Resolved:
    """A general publish checked and resolved, before anything is written: what ``create_job`` is
    asked (``request``, with its template row) and a user list's unknown ids."""

    request: JobRequest
    unknown_users: int | None


def publish_to(runtime: Runtime, session: Session, publish: Publish) -> Published:
    """The general publish API's one domain call: ``resolve`` the request, then ``create_job``.
    NotFound: no template of that method and type (or an unknown segment); InvalidInput: anything
    malformed, nothing written."""
    resolved = resolve(runtime, session, publish)
    return Published(create_job(runtime, session, resolved.request), resolved.unknown_users)


def resolve(runtime: Runtime, session: Session, publish: Publish) -> Resolved:
    """Check the request and resolve its template (by method and type) and target, reading only:
    the one validation path of the publish and of its preview (notee/usecases/preview.py), so a
    request one refuses the other refuses identically."""
    name, value = _one_target(publish)
    if publish.local_time is not None:
        parse_local_time(publish.local_time)
    check_send_inputs(publish.variables, publish.overrides)
    when = check_send_at(session, runtime.settings, publish.send_at)
    target, users, unknown = _target_of(session, publish, name, value)
    template = templates_sql.get_template(session, publish.service, publish.method, publish.type_)
    if template is None:
        raise NotFound(f"no {publish.method} template of type {publish.type_!r}")
    request = JobRequest(
        service=publish.service,
        notification_key=template.notification_key,
        method=publish.method,
        type_=publish.type_,
        target=target,
        idempotency_key=client_idempotency_key(publish.idempotency_key),
        variables=publish.variables,
        overrides=publish.overrides,
        send_at=when,
        local_time=publish.local_time,
        at=publish.at,
        template=template,
        audience_users=users,
    )
    return Resolved(request, unknown)
