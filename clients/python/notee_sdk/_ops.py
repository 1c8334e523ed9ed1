"""Every API operation once, as data: method, path, body and how to read the answer. The sync and
async clients run the same ``Op`` values, so the two cannot drift apart."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from notee_sdk import models as m

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


Parsed = TypeVar("Parsed", covariant=True)  # an Op[JobPage] is an Op of any page type JobPage is


@dataclass(frozen=True)
class Op(Generic[Parsed]):
    method: str
    path: str
    parse: Callable[[Any], Parsed]
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    #: May be sent again after a 502/503/504, a dropped connection or a read timeout without doing
    #: the work twice (notee_sdk.client's retry policy). Every
    #: PUT/GET/DELETE of the API is idempotent; a POST only when it is an upsert or carries an
    #: Idempotency-Key. A 429 is always retried: the request was refused before any work.
    repeatable: bool = True
    #: The body as it is (a bulk import's file), sent instead of ``json``.
    content: bytes | None = None
    #: ``parse`` receives the answer's bytes, not its JSON (an export).
    raw: bool = False


def _one(model: type[M]) -> Callable[[Any], M]:
    return model.model_validate


def _items(model: type[M]) -> Callable[[Any], list[M]]:
    """``{"items": [...]}`` as a list of models."""
    return lambda body: [model.model_validate(x) for x in body["items"]]


def _nothing(body: Any) -> None:
    """204 answers have no body."""
    return None


def _seg(value: str) -> str:
    """One path segment: topics and tokens may hold '/', '?', '#' or non-ASCII letters."""
    return quote(str(value), safe="")


def _clean(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _instant(moment: datetime | None) -> str | None:
    """An aware datetime as RFC 3339 (the API refuses a time without its offset, and so does this)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        raise ValueError("send_at must be an aware datetime (with tzinfo): the API never guesses a zone")
    return moment.isoformat()


# --- health and admin ------------------------------------------------------------------------------

def health() -> Op[m.Health]:
    """Readiness of the API: both stores answer (/healthz, the same check as /readyz)."""
    return Op("GET", "/healthz", _one(m.Health))


def live() -> Op[m.Alive]:
    """Liveness of the API process (reads no store)."""
    return Op("GET", "/livez", _one(m.Alive))


def ready() -> Op[m.Health]:
    """Readiness of the API: both stores answer."""
    return Op("GET", "/readyz", _one(m.Health))


def create_service(service: str, display_name: str, timezone: str | None = None) -> Op[m.Service]:
    """Create a service (tenant). Admin token."""
    return Op("POST", "/v1/admin/services", _one(m.Service),
              json=_clean(service=service, display_name=display_name, timezone=timezone), repeatable=False)


def list_services() -> Op[list[m.Service]]:
    """Every service of the deployment. Admin token."""
    return Op("GET", "/v1/admin/services", _items(m.Service))


def list_processes() -> Op[list[m.Process]]:
    """Every Notee process that beat in the last hour, with its last heartbeat and (a worker) its
    circuit breaker per provider. Admin token."""
    return Op("GET", "/v1/admin/processes", _items(m.Process))


def get_service(service: str) -> Op[m.Service]:
    """One service. Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}", _one(m.Service))


def update_service(service: str, *, delivery_mode: str) -> Op[m.Service]:
    """Change a service: ``delivery_mode`` ``live`` or ``dry_run`` (pushes recorded, never sent). Admin token."""
    return Op("PATCH", f"/v1/admin/services/{_seg(service)}", _one(m.Service), json={"delivery_mode": delivery_mode})


def get_rate_limits(service: str) -> Op[list[m.RateLimit]]:
    """A service's rate limit per class (publish, send, write, read). Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}/rate-limits", _items(m.RateLimit))


def put_rate_limit(service: str, rate_class: str, *, rate: float, burst: int) -> Op[m.RateLimit]:
    """Set a service's limit of one class: ``rate`` requests per second, ``burst`` at once. Admin token."""
    return Op("PUT", f"/v1/admin/services/{_seg(service)}/rate-limits/{_seg(rate_class)}", _one(m.RateLimit),
              json={"rate": rate, "burst": burst})


def reset_rate_limit(service: str, rate_class: str) -> Op[None]:
    """Back to the deployment's default limit for one class. Admin token."""
    return Op("DELETE", f"/v1/admin/services/{_seg(service)}/rate-limits/{_seg(rate_class)}", _nothing)


def create_api_key(service: str, label: str = "", *, kind: str = "server") -> Op[m.ApiKeyCreated]:
    """A new API key for a service; ``api_key`` is shown only in this answer. ``kind="client"``: a key
    an app may carry, which can only post receipts. Admin token."""
    return Op("POST", f"/v1/admin/services/{_seg(service)}/api-keys", _one(m.ApiKeyCreated),
              json={"label": label, "kind": kind}, repeatable=False)


