"""A publish's preview (dry run, docs/API.md "Preview (dry run)"): what ``POST /v1/publish/{type}``
(``preview``) or a topic publish (``preview_topic``) would send, computed and answered without writing
or sending anything. The request goes through the publish's own checks (``audience_publish.resolve``,
``publish.resolve_topic``) and rendering (``publish.render_payload``); each platform's
provider body is built by the providers' own builders (``fcm.fcm_message``, ``apns.apns_payload``,
``apns.apns_headers``) and measured as they measure it; the reach is the audience estimate's
(notee/usecases/estimate.py).

Reads only; the caller rolls back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from notee.core import notification_id
from notee.domain.credentials import credentials_status
from notee.domain.payload_variants import for_variant
from notee.domain.personal import Personalizer, Profile
from notee.providers import apns, fcm, webpush
from notee.providers.base import Message
from notee.providers.payload import Rich
from notee.store import services_sql
from notee.store.runtime import Runtime
from notee.usecases.audience_publish import Publish, resolve
from notee.usecases.estimate import Estimate, EstimateTarget, estimate
from notee.usecases.job_requests import JobRequest, TopicPublish
from notee.usecases.publish import render_payload, resolve_topic

PLATFORMS = ("AOS", "IOS")
SAMPLE_TOKEN = "<device token>"
SAMPLE_NAME, SAMPLE_ID = "Sample Recipient", "sample-user"
# apns-topic is the app's bundle id, kept in the encrypted credentials: the preview does not decrypt them
APNS_TOPIC = "<bundle id>"


@dataclass(frozen=True, slots=True)
class PlatformPreview:
    """What one platform's provider would receive: ``body`` (FCM: ``{"message": ...}``; APNs: the
    payload), ``headers`` (APNs' request headers but the bearer and the random apns-id), ``bytes``
    as that provider counts them against its ``limit``."""

    provider: str
    body: dict[str, Any]
    headers: dict[str, str] | None
    bytes: int
    limit: int

    @property
    def over(self) -> bool:
        return self.bytes > self.limit


@dataclass(frozen=True, slots=True)
class VariantPreview:
    """One locale variant (``locale`` None: the template's own text) as rendered, and per platform."""

    locale: str | None
    title: str
    body: str
    data: dict[str, str]
    rich: dict[str, Any] | None
    platforms: dict[str, PlatformPreview]


@dataclass(frozen=True, slots=True)
class Preview:
    variants: list[VariantPreview]
    reach: Estimate
    unknown_users: int | None
    ttl_seconds: int | None
    priority: str
    warnings: list[str] = field(default_factory=list)
    sample_recipient: dict[str, Any] | None = None


def preview(runtime: Runtime, session: Session, publish: Publish) -> Preview:
    """The preview of a general publish: the same 404s and 422s as publishing it (the same code),
    then its rendering per locale variant and platform, its reach and its warnings. Writes nothing."""
    resolved = resolve(runtime, session, publish)
    return _preview_of(runtime, session, resolved.request, _estimate_target(publish), resolved.unknown_users)


def preview_topic(runtime: Runtime, session: Session, publish: TopicPublish) -> Preview:
    """The preview of a topic publish (``POST /v1/topics/{type}/{topic}/publish``), as ``preview``."""
    request = resolve_topic(runtime, session, publish)
    target = EstimateTarget(topic=publish.topic, type=publish.type_, platforms=publish.platforms or None)
    return _preview_of(runtime, session, request, target, None)


def _preview_of(
    runtime: Runtime, session: Session, request: JobRequest, target: EstimateTarget, unknown: int | None
) -> Preview:
    template = request.template
    assert template is not None  # resolved with its template row
    payload = render_payload(template, request)
    reach = estimate(session, runtime.statements, request.service, target)
    warnings: list[str] = []
    sample = None
    texts = _texts(payload)
    if "personal" in payload:
        sample = _sample(session, request.service)
        person = Personalizer(payload)
        texts = {tag: person.text_for(_profile(sample, tag)) for tag in texts}
        fields = ", ".join(f"recipient.{f}" for f in payload["personal"]["fields"])
        warnings.append(
            f"the template reads the recipient ({fields}): previewed with a sample recipient "
            f"(name {SAMPLE_NAME!r}, id {SAMPLE_ID!r}, each variant's locale, the service's time zone, no tags); "
            "each device gets its own text"
        )
    routes = _routes(session, request.service, target.platforms)
    ttl, priority = payload.get("ttl_seconds"), payload.get("priority") or "high"
    variants = []
    for tag, (title, body, data) in texts.items():
        subtitle = (payload.get("variants") or {}).get(tag, {}).get("subtitle") if tag else None
        spec = for_variant(payload.get("rich"), subtitle)  # a variant's own subtitle over the payload
        rich = Rich.from_spec(spec)
        # The notification id is per device: a sample of its length, so the sizes are the sent ones.
        collapse = rich.collapse_key if rich else None
        m = Message(SAMPLE_TOKEN, "AOS", title, body, data, ttl, priority, collapse, rich, notification_id.SAMPLE)
        shown = {os: _platform(m, provider) for os, provider in routes.items()}
        variants.append(VariantPreview(tag or None, title, body, data, spec, shown))
        warnings += [
            f"{os} ({p.provider}): {p.bytes} bytes, over its limit of {p.limit}{f' (locale {tag})' if tag else ''}"
            for os, p in shown.items()
            if p.over
        ]
    reached = reach.devices if reach.devices is not None else reach.users
    if reached == 0:
        what = "devices" if reach.devices is not None else "subscribed users"
        warnings.insert(0, f"the target reaches 0 {what}: publishing it would send nothing")
    return Preview(variants, reach, unknown, ttl, priority, warnings, sample)


def _estimate_target(publish: Publish) -> EstimateTarget:
    t = publish.targets
    return EstimateTarget(
        filter=t.get("filter"),
        segments=t.get("segments"),
        users=t.get("users"),
        topic=t.get("topic"),
        condition=t.get("condition"),
        type=publish.type_,
        platforms=publish.platforms or None,
    )


def _texts(payload: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, str]]]:
    """The job payload's texts by variant tag ("": the template's own)."""
    out = {"": (payload["title"], payload["body"], dict(payload.get("data") or {}))}
    for tag, v in (payload.get("variants") or {}).items():
        out[tag] = (v["title"], v["body"], dict(v.get("data") or {}))
    return out


