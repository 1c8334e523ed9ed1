"""What the OpenAPI document says beyond the routes themselves: a stable operationId per operation
(what generated clients name their methods after) and a description per tag.

The operationIds are part of the API: renaming one renames a method in every generated client, so
they are listed here by (method, path) rather than derived from Python function names. The Python
SDK (clients/python) uses the same names in snake case; tests/integration/test_sdk.py checks the two agree and
that no route is missing here.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi.routing import APIRoute

OPERATION_IDS: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): "health",
    # admin
    ("POST", "/v1/admin/services"): "createService",
    ("GET", "/v1/admin/services"): "listServices",
    ("GET", "/v1/admin/services/{service}"): "getService",
    ("PATCH", "/v1/admin/services/{service}"): "updateService",
    ("GET", "/v1/admin/services/{service}/rate-limits"): "getRateLimits",
    ("PUT", "/v1/admin/services/{service}/rate-limits/{rate_class}"): "putRateLimit",
    ("DELETE", "/v1/admin/services/{service}/rate-limits/{rate_class}"): "resetRateLimit",
    ("POST", "/v1/admin/services/{service}/api-keys"): "createApiKey",
    ("GET", "/v1/admin/services/{service}/api-keys"): "listApiKeys",
    ("DELETE", "/v1/admin/services/{service}/api-keys/{key_id}"): "revokeApiKey",
    ("PUT", "/v1/admin/services/{service}/credentials/fcm"): "putFcmCredentials",
    ("PUT", "/v1/admin/services/{service}/credentials/apns"): "putApnsCredentials",
    ("GET", "/v1/admin/services/{service}/credentials"): "getCredentials",
    ("DELETE", "/v1/admin/services/{service}/credentials/{provider}"): "deleteCredentials",
    # users and devices
    ("PUT", "/v1/users/{service_user_id}"): "putUser",
    ("GET", "/v1/service/quiet-hours"): "getQuietHours",
    ("PUT", "/v1/service/quiet-hours"): "putQuietHours",
    ("GET", "/v1/users/{user_id}"): "getUser",
    ("DELETE", "/v1/users/{user_id}"): "deleteUser",
    ("POST", "/v1/users/{user_id}/devices"): "addDevice",
    ("GET", "/v1/users/{user_id}/devices"): "listDevices",
    ("DELETE", "/v1/users/{user_id}/devices/{token}"): "deleteDevice",
    ("POST", "/v1/devices/rotate"): "rotateToken",
    # templates
    ("PUT", "/v1/templates/{method}/{type}"): "putTemplate",
    ("GET", "/v1/templates/{method}/{type}"): "getTemplate",
    ("DELETE", "/v1/templates/{method}/{type}"): "deleteTemplate",
    ("GET", "/v1/templates"): "listTemplates",
    # subscriptions
    ("PUT", "/v1/users/{user_id}/subscriptions/topic/{type}/{topic}"): "subscribeTopic",
    ("DELETE", "/v1/users/{user_id}/subscriptions/topic/{type}/{topic}"): "unsubscribeTopic",
    ("PUT", "/v1/users/{user_id}/subscriptions/cycle/{type}"): "subscribeCycle",
    ("DELETE", "/v1/users/{user_id}/subscriptions/cycle/{type}"): "unsubscribeCycle",
    ("GET", "/v1/users/{user_id}/subscriptions"): "listSubscriptions",
    ("POST", "/v1/topics/{type}/{topic}/subscribers"): "bulkSubscribe",
    # publishing and jobs
    ("POST", "/v1/topics/{type}/{topic}/publish"): "publishTopic",
    ("GET", "/v1/jobs"): "listJobs",
    ("GET", "/v1/jobs/{job_id}"): "getJob",
    ("POST", "/v1/jobs/{job_id}/cancel"): "cancelJob",
    ("POST", "/v1/admin/jobs/{job_id}/requeue"): "requeueJob",
    ("GET", "/v1/admin/services/{service}/jobs"): "adminListJobs",
    # dead letters
    ("GET", "/v1/dead-letters"): "listDeadLetters",
    ("POST", "/v1/dead-letters/replay"): "replayDeadLetters",
    ("GET", "/v1/admin/services/{service}/dead-letters"): "adminListDeadLetters",
    ("POST", "/v1/admin/services/{service}/dead-letters/replay"): "adminReplayDeadLetters",
    ("POST", "/v1/users/{user_id}/send"): "sendToUser",
    # insight: subscriber counts, the cycle calendar, the delivery summary
    ("GET", "/v1/subscriber-counts"): "getSubscriberCounts",
    ("GET", "/v1/topics"): "listTopics",
    ("GET", "/v1/calendar"): "getCalendar",
    ("GET", "/v1/delivery-summary"): "getDeliverySummary",
    ("GET", "/v1/admin/services/{service}/subscriber-counts"): "adminGetSubscriberCounts",
    ("GET", "/v1/admin/services/{service}/topics"): "adminListTopics",
    ("GET", "/v1/admin/calendar"): "adminGetCalendar",
    ("GET", "/v1/admin/delivery-summary"): "adminListDeliverySummaries",
    # delivery webhooks
    ("POST", "/v1/webhooks"): "createWebhook",
    ("GET", "/v1/webhooks"): "listWebhooks",
    ("GET", "/v1/webhooks/{endpoint_id}"): "getWebhook",
    ("DELETE", "/v1/webhooks/{endpoint_id}"): "deleteWebhook",
    ("GET", "/v1/webhooks/{endpoint_id}/deliveries"): "listWebhookDeliveries",
    ("POST", "/v1/webhooks/{endpoint_id}/deliveries/{delivery_id}/resend"): "resendWebhookDelivery",
}

TAGS: list[dict[str, str]] = [
    {"name": "health", "description": "Liveness of the API and of the stores it needs."},
    {
        "name": "admin",
        "description": "Operator API, authenticated by NOTEE_ADMIN_TOKEN: services (tenants), "
        "their API keys and provider credentials, and actions on any service's jobs.",
    },
    {
        "name": "users",
        "description": "A service's users, identified by the service's own id "
        "(`service_user_id`) and by Notee's `user_id`.",
    },
    {"name": "devices", "description": "Push tokens of a user's devices; token rotation."},
    {
        "name": "quiet hours",
        "description": "The service's quiet hours: a local-time window in which TOPIC pushes are held "
        "until it ends, or dropped (as the template says). Users may carry their own.",
    },
    {
        "name": "templates",
        "description": "The notification text of each (method, type): TOPIC templates are "
        "published to topics, CYCLE templates sent on recurring schedules, SINGLE "
        "templates sent to one user.",
    },
    {
        "name": "subscriptions",
        "description": "Topic and recurring (cycle) subscriptions of a user, and bulk topic subscription.",
    },
    {
        "name": "publish",
        "description": "Publishing a TOPIC template to a topic's subscribers, and the jobs that fan it out.",
    },
    {
        "name": "sends",
        "description": "A SINGLE template to every device of one user, delivered synchronously (or, with "
        "send_at, a scheduled job).",
    },
    {"name": "dead letters", "description": "Pushes that still failed after the retries: list and send again."},
    {
        "name": "insight",
        "description": "What Notee is doing for the service: subscriber counts per template and per topic, "
        "the cycle calendar of the coming hours, and a delivery summary of the last hours.",
    },
    {
        "name": "webhooks",
        "description": "Signed event callbacks (job.finished, job.failed, token.pruned, dead_letter.created) "
        "to a service's HTTPS endpoints, and their recent deliveries (docs/WEBHOOKS.md).",
    },
]


def operation_id(route: APIRoute) -> str:
    """The listed operationId; a route missing from the list gets a camelCase name of its function
    (tests/integration/test_api_openapi.py fails until it is listed)."""
    method = sorted(route.methods or ())[0]
    listed = OPERATION_IDS.get((method, route.path_format))
    if listed is not None:
        return listed
    head, *rest = route.name.split("_")
    return head + "".join(part.title() for part in rest)


def snake(operation: str) -> str:
    """``publishTopic`` -> ``publish_topic``: the SDK's name for an operation."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def markdown(doc: dict[str, Any]) -> str:
    """docs/API-REFERENCE.md: every operation and schema of the OpenAPI document, grouped by tag.
    ``notee openapi --markdown`` prints it; tests/integration/test_api_openapi.py checks the file is current."""
    out = [
        f"# {doc['info']['title']} API reference",
        "",
        "Generated from the OpenAPI document by `notee openapi --markdown > docs/API-REFERENCE.md`; do not "
        "edit by hand. The narrative guide is [API.md](API.md); the live document is served at `/docs`.",
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method.upper(), path, op))
    described = {t["name"]: t.get("description", "") for t in doc.get("tags", [])}
    for tag in [t["name"] for t in doc.get("tags", []) if t["name"] in by_tag] + sorted(set(by_tag) - set(described)):
        out += [f"## {tag}", "", described.get(tag, ""), ""]
        for method, path, op in by_tag[tag]:
            out += [f"### `{method} {path}` — `{op['operationId']}`", ""]
            if op.get("description"):
                out += [" ".join(op["description"].split()), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
                out += [
                    f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                    f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
                    for p in params
                ]
                out.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                out += [f"Body: {_type(body)}{'' if op['requestBody'].get('required') else ' (optional)'}", ""]
            answers = [
                f"{code} {_type(r.get('content', {}).get('application/json', {}).get('schema', {})) or '—'}"
                for code, r in op.get("responses", {}).items()
            ]
            out += ["Answers: " + ", ".join(answers), ""]
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [" ".join(schema["description"].split()), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            out += [
                f"| `{field}` | {_type(s)} | {'yes' if field in required else 'no'} | {_cell(s.get('description', ''))} |"
                for field, s in props.items()
            ]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(schema.get("type", "")) + (f" ({schema['format']})" if "format" in schema else "")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# One example per schema of the document, in one place (the models stay about validation). The
# values tell one story: service SHOP, user Alice with an Android device, a "news" topic publish.
# tests/integration/test_api_openapi.py checks that every schema has one and that each is valid for its schema.
_T = "2026-11-30T09:00:00.123456Z"
_USER = "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"
_JOB = "0b7e3c52-9a1f-4d2e-b6c8-5f4a3e2d1c0b"
_KEY = "d2f1e0c9-8b7a-4c6d-9e5f-1a2b3c4d5e6f"
_TOKEN = "fcm-registration-token-of-alices-phone"
_SERVICE_OUT = {
    "service": "SHOP",
    "display_name": "Shop",
    "timezone": "Europe/Berlin",
    "delivery_mode": "live",
    "created_at": _T,
}
_API_KEY = {"key_id": "k3y1d4b2c5", "label": "backend", "created_at": _T, "revoked_at": None}
_DEVICE = {"token": _TOKEN, "os": "AOS", "region": "DE", "locale": "de-DE", "created_at": _T, "updated_at": _T}
_VARIANT = {"title": "Hallo {{name}}", "body": "Neues in {{topic}}", "data": {"screen": "news"}}
_TEMPLATE = {
    "method": "TOPIC",
    "type": "news",
    "title": "Hi {{name}}",
    "body": "Something new in {{topic}}",
    "data": {"screen": "news"},
    "defaults": {"topic": "sports"},
    "variants": {"de": _VARIANT},
    "ttl_seconds": 3600,
    "priority": "high",
    "quiet_hours": "hold",
    "notification_key": _KEY,
    "version": 3,
    "created_at": _T,
    "updated_at": _T,
}
_SCHEDULE = {
    "days": ["MON", "FRI"],
    "hour": 9,
    "minute": 30,
    "timezone": "Europe/Berlin",
    "canonical": "MON,FRI 09:30 Europe/Berlin",
}
_JOB_STATUS = {
    "job_id": _JOB,
    "state": "running",
    "send_at": None,
    "dry_run": False,
    "notification_type": "news",
    "target": {"topic": "sports"},
    "targeted": 12000,
    "sent": 11950,
    "failed": 12,
    "no_credentials": 0,
    "pruned": 38,
    "retried": 20,
    "quiet_dropped": 0,
    "tasks": 2,
    "tasks_done": 1,
    "error": None,
    "created_at": _T,
    "started_at": _T,
    "finished_at": None,
}
_RATE = {"class": "publish", "rate": 50.0, "burst": 200, "custom": True}
_WEBHOOK = {
    "endpoint_id": "0b7c6a55-3f0e-4a8e-9d55-0f1e2d3c4b5a",
    "url": "https://shop.example/notee/events",
    "events": ["job.finished", "token.pruned"],
    "description": "order backend",
    "created_at": _T,
}
_WEBHOOK_DELIVERY = {
    "delivery_id": 42,
    "event_id": "5d1f0c7e-2a7b-4c1e-8f0a-6b9d3e2c1a00",
    "event_type": "token.pruned",
    "state": "pending",
    "attempts": 2,
    "last_status": 500,
    "last_error": "HTTP 500",
    "next_attempt_at": _T,
    "created_at": _T,
    "resent_at": None,
    "finished_at": None,
    "event": {
        "id": "5d1f0c7e-2a7b-4c1e-8f0a-6b9d3e2c1a00",
        "type": "token.pruned",
        "created_at": _T,
        "service": "SHOP",
        "data": {"tokens": [_TOKEN], "user_ids": [_JOB], "reason": "fcm UNREGISTERED"},
    },
}
_DEAD_LETTER = {
    "id": 7,
    "job_id": _JOB,
    "device_token": _TOKEN,
    "device_os": "AOS",
    "provider": "fcm",
    "reason": "UNAVAILABLE after 5 attempts",
    "attempts": 5,
    "payload": {"title": "Hi Alice", "body": "Something new in sports", "data": {}},
    "created_at": _T,
}
_DETAIL = {"loc": ["body", "variables", "name"], "type": "missing", "msg": "required by the template"}
_DUE = {
    "service": "SHOP",
    "notification_type": "digest",
    "notification_key": _KEY,
    "timezone": "Europe/Berlin",
    "day": "MON",
    "hour": 9,
    "minute": 30,
    "subscriptions": 1200,
}
_CALENDAR_MINUTE = {"minute": "2026-11-30T08:30:00Z", "subscriptions": 1200, "templates": [_DUE]}
_COUNTS = {
    "jobs": 3,
    "targeted": 12000,
    "sent": 11950,
    "failed": 12,
    "pruned": 38,
    "no_credentials": 0,
    "retried": 20,
    "dead_lettered": 12,
}
_SUMMARY = {
    "service": "SHOP",
    "since": "2026-11-29T10:00:00Z",
    "until": "2026-11-30T09:12:00.5Z",
    "totals": _COUNTS,
    "jobs_by_state": {"scheduled": 0, "queued": 0, "running": 1, "done": 2, "failed": 0, "expired": 0, "cancelled": 0},
    "hours": [{"hour": "2026-11-30T09:00:00Z", "counts": _COUNTS}],
}
_TOPIC_COUNT = {"type": "news", "topic": "sports", "subscribers": 4200}
EXAMPLES: dict[str, Any] = {
    "ApiKeyCreated": _API_KEY | {"api_key": "nk_k3y1d4b2c5_s3cr3t-shown-once"},
    "ApiKeyIn": {"label": "backend"},
    "ApiKeyList": {"items": [_API_KEY]},
    "ApiKeyOut": _API_KEY,
    "ApnsCredentialsIn": {
        "key_id": "ABC123DEFG",
        "team_id": "TEAM123456",
        "bundle_id": "com.example.shop",
        "private_key": "-----BEGIN PRIVATE KEY-----\\n...\\n-----END PRIVATE KEY-----",
        "sandbox": False,
    },
    "BulkIn": {"user_ids": [_USER]},
    "BulkOut": {
        "results": [{"user_id": _USER, "status": "subscribed"}],
        "subscribed": 1,
        "already_subscribed": 0,
        "not_found": 0,
    },
    "BulkResult": {"user_id": _USER, "status": "subscribed"},
    "CalendarMinuteOut": _CALENDAR_MINUTE,
    "CalendarOut": {
        "start": "2026-11-30T08:01:00Z",
        "end": "2026-12-01T08:01:00Z",
        "subscriptions": 1200,
        "truncated": False,
        "minutes": [_CALENDAR_MINUTE],
    },
    "CredentialsStatus": {"fcm": True, "apns": False},
    "CycleIn": {"days": ["MON", "FRI"], "hour": 9, "minute": 30, "timezone": "Europe/Berlin"},
    "DeadLetterList": {"items": [_DEAD_LETTER], "next_before_id": None},
    "DeadLetterOut": _DEAD_LETTER,
    "DeliveryCounts": _COUNTS,
    "DeliverySummaryList": {"items": [_SUMMARY]},
    "DeliverySummaryOut": _SUMMARY,
    "DeviceIn": {"token": _TOKEN, "os": "AOS", "region": "DE", "locale": "de-DE"},
    "DeviceList": {"items": [_DEVICE]},
    "DeviceOut": _DEVICE,
    "ErrorBody": {"code": "invalid_input", "message": "missing template variable(s): name", "details": [_DETAIL]},
    "ErrorDetail": _DETAIL,
    "ErrorResponse": {
        "error": {"code": "invalid_input", "message": "missing template variable(s): name", "details": [_DETAIL]}
    },
    "FcmCredentialsIn": {
        "service_account": {
            "type": "service_account",
            "project_id": "shop-app",
            "client_email": "notee@shop-app.iam.gserviceaccount.com",
            "private_key": "-----BEGIN PRIVATE KEY-----\\n...",
            "token_uri": "https://oauth2.googleapis.com/token",
        }
    },
    "DueTemplateOut": _DUE,
    "Health": {"status": "ok", "mysql": "ok", "cassandra": "ok", "emulator_url": None},
    "HourOut": {"hour": "2026-11-30T09:00:00Z", "counts": _COUNTS},
    "JobList": {"items": [_JOB_STATUS], "next_cursor": None},
    "JobStatus": _JOB_STATUS,
    "PublishAccepted": {"job_id": _JOB, "state": "scheduled", "send_at": "2026-12-01T08:00:00Z"},
    "PublishRequest": {
        "variables": {"name": "Alice"},
        "data": {"article": "42"},
        "send_at": "2026-12-01T09:00:00+01:00",
        "local_time": "09:00",
    },
    "RateLimitIn": {"rate": 50.0, "burst": 200},
    "RateLimitList": {"items": [_RATE]},
    "RateLimitOut": _RATE,
    "ReplayIn": {"job_id": _JOB},
    "ReplayOut": {"replayed": 12, "delivered": 11, "pruned": 1, "failed": 0},
    "RotateIn": {"old_token": _TOKEN, "new_token": _TOKEN + "-v2"},
    "RotateOut": {"rotated": 1},
    "ScheduleOut": _SCHEDULE,
    "SendIn": {"type": "otp", "variables": {"code": "123456"}, "quiet_hours": False},
    "SendOut": {
        "devices": 2,
        "delivered": 2,
        "pruned": 0,
        "retried": 0,
        "failed": 0,
        "dry_run": False,
        "quiet_dropped": 0,
    },
    "ServiceIn": {"service": "SHOP", "display_name": "Shop", "timezone": "Europe/Berlin"},
    "ServiceList": {"items": [_SERVICE_OUT]},
    "ServiceOut": _SERVICE_OUT,
    "ServiceUpdate": {"delivery_mode": "dry_run"},
    "SubscriberCounts": {
        "items": [
            {"method": "CYCLE", "type": "digest", "subscribers": 1200},
            {"method": "TOPIC", "type": "news", "subscribers": 5100},
        ]
    },
    "SubscribeOut": {"status": "subscribed", "devices": 1, "schedule": None},
    "WebhookIn": {"url": "https://shop.example/notee/events", "events": ["job.finished", "token.pruned"]},
    "WebhookOut": _WEBHOOK,
    "WebhookCreated": {**_WEBHOOK, "secret": "whsec_" + "x" * 43},
    "WebhookList": {"items": [_WEBHOOK]},
    "WebhookDeliveryOut": _WEBHOOK_DELIVERY,
    "WebhookDeliveryList": {"items": [_WEBHOOK_DELIVERY], "next_before_id": None},
    "SubscriptionList": {
        "items": [
            {
                "method": "CYCLE",
                "type": "digest",
                "topic": None,
                "schedule": _SCHEDULE,
                "registered_at": _T,
                "devices": 1,
            }
        ]
    },
    "SubscriptionOut": {
        "method": "TOPIC",
        "type": "news",
        "topic": "sports",
        "schedule": None,
        "registered_at": _T,
        "devices": 1,
    },
    "TemplateIn": {
        "title": "Hi {{name}}",
        "body": "Something new in {{topic}}",
        "data": {"screen": "news"},
        "defaults": {"topic": "sports"},
        "variants": {"de": _VARIANT, "pt-BR": {"title": "Olá {{name}}", "body": "Novidades em {{topic}}"}},
        "ttl_seconds": 3600,
        "priority": "high",
        "quiet_hours": "hold",
    },
    "TemplateList": {"items": [_TEMPLATE]},
    "TemplateOut": _TEMPLATE,
    "TopicCountOut": _TOPIC_COUNT,
    "TopicList": {"items": [_TOPIC_COUNT], "next_cursor": "WyJuZXdzIiwgInNwb3J0cyJd"},
    "TypeCountOut": {"method": "TOPIC", "type": "news", "subscribers": 5100},
    "UserIn": {
        "name": "Alice",
        "locale": "de-DE",
        "timezone": "Europe/Berlin",
        "quiet_hours": {"start": "22:00", "end": "07:00"},
    },
    "QuietHours": {"start": "22:00", "end": "07:00"},
    "ServiceQuietHours": {"quiet_hours": {"start": "22:00", "end": "07:00"}},
    "UserOut": {
        "user_id": _USER,
        "service_user_id": "alice-1",
        "name": "Alice",
        "locale": "de-DE",
        "timezone": "Europe/Berlin",
        "quiet_hours": {"start": "22:00", "end": "07:00"},
        "created_at": _T,
        "updated_at": _T,
    },
    "VariantIn": _VARIANT,
    "VariantOut": _VARIANT,
}


def with_examples(document: dict[str, Any]) -> dict[str, Any]:
    """The document with ``EXAMPLES`` on its schemas (Swagger UI and ReDoc show them on every
    operation that uses the schema)."""
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        if name in EXAMPLES and "examples" not in schema:
            schema["examples"] = [EXAMPLES[name]]
    return document