def list_api_keys(service: str) -> Op[list[m.ApiKey]]:
    """A service's API keys (never their secrets). Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}/api-keys", _items(m.ApiKey))


def revoke_api_key(service: str, key_id: str) -> Op[None]:
    """Revoke an API key at once. Admin token."""
    return Op("DELETE", f"/v1/admin/services/{_seg(service)}/api-keys/{_seg(key_id)}", _nothing)


def put_fcm_credentials(service: str, service_account: Mapping[str, Any]) -> Op[m.CredentialsStatus]:
    """Store a service's Firebase service account (encrypted at rest). Admin token."""
    return Op("PUT", f"/v1/admin/services/{_seg(service)}/credentials/fcm", _one(m.CredentialsStatus),
              json={"service_account": dict(service_account)})


def put_apns_credentials(service: str, *, key_id: str, team_id: str, bundle_id: str, private_key: str,
                         sandbox: bool = False) -> Op[m.CredentialsStatus]:
    """Store a service's APNs signing key (encrypted at rest). Admin token."""
    return Op("PUT", f"/v1/admin/services/{_seg(service)}/credentials/apns", _one(m.CredentialsStatus),
              json={"key_id": key_id, "team_id": team_id, "bundle_id": bundle_id, "private_key": private_key,
                    "sandbox": sandbox})


def get_credentials(service: str) -> Op[m.CredentialsStatus]:
    """Which providers a service has credentials for. Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}/credentials", _one(m.CredentialsStatus))


def generate_vapid_key(service: str, subject: str) -> Op[m.VapidKey]:
    """Generate a new VAPID key pair for a service's Web Push (replacing any previous one); answers
    its public key. ``subject``: ``mailto:`` or ``https:`` contact. Admin token."""
    return Op("POST", f"/v1/admin/services/{_seg(service)}/credentials/webpush/generate", _one(m.VapidKey),
              json={"subject": subject})


def put_vapid_key(service: str, subject: str, private_key: str) -> Op[m.VapidKey]:
    """Upload a service's VAPID private key (PEM, or 32 bytes base64url). Admin token."""
    return Op("PUT", f"/v1/admin/services/{_seg(service)}/credentials/webpush", _one(m.VapidKey),
              json={"subject": subject, "private_key": private_key})


def get_vapid_key(service: str) -> Op[m.VapidKey]:
    """A service's VAPID public key and subject. Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}/credentials/webpush", _one(m.VapidKey))


def get_vapid_public_key() -> Op[m.VapidKey]:
    """This service's VAPID public key, for its web page's ``pushManager.subscribe`` (docs/WEB-PUSH.md)."""
    return Op("GET", "/v1/service/webpush", _one(m.VapidKey))


def delete_credentials(service: str, provider: str) -> Op[None]:
    """Remove a service's ``fcm`` or ``apns`` credentials, or its ``webpush`` VAPID key. Admin token."""
    return Op("DELETE", f"/v1/admin/services/{_seg(service)}/credentials/{_seg(provider)}", _nothing)


# --- users and devices -----------------------------------------------------------------------------

def put_user(service_user_id: str, name: str | None = None, locale: str | None = None,
             timezone: str | None = None, quiet_hours: Mapping[str, str] | None = None,
             tags: Mapping[str, Any] | None = None) -> Op[m.User]:
    """Create or update a user by the service's own id; answers the platform ``user_id``.
    ``name``: the user's name in the service; ``locale``: BCP 47 tag choosing templates' locale
    variants; ``timezone``: IANA zone for local-time publishes and quiet hours; ``quiet_hours``:
    ``{"start": "22:00", "end": "07:00"}``; ``tags``: a merge patch of the user's tags (as
    ``patch_tags``: a None value removes a key). None (the default): each is left as it is, so calling it
    again with fewer arguments never wipes what an earlier call set."""
    return Op("PUT", f"/v1/users/{_seg(service_user_id)}", _one(m.User),
              json=_clean(name=name, locale=locale, timezone=timezone,
                          quiet_hours=dict(quiet_hours) if quiet_hours is not None else None,
                          tags=dict(tags) if tags is not None else None))


def get_quiet_hours() -> Op[m.ServiceQuietHours]:
    """The service's quiet hours (``quiet_hours`` None: none)."""
    return Op("GET", "/v1/service/quiet-hours", _one(m.ServiceQuietHours))


def put_quiet_hours(start: str | None, end: str | None = None) -> Op[m.ServiceQuietHours]:
    """Set the service's quiet hours ("HH:MM" each, local; start after end crosses midnight), or
    clear them with ``start=None``."""
    window = {"start": start, "end": end} if start is not None else None
    return Op("PUT", "/v1/service/quiet-hours", _one(m.ServiceQuietHours), json={"quiet_hours": window})


def list_users(created_since: datetime | None = None, has_devices: bool | None = None,
               platform: str | None = None, cursor: str | None = None, limit: int = 50) -> Op[m.UserPage]:
    """One page of the service's users, newest first (``next_cursor`` for the next one; ``iter_users``
    walks them all). ``has_devices``: True only users with a device, False only without; ``platform``:
    only users with a device of it (IOS, AOS)."""
    params = _clean(created_since=_instant(created_since), platform=platform, cursor=cursor, limit=limit)
    if has_devices is not None:
        params["has_devices"] = "true" if has_devices else "false"
    return Op("GET", "/v1/users", _one(m.UserPage), params=params)