def _sample(session: Session, service: str) -> dict[str, Any]:
    row = services_sql.get_service(session, service)
    zone = row.timezone if row is not None else None
    return {"name": SAMPLE_NAME, "id": SAMPLE_ID, "timezone": zone, "tags": {}}


def _profile(sample: dict[str, Any], tag: str) -> Profile:
    return (tag or None, sample["timezone"], sample["name"], sample["id"], sample["tags"])


def _routes(session: Session, service: str, platforms: tuple[str, ...] | None) -> dict[str, str]:
    """The provider each asked platform goes through: iOS through APNs when the service has APNs
    credentials, else through FCM; WEB through Web Push (``notee.providers.routing.choose``). Asked
    for none: AOS and IOS, and WEB when the service has a VAPID key."""
    status = credentials_status(session, service)
    wanted = platforms or (*PLATFORMS, *(("WEB",) if status["webpush"] else ()))
    return {os: "webpush" if os == "WEB" else "apns" if os == "IOS" and status["apns"] else "fcm" for os in wanted}


def _platform(m: Message, provider: str) -> PlatformPreview:
    if provider == "webpush":
        body = webpush.webpush_payload(m.title, m.body, m.data, m.rich, m.notification_id or "")
        headers = {k.decode(): v.decode() for k, v in webpush.push_headers(m)}
        size = webpush.payload_bytes(m.title, m.body, m.data, m.rich)
        return PlatformPreview("webpush", body, headers, size, webpush.PAYLOAD_LIMIT)
    if provider == "fcm":
        message = fcm.fcm_message(m)
        counted = json.dumps(fcm.counted_content(message), separators=(",", ":"), ensure_ascii=False).encode()
        return PlatformPreview("fcm", {"message": message}, None, len(counted), fcm.PAYLOAD_LIMIT)
    body = apns.apns_payload(m.title, m.body, m.data, m.rich, m.notification_id or "")
    size = len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())
    headers = {
        k.decode(): v.decode()
        for k, v in apns.apns_headers(m, APNS_TOPIC, b"")
        if k not in (b"authorization", b"apns-id")  # the key's token and a random id: nothing to preview
    }
    return PlatformPreview("apns", body, headers, size, apns.PAYLOAD_LIMIT)