def get_user(user_id: str) -> Op[m.User]:
    """One user by platform ``user_id``."""
    return Op("GET", f"/v1/users/{_seg(user_id)}", _one(m.User))


def delete_user(user_id: str) -> Op[None]:
    """Delete a user with their devices, subscriptions and dead letters."""
    return Op("DELETE", f"/v1/users/{_seg(user_id)}", _nothing)


def add_device(user_id: str, token: str | None, os: str, region: str = "", locale: str | None = None,
               app_version: str | None = None, subscription: Mapping[str, Any] | None = None) -> Op[m.Device]:
    """Register (or refresh) one of the user's devices. ``locale``: the device's BCP 47 tag, which
    wins over the user's; ``app_version``: the app's version (``5.2.1``, ``5.2.1-beta``), which filters
    compare as a version (None: each left as it is). A browser (``os="WEB"``, ``token=None``) registers
    its push subscription as ``PushSubscription.toJSON()`` gives it (``endpoint``, ``keys.p256dh``,
    ``keys.auth``); the answer's ``token`` names it from then on (docs/WEB-PUSH.md)."""
    body = {"os": os, "region": region} | _clean(token=token, locale=locale, app_version=app_version)
    if subscription is not None:
        body["subscription"] = dict(subscription)
    return Op("POST", f"/v1/users/{_seg(user_id)}/devices", _one(m.Device), json=body)


def list_devices(user_id: str) -> Op[list[m.Device]]:
    """The user's devices."""
    return Op("GET", f"/v1/users/{_seg(user_id)}/devices", _items(m.Device))


def delete_device(user_id: str, token: str) -> Op[None]:
    """Remove one of the user's devices."""
    return Op("DELETE", f"/v1/users/{_seg(user_id)}/devices/{_seg(token)}", _nothing)


def rotate_token(old_token: str, new_token: str) -> Op[m.Rotated]:
    """Replace a push token by its new value everywhere it is registered."""
    return Op("POST", "/v1/devices/rotate", _one(m.Rotated), json={"old_token": old_token, "new_token": new_token})


# A tag value: a string, a number, a boolean, or {"timestamp": "2026-12-31T00:00:00Z"}.

def get_tags(user_id: str) -> Op[m.UserTags]:
    """The user's tags (``user_id``: the platform id, or ``ext:`` and the service's own id)."""
    return Op("GET", f"/v1/users/{_seg(user_id)}/tags", _one(m.UserTags))


def patch_tags(user_id: str, tags: Mapping[str, Any]) -> Op[m.UserTags]:
    """Set and remove tags (a JSON merge patch: a None value removes its key, keys left out stay);
    answers all of the user's tags."""
    return Op("PATCH", f"/v1/users/{_seg(user_id)}/tags", _one(m.UserTags), json=dict(tags))


def replace_tags(user_id: str, tags: Mapping[str, Any]) -> Op[m.UserTags]:
    """Make ``tags`` the user's whole set of tags (``{}``: none)."""
    return Op("PUT", f"/v1/users/{_seg(user_id)}/tags", _one(m.UserTags), json=dict(tags))


def delete_tag(user_id: str, key: str) -> Op[None]:
    """Remove one of the user's tags (NotFound when the user does not hold it)."""
    return Op("DELETE", f"/v1/users/{_seg(user_id)}/tags/{_seg(key)}", _nothing)


# --- templates -------------------------------------------------------------------------------------

def put_template(method: str, type: str, *, title: str, body: str, data: Mapping[str, str] | None = None,
                 ttl_seconds: int | None = None, priority: str | None = None,
                 variants: Mapping[str, Mapping[str, Any]] | None = None,
                 quiet_hours: str | None = None, payload: Mapping[str, Any] | None = None) -> Op[m.Template]:
    """Create or update the template of ``(method, type)``. ``variants``: the text per locale,
    ``{"de": {"title": ..., "body": ..., "data": {...}}}`` (BCP 47 tags); ``payload``: the rich
    fields (image, sound, badge, ``kind: "background"``, ``android``, ``ios``...: docs/PAYLOADS.md)."""
    return Op("PUT", f"/v1/templates/{_seg(method)}/{_seg(type)}", _one(m.Template),
              json=_clean(title=title, body=body, data=dict(data) if data is not None else None,
                          ttl_seconds=ttl_seconds, priority=priority,
                          variants={k: dict(v) for k, v in variants.items()} if variants is not None else None,
                          quiet_hours=quiet_hours, payload=dict(payload) if payload is not None else None))


def get_template(method: str, type: str) -> Op[m.Template]:
    """One template."""
    return Op("GET", f"/v1/templates/{_seg(method)}/{_seg(type)}", _one(m.Template))


def delete_template(method: str, type: str) -> Op[None]:
    """Delete a template; its subscriptions stop receiving."""
    return Op("DELETE", f"/v1/templates/{_seg(method)}/{_seg(type)}", _nothing)


def list_templates() -> Op[list[m.Template]]:
    """The service's templates."""
    return Op("GET", "/v1/templates", _items(m.Template))


# --- subscriptions ---------------------------------------------------------------------------------

def subscribe_topic(user_id: str, type: str, topic: str) -> Op[m.Subscribed]:
    """Subscribe all devices of the user to a topic."""
    return Op("PUT", f"/v1/users/{_seg(user_id)}/subscriptions/topic/{_seg(type)}/{_seg(topic)}", _one(m.Subscribed))


def unsubscribe_topic(user_id: str, type: str, topic: str) -> Op[None]:
    """Unsubscribe the user from a topic."""
    return Op("DELETE", f"/v1/users/{_seg(user_id)}/subscriptions/topic/{_seg(type)}/{_seg(topic)}", _nothing)


def subscribe_cycle(user_id: str, type: str, *, days: Sequence[str], hour: int, minute: int,
                    timezone: str | None = None) -> Op[m.Subscribed]:
    """Subscribe the user to the recurring schedule of a CYCLE template."""
    return Op("PUT", f"/v1/users/{_seg(user_id)}/subscriptions/cycle/{_seg(type)}", _one(m.Subscribed),
              json=_clean(days=list(days), hour=hour, minute=minute, timezone=timezone))


def unsubscribe_cycle(user_id: str, type: str) -> Op[None]:
    """Remove the user's recurring schedule for a type."""
    return Op("DELETE", f"/v1/users/{_seg(user_id)}/subscriptions/cycle/{_seg(type)}", _nothing)


def list_subscriptions(user_id: str) -> Op[list[m.Subscription]]:
    """The user's topic and cycle subscriptions."""
    return Op("GET", f"/v1/users/{_seg(user_id)}/subscriptions", _items(m.Subscription))


def bulk_subscribe(type: str, topic: str, user_ids: Sequence[str]) -> Op[m.BulkSubscribed]:
    """Subscribe up to 1,000 users to a topic in one call."""
    # Subscribing is an upsert, so repeating the same bulk call is harmless.
    return Op("POST", f"/v1/topics/{_seg(type)}/{_seg(topic)}/subscribers", _one(m.BulkSubscribed),
              json={"user_ids": list(user_ids)})


# --- publishing ------------------------------------------------------------------------------------

# A template variable's value: a text, or a list of texts or of objects of texts (for the template's
# {% for %} loops; docs/TEMPLATES.md in the repository).
TemplateValue = str | Sequence[str] | Sequence[Mapping[str, str]]


def publish_topic(type: str, topic: str, *, variables: Mapping[str, TemplateValue] | None = None,
                  data: Mapping[str, str] | None = None, title: str | None = None, body: str | None = None,
                  idempotency_key: str | None = None, send_at: datetime | None = None,
                  local_time: str | None = None, platforms: Sequence[str] | None = None,
                  payload: Mapping[str, Any] | None = None, ttl_seconds: int | None = None,
                  priority: str | None = None) -> Op[m.PublishAccepted]:
    """Publish a TOPIC template to every subscriber of a topic (at ``send_at``, an aware datetime,
    if given: the job is scheduled until then); answers a job id at once. ``local_time`` ("HH:MM"):
    reach each recipient when its time zone's clock next shows it. ``platforms``: only IOS/AOS devices.
    ``payload``: rich fields merged over the template's (docs/PAYLOADS.md); ``ttl_seconds`` and
    ``priority`` ("high"/"normal") replace the template's for this push."""
    # Every publish carries an Idempotency-Key (a new one unless the caller gives theirs), so a retry
    # after a lost answer returns the first job instead of sending twice.
    key = idempotency_key or f"sdk-{uuid.uuid4()}"
    return Op("POST", f"/v1/topics/{_seg(type)}/{_seg(topic)}/publish", _one(m.PublishAccepted),
              json=_clean(variables=dict(variables) if variables is not None else None,
                          data=dict(data) if data is not None else None, title=title, body=body,
                          send_at=_instant(send_at), local_time=local_time,
                          platforms=list(platforms) if platforms else None,
                          payload=dict(payload) if payload is not None else None,
                          ttl_seconds=ttl_seconds, priority=priority),
              headers={"Idempotency-Key": key})


def preview_topic(type: str, topic: str, *, variables: Mapping[str, TemplateValue] | None = None,
                  data: Mapping[str, str] | None = None, title: str | None = None, body: str | None = None,
                  idempotency_key: str | None = None, send_at: datetime | None = None,
                  local_time: str | None = None, platforms: Sequence[str] | None = None,
                  payload: Mapping[str, Any] | None = None, ttl_seconds: int | None = None,
                  priority: str | None = None) -> Op[m.PublishPreview]:
    """What ``publish_topic`` with the same arguments would send, without sending or creating
    anything (as ``preview``); ``idempotency_key`` is accepted for symmetry and not sent."""
    del idempotency_key
    return Op("POST", f"/v1/topics/{_seg(type)}/{_seg(topic)}/publish/preview", _one(m.PublishPreview),
              json=_clean(variables=dict(variables) if variables is not None else None,
                          data=dict(data) if data is not None else None, title=title, body=body,
                          send_at=_instant(send_at), local_time=local_time,
                          platforms=list(platforms) if platforms else None,
                          payload=dict(payload) if payload is not None else None,
                          ttl_seconds=ttl_seconds, priority=priority))


def publish(type: str, *, topic: str | None = None, condition: str | None = None,
            filter: Sequence[Sequence[Mapping[str, Any]]] | None = None, segments: Sequence[str] | None = None,
            exclude_segments: Sequence[str] | None = None, users: Sequence[str] | None = None,
            platforms: Sequence[str] | None = None, method: str = "TOPIC",
            variables: Mapping[str, str] | None = None, data: Mapping[str, str] | None = None,
            title: str | None = None, body: str | None = None, idempotency_key: str | None = None,
            send_at: datetime | None = None, local_time: str | None = None,
            payload: Mapping[str, Any] | None = None, ttl_seconds: int | None = None,
            priority: str | None = None) -> Op[m.GeneralPublishAccepted]:
    """Publish a template to exactly one target: a ``topic``, a ``condition`` over topics
    (``"'a' in topics && !('b' in topics)"``), a ``filter`` (groups of predicates), ``segments``
    (with ``exclude_segments``) or ``users`` (your user ids, up to 20,000: unknown ones are counted in
    ``unknown_users``); ``platforms`` narrows any of them; ``method`` SINGLE for filter, segments and
    users. ``payload``: rich fields (docs/PAYLOADS.md). Answers a job id at once, like ``publish_topic``."""
    key = idempotency_key or f"sdk-{uuid.uuid4()}"
    return Op("POST", f"/v1/publish/{_seg(type)}", _one(m.GeneralPublishAccepted),
              json=_general_body(topic, condition, filter, segments, exclude_segments, users, platforms, method,
                                 variables, data, title, body, send_at, local_time, payload,
                                 ttl_seconds, priority),
              headers={"Idempotency-Key": key})


def preview(type: str, *, topic: str | None = None, condition: str | None = None,
            filter: Sequence[Sequence[Mapping[str, Any]]] | None = None, segments: Sequence[str] | None = None,
            exclude_segments: Sequence[str] | None = None, users: Sequence[str] | None = None,
            platforms: Sequence[str] | None = None, method: str = "TOPIC",
            variables: Mapping[str, str] | None = None, data: Mapping[str, str] | None = None,
            title: str | None = None, body: str | None = None, idempotency_key: str | None = None,
            send_at: datetime | None = None, local_time: str | None = None,
            payload: Mapping[str, Any] | None = None, ttl_seconds: int | None = None,
            priority: str | None = None) -> Op[m.PublishPreview]:
    """What ``publish`` with the same arguments would send, without sending or creating anything:
    the rendered push per locale variant, each platform's provider body and size against its limit,
    the reach and warnings (``dry_run`` is True). A request ``publish`` would refuse raises the same
    error. ``idempotency_key`` is accepted for symmetry and not sent (nothing is created)."""
    del idempotency_key
    return Op("POST", f"/v1/publish/{_seg(type)}/preview", _one(m.PublishPreview),
              json=_general_body(topic, condition, filter, segments, exclude_segments, users, platforms, method,
                                 variables, data, title, body, send_at, local_time, payload,
                                 ttl_seconds, priority))


def _general_body(topic: str | None, condition: str | None, filter: Sequence[Sequence[Mapping[str, Any]]] | None,
                  segments: Sequence[str] | None, exclude_segments: Sequence[str] | None,
                  users: Sequence[str] | None, platforms: Sequence[str] | None, method: str,
                  variables: Mapping[str, str] | None, data: Mapping[str, str] | None, title: str | None,
                  body: str | None, send_at: datetime | None, local_time: str | None,
                  payload: Mapping[str, Any] | None, ttl_seconds: int | None = None,
                  priority: str | None = None) -> dict[str, Any]:
    """The JSON body of a general publish and of its preview."""
    seg = {"include": list(segments), "exclude": list(exclude_segments or [])} if segments else None
    return _clean(topic=topic, condition=condition,
                  filter=[[dict(p) for p in group] for group in filter] if filter is not None else None,
                  segments=seg, users=list(users) if users is not None else None,
                  platforms=list(platforms) if platforms else None,
                  method=method if method != "TOPIC" else None,
                  variables=dict(variables) if variables is not None else None,
                  data=dict(data) if data is not None else None, title=title, body=body,
                  send_at=_instant(send_at), local_time=local_time,
                  payload=dict(payload) if payload is not None else None,
                  ttl_seconds=ttl_seconds, priority=priority)

def get_job(job_id: str) -> Op[m.Job]:
    """A publish job's state and counts."""
    return Op("GET", f"/v1/jobs/{_seg(job_id)}", _one(m.Job))


def list_jobs(*, state: str | None = None, method: str | None = None, type: str | None = None,
              created_from: datetime | None = None, created_to: datetime | None = None, cursor: str | None = None,
              limit: int = 50) -> Op[m.JobPage]:
    """One page of the service's jobs (publishes and cycle minutes), newest first."""
    return Op("GET", "/v1/jobs", _one(m.JobPage),
              params=_clean(state=state, method=method, type=type, cursor=cursor, limit=limit,
                            created_from=created_from.isoformat() if created_from else None,
                            created_to=created_to.isoformat() if created_to else None))


def cancel_job(job_id: str) -> Op[m.Job]:
    """Cancel a scheduled, queued or running job (workers stop after the page they are sending)."""
    return Op("POST", f"/v1/jobs/{_seg(job_id)}/cancel", _one(m.Job))


def send_to_user(user_id: str, type: str, *, variables: Mapping[str, TemplateValue] | None = None,
                 data: Mapping[str, str] | None = None, send_at: datetime | None = None,
                 idempotency_key: str | None = None, quiet_hours: bool = False,
                 payload: Mapping[str, Any] | None = None, ttl_seconds: int | None = None,
                 priority: str | None = None) -> Op[m.SendResult | m.PublishAccepted]:
    """Send a SINGLE template to every device of one user: now (answers the counts, a SendResult),
    or at ``send_at``, an aware datetime (answers the scheduled job, a PublishAccepted).
    ``quiet_hours``: respect the user's quiet hours (inside them: dropped, counted in the result, or
    held: a job scheduled for their end, a PublishAccepted). ``idempotency_key``: the same key
    again (within 24 hours for a send now) answers the first answer and sends nothing. ``payload``:
    rich fields merged over the template's (docs/PAYLOADS.md); ``ttl_seconds`` and ``priority``
    ("high"/"normal") replace the template's for this send."""
    # Every send carries an Idempotency-Key (a new one unless the caller gives theirs), so a retry after
    # a lost answer gets the first answer instead of sending twice: a send now's for 24 hours, a
    # scheduled send's job for as long as the job is kept.
    key = idempotency_key or f"sdk-{uuid.uuid4()}"
    return Op("POST", f"/v1/users/{_seg(user_id)}/send", _sent_or_scheduled,
              json=_clean(type=type, variables=dict(variables) if variables is not None else None,
                          data=dict(data) if data is not None else None, send_at=_instant(send_at),
                          quiet_hours=quiet_hours or None,
                          payload=dict(payload) if payload is not None else None,
                          ttl_seconds=ttl_seconds, priority=priority),
              headers={"Idempotency-Key": key})


def _sent_or_scheduled(body: Any) -> m.SendResult | m.PublishAccepted:
    return m.PublishAccepted.model_validate(body) if "job_id" in body else m.SendResult.model_validate(body)


# --- operators -------------------------------------------------------------------------------------

def list_dead_letters(*, limit: int = 100, cursor: str | None = None,
                      job_id: str | None = None) -> Op[m.DeadLetterPage]:
    """One page of this service's dead letters, newest first (``next_cursor`` for the next one)."""
    return Op("GET", "/v1/dead-letters", _one(m.DeadLetterPage),
              params=_clean(limit=limit, cursor=cursor, job_id=job_id))


def replay_dead_letters(*, ids: Sequence[int] | None = None, job_id: str | None = None) -> Op[m.Replayed]:
    """Send dead letters again (given ids, one job's, or the oldest)."""
    return Op("POST", "/v1/dead-letters/replay", _one(m.Replayed),
              json=_clean(ids=list(ids) if ids is not None else None, job_id=job_id), repeatable=False)


def get_job_failures(job_id: str) -> Op[m.JobFailures]:
    """A job's dead letters counted by reason and platform, most first."""
    return Op("GET", f"/v1/jobs/{_seg(job_id)}/failures", _one(m.JobFailures))


def admin_list_dead_letters(service: str, *, limit: int = 100, cursor: str | None = None,
                            job_id: str | None = None) -> Op[m.DeadLetterPage]:
    """One page of any service's dead letters, newest first. Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}/dead-letters", _one(m.DeadLetterPage),
              params=_clean(limit=limit, cursor=cursor, job_id=job_id))


def admin_replay_dead_letters(service: str, *, ids: Sequence[int] | None = None,
                              job_id: str | None = None) -> Op[m.Replayed]:
    """Send any service's dead letters again. Admin token."""
    return Op("POST", f"/v1/admin/services/{_seg(service)}/dead-letters/replay", _one(m.Replayed),
              json=_clean(ids=list(ids) if ids is not None else None, job_id=job_id), repeatable=False)


def admin_list_jobs(service: str, *, state: str | None = None, method: str | None = None,
                    type: str | None = None, created_from: datetime | None = None,
                    created_to: datetime | None = None, cursor: str | None = None,
                    limit: int = 50) -> Op[m.JobPage]:
    """One page of any service's jobs, newest first, with list_jobs' filters. Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}/jobs", _one(m.JobPage),
              params=_clean(state=state, method=method, type=type, cursor=cursor, limit=limit,
                            created_from=created_from.isoformat() if created_from else None,
                            created_to=created_to.isoformat() if created_to else None))


def requeue_job(job_id: str) -> Op[m.Job]:
    """Resume a failed job from its checkpoints. Admin token."""
    return Op("POST", f"/v1/admin/jobs/{_seg(job_id)}/requeue", _one(m.Job), repeatable=False)


# --- insight ---------------------------------------------------------------------------------------

def get_subscriber_counts() -> Op[m.SubscriberCounts]:
    """Subscribed users per TOPIC and CYCLE template of the service."""
    return Op("GET", "/v1/subscriber-counts", _one(m.SubscriberCounts))


def list_topics(*, type: str | None = None, cursor: str | None = None, limit: int = 100) -> Op[m.TopicPage]:
    """One page of the service's topics that have subscribers, with their counts."""
    return Op("GET", "/v1/topics", _one(m.TopicPage), params=_clean(type=type, cursor=cursor, limit=limit))


def get_calendar(*, hours: int = 24) -> Op[m.Calendar]:
    """The cycle calendar: each coming minute's due templates and how many subscriptions they reach."""
    return Op("GET", "/v1/calendar", _one(m.Calendar), params={"hours": hours})


def get_delivery_summary(*, hours: int = 24) -> Op[m.DeliverySummary]:
    """What the service's jobs did in the last hours, per hour, with dead letters."""
    return Op("GET", "/v1/delivery-summary", _one(m.DeliverySummary), params={"hours": hours})


def admin_get_subscriber_counts(service: str) -> Op[m.SubscriberCounts]:
    """Any service's subscribed users per template. Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}/subscriber-counts", _one(m.SubscriberCounts))


def admin_list_topics(service: str, *, type: str | None = None, cursor: str | None = None,
                      limit: int = 100) -> Op[m.TopicPage]:
    """One page of any service's topics with their counts. Admin token."""
    return Op("GET", f"/v1/admin/services/{_seg(service)}/topics", _one(m.TopicPage),
              params=_clean(type=type, cursor=cursor, limit=limit))


def admin_get_calendar(*, hours: int = 24, service: str | None = None) -> Op[m.Calendar]:
    """The cycle calendar of every service, or of one. Admin token."""
    return Op("GET", "/v1/admin/calendar", _one(m.Calendar), params=_clean(hours=hours, service=service))


def admin_list_delivery_summaries(*, hours: int = 24, limit: int = 50,
                                  cursor: str | None = None) -> Op[m.DeliverySummaryPage]:
    """One page of the delivery summaries of the services active in the window, in id order
    (``next_cursor`` for the next one). Admin token."""
    return Op("GET", "/v1/admin/delivery-summary", _one(m.DeliverySummaryPage),
              params=_clean(hours=hours, limit=limit, cursor=cursor))


# --- delivery webhooks -----------------------------------------------------------------------------

def create_webhook(url: str, *, events: Sequence[str] | None = None,
                   description: str | None = None) -> Op[m.WebhookCreated]:
    """Register an HTTPS endpoint for this service's events; the answer holds its secret, once."""
    # Not repeatable: a retry after a lost answer would register a second endpoint.
    return Op("POST", "/v1/webhooks", _one(m.WebhookCreated),
              json=_clean(url=url, events=list(events) if events is not None else None, description=description),
              repeatable=False)


def list_webhooks() -> Op[list[m.Webhook]]:
    """This service's webhook endpoints (never their secrets)."""
    return Op("GET", "/v1/webhooks", _items(m.Webhook))


def get_webhook(endpoint_id: str) -> Op[m.Webhook]:
    """One webhook endpoint."""
    return Op("GET", f"/v1/webhooks/{_seg(endpoint_id)}", _one(m.Webhook))


def delete_webhook(endpoint_id: str) -> Op[None]:
    """Delete a webhook endpoint and its deliveries."""
    return Op("DELETE", f"/v1/webhooks/{_seg(endpoint_id)}", _nothing)


def list_webhook_deliveries(endpoint_id: str, *, state: str | None = None, cursor: str | None = None,
                            limit: int = 50) -> Op[m.WebhookDeliveryPage]:
    """One page of an endpoint's recent deliveries, newest first (``next_cursor`` for the next one)."""
    return Op("GET", f"/v1/webhooks/{_seg(endpoint_id)}/deliveries", _one(m.WebhookDeliveryPage),
              params=_clean(state=state, cursor=cursor, limit=limit))


def resend_webhook_delivery(endpoint_id: str, delivery_id: int) -> Op[m.WebhookDelivery]:
    """Send a delivery again (same event id and body)."""
    # Repeatable: re-sending twice only makes the same delivery due again.
    return Op("POST", f"/v1/webhooks/{_seg(endpoint_id)}/deliveries/{_seg(str(delivery_id))}/resend",
              _one(m.WebhookDelivery))


# --- audiences: segments and estimates -------------------------------------------------------------

def create_segment(name: str, filter: Sequence[Any], *, description: str | None = None) -> Op[m.Segment]:
    """Save a filter under a name (409 when the name is taken). The answer carries no count."""
    # Not repeatable: a retry after a lost answer would be a 409 for the segment it made.
    return Op("POST", "/v1/segments", _one(m.Segment),
              json=_clean(name=name, filter=list(filter), description=description), repeatable=False)


def list_segments(*, counts: bool = False, cursor: str | None = None, limit: int = 50) -> Op[m.SegmentPage]:
    """One page of the service's segments in name order; ``counts``: each with its reach (limit <= 20)."""
    return Op("GET", "/v1/segments", _one(m.SegmentPage),
              params=_clean(counts="true" if counts else None, cursor=cursor, limit=limit))


def get_segment(name: str) -> Op[m.Segment]:
    """One segment and what it reaches now."""
    return Op("GET", f"/v1/segments/{_seg(name)}", _one(m.Segment))


def put_segment(name: str, filter: Sequence[Any], *, description: str | None = None) -> Op[m.Segment]:
    """Replace a segment's filter and description, or create it when there is none of that name."""
    return Op("PUT", f"/v1/segments/{_seg(name)}", _one(m.Segment),
              json=_clean(filter=list(filter), description=description))


def delete_segment(name: str) -> Op[None]:
    """Delete a segment (jobs already made keep their snapshot of it)."""
    return Op("DELETE", f"/v1/segments/{_seg(name)}", _nothing)


def estimate_audience(*, filter: Sequence[Any] | None = None, include: Sequence[str] | None = None,
                      exclude: Sequence[str] | None = None, users: Sequence[str] | None = None,
                      topic: str | None = None, condition: str | None = None, type: str | None = None,
                      platforms: Sequence[str] | None = None) -> Op[m.Estimate]:
    """What a publish's target would reach now: name one of filter, include (and exclude) segments,
    users, topic or condition (the last two with type); ``platforms`` narrows it."""
    segments = _clean(include=list(include), exclude=list(exclude or ())) if include is not None else None
    # Repeatable: an estimate writes nothing.
    return Op("POST", "/v1/audience/estimate", _one(m.Estimate),
              json=_clean(filter=list(filter) if filter is not None else None, segments=segments,
                          users=list(users) if users is not None else None, topic=topic, condition=condition,
                          type=type, platforms=list(platforms) if platforms is not None else None))
# --- bulk import and export ------------------------------------------------------------------------

IMPORT_MEDIA = {"ndjson": "application/x-ndjson", "csv": "text/csv"}


def create_import(data: bytes, *, format: str = "ndjson") -> Op[m.ImportCreated]:
    """Import users, devices, tags and topic subscriptions from an NDJSON or CSV file (``format``); a
    worker applies it: follow it with ``get_import`` (or ``wait_import``). Bad lines are reported by number."""
    return Op("POST", "/v1/imports", _one(m.ImportCreated), content=data,
              headers={"Content-Type": IMPORT_MEDIA[format]}, repeatable=False)


def get_import(import_id: str) -> Op[m.Import]:
    """An import's state and progress (lines total, done, failed)."""
    return Op("GET", f"/v1/imports/{_seg(import_id)}", _one(m.Import))


def list_imports(*, cursor: str | None = None, limit: int = 50) -> Op[m.ImportPage]:
    """One page of the service's imports, newest first."""
    return Op("GET", "/v1/imports", _one(m.ImportPage), params=_clean(cursor=cursor, limit=limit))


def list_import_errors(import_id: str, *, cursor: str | None = None, limit: int = 100) -> Op[m.LineErrorPage]:
    """One page of an import's failed lines, in line order: the line number and why."""
    return Op("GET", f"/v1/imports/{_seg(import_id)}/errors", _one(m.LineErrorPage),
              params=_clean(cursor=cursor, limit=limit))


def export_users(*, format: str = "ndjson") -> Op[bytes]:
    """The service's users, devices, tags and topic subscriptions in the import's format, whole in
    memory (``Client.export_users_to`` streams it to a file instead)."""
    return Op("GET", "/v1/exports/users", bytes, params={"format": format}, raw=True)


def post_receipts(events: Sequence[m.Receipt | Mapping[str, Any]]) -> Op[m.ReceiptsResult]:
    """Report what happened to pushes on devices (delivered, opened, clicked, dismissed), in a batch;
    a client key may call this. Idempotent per (notification id, event): safe to send again."""
    return Op("POST", "/v1/receipts", _one(m.ReceiptsResult), json={"events": [_receipt(e) for e in events]})


def _receipt(event: m.Receipt | Mapping[str, Any]) -> Any:
    """One event as JSON (a mapping as it is, its datetimes in ISO form: the API checks it, 422)."""
    if isinstance(event, m.Receipt):
        return event.model_dump(mode="json", exclude_none=True)
    if not isinstance(event, Mapping):  # not what the signature allows: sent as it is, for the API to refuse
        return event  # type: ignore[unreachable]
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in event.items()}


def get_job_stats(job_id: str) -> Op[m.JobStats]:
    """A job's (or a single send's ``send_id``) targeted, sent, delivered, opened, clicked and rates."""
    return Op("GET", f"/v1/stats/jobs/{_seg(job_id)}", _one(m.JobStats))


def get_stats(by: str, *, from_: date | None = None, to: date | None = None) -> Op[m.Stats]:
    """Figures per template ``type``, ``topic`` or ``day`` (service's time zone) over at most 92 days."""
    return Op("GET", "/v1/stats", _one(m.Stats),
              params=_clean(by=by, **{"from": from_.isoformat() if from_ else None}, to=to.isoformat() if to else None))


def export_receipts(job_id: str, *, cursor: str | None = None, limit: int = 500) -> Op[m.ReceiptPage]:
    """One page of a job's raw receipt events (kept NOTEE_RECEIPTS_RETENTION_DAYS)."""
    return Op("GET", f"/v1/stats/jobs/{_seg(job_id)}/receipts", _one(m.ReceiptPage),
              params=_clean(cursor=cursor, limit=limit))
