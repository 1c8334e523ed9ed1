# over 400 lines: a table of one example per schema, which grows with the API (only data and with_examples)
"""One example per schema of the OpenAPI document, in one place (the models stay about validation),
and ``with_examples``, which puts them on the document's schemas (Swagger UI and ReDoc show them on
every operation that uses the schema). The values tell one story: service SHOP, user Alice with an
Android device, a "news" topic publish. tests/integration/test_api_openapi.py checks that every schema has one
and that each is valid for its schema.
"""

from __future__ import annotations

from typing import Any

from notee.api import engagement_examples

_FAILURE = {"reason": "gave up after 5 attempts: 503 UNAVAILABLE", "platform": "AOS", "count": 12}

_T = "2026-11-30T09:00:00.123456Z"
_USER = "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"
_JOB = "0b7e3c52-9a1f-4d2e-b6c8-5f4a3e2d1c0b"
_IMPORT = "5d0c9b8a-7e6f-4a3b-9c2d-1e0f9a8b7c6d"
_IMPORT_STATUS = {
    "import_id": _IMPORT,
    "format": "ndjson",
    "state": "running",
    "lines_total": 250000,
    "lines_done": 120000,
    "lines_failed": 3,
    "created_at": _T,
    "started_at": _T,
    "finished_at": None,
}
_LINE_ERROR = {"line": 42, "reason": "locale: must be a BCP 47 language tag: language[-Script][-REGION], e.g. de"}
_KEY = "d2f1e0c9-8b7a-4c6d-9e5f-1a2b3c4d5e6f"
_TOKEN = "fcm-registration-token-of-alices-phone"
_VAPID_PUBLIC = "BGYjdMlH7Lb1r9cIvuIoRAchA5uhaELxXoXvVaE1kpWhZgfapwufQfwzIgPoy27vSXwLokBoO3LwTIBvJhI10pE"
_WEB_KEYS = {
    "p256dh": "BK9u-rhI6PEMA9C5uSStu4mT2IbW05yFnircNC0O9SMY4YnpnVOdKVqGT6XRtJ563OsWnyHA5JKuxtPr8dNbhyc",
    "auth": "G60t1D9eO--SXsJZ82nzDg",
}
_WEB_SUBSCRIPTION = {
    "endpoint": "https://fcm.googleapis.com/fcm/send/dQw4w9WgXcQ:APA91bF",
    "expirationTime": None,
    "keys": _WEB_KEYS,
}
_SERVICE_OUT = {
    "service": "SHOP",
    "display_name": "Shop",
    "timezone": "Europe/Berlin",
    "delivery_mode": "live",
    "created_at": _T,
}
_PROCESS = {
    "kind": "worker",
    "process_id": "worker-1:4711:a1b2c3",
    "version": "0.9.0",
    "started_at": _T,
    "beat_at": _T,
    "age_s": 2.1,
    "stale": False,
    "breakers": {"fcm": "closed", "apns": "open", "webpush": "closed"},
}
_API_KEY = {"key_id": "k3y1d4b2c5", "kind": "server", "label": "backend", "created_at": _T, "revoked_at": None}
_DEVICE = {
    "token": _TOKEN,
    "os": "AOS",
    "region": "DE",
    "locale": "de-DE",
    "app_version": "5.2.1",
    "created_at": _T,
    "updated_at": _T,
}
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
_FILTER = [
    [{"tag": "plan", "op": "=", "value": "pro"}, {"attribute": "app_version", "op": ">=", "value": "5.2"}],
    [{"attribute": "country", "op": "in", "value": ["KR", "JP"]}],
]
_REACH = {"users": 5100, "devices": 6020, "devices_by_platform": {"AOS": 4210, "IOS": 1810}}
_FCM = {"token": "<device token>", "notification": {"title": "Hi Kim", "body": "Shipped"}}
_PREVIEW_AOS = {"provider": "fcm", "body": {"message": _FCM}, "bytes": 46, "limit": 4096, "over_limit": False}
_PREVIEW_VARIANT = {
    "locale": None,
    "title": "Hi Kim",
    "body": "Shipped",
    "data": {},
    "platforms": {"AOS": _PREVIEW_AOS},
}
_SEGMENT = {
    "name": "pro-android",
    "description": "Paying users on 5.2+",
    "filter": _FILTER,
    "created_at": _T,
    "updated_at": _T,
    "reach": _REACH,
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
    "ttl_expired": 0,
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
    "ttl_expired": 0,
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
    "CredentialsStatus": {"fcm": True, "apns": False, "webpush": True},
    "VapidGenerateIn": {"subject": "mailto:push@example.com"},
    "VapidKeyIn": {"subject": "mailto:push@example.com", "private_key": "Z3J1ZmZhbG9fc2F5c19oZWxsb193b3JsZF8xMjM0NTY"},
    "VapidKeyOut": {"public_key": _VAPID_PUBLIC, "subject": "mailto:push@example.com", "generated": True},
    "VapidPublicKey": {"public_key": _VAPID_PUBLIC, "subject": "mailto:push@example.com"},
    "WebPushKeys": _WEB_KEYS,
    "WebPushSubscriptionIn": _WEB_SUBSCRIPTION,
    "CycleIn": {"days": ["MON", "FRI"], "hour": 9, "minute": 30, "timezone": "Europe/Berlin"},
    "DeadLetterList": {"items": [_DEAD_LETTER], "next_cursor": None, "next_before_id": None},
    "DeadLetterOut": _DEAD_LETTER,
    "DeliveryCounts": _COUNTS,
    "DeliverySummaryList": {"items": [_SUMMARY], "next_cursor": "WyJTSE9QMSJd"},
    "DeliverySummaryOut": _SUMMARY,
    "DeviceIn": {"token": _TOKEN, "os": "AOS", "region": "DE", "locale": "de-DE", "app_version": "5.2.1"},
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
    "Alive": {"status": "ok", "version": "0.1.0"},
    "Health": {"status": "ok", "version": "0.1.0", "mysql": "ok", "cassandra": "ok", "emulator_url": None},
    "HourOut": {"hour": "2026-11-30T09:00:00Z", "counts": _COUNTS},
    "JobList": {"items": [_JOB_STATUS], "next_cursor": None},
    "JobStatus": _JOB_STATUS,
    "PublishAccepted": {"job_id": _JOB, "state": "scheduled", "send_at": "2026-12-01T08:00:00Z"},
    "GeneralPublishAccepted": {"job_id": _JOB, "state": "queued", "send_at": None, "unknown_users": 1},
    "GeneralPublishRequest": {
        "condition": "'sports' in topics && !('news' in topics)",
        "platforms": ["IOS"],
        "variables": {"name": "Alice"},
    },
    "Segments": {"include": ["pro-users"], "exclude": ["churned"]},
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
    "FailureCount": _FAILURE,
    "JobFailures": {"job_id": _JOB, "dead_lettered": 12, "items": [_FAILURE]},
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
        "send_id": "s1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6",
    },
    "ProcessList": {"items": [_PROCESS]},
    "ProcessOut": _PROCESS,
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
    "WebhookDeliveryList": {"items": [_WEBHOOK_DELIVERY], "next_cursor": None, "next_before_id": None},
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
    "TagsOut": {
        "user_id": _USER,
        "tags": {"age": 31, "beta": True, "plan": "pro", "renews": {"timestamp": "2026-12-31T00:00:00Z"}},
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
        "tags": {"plan": "pro", "trial": None},
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
    "ImportCreated": {"import_id": _IMPORT},
    "ImportOut": _IMPORT_STATUS,
    "ImportList": {"items": [_IMPORT_STATUS], "next_cursor": None},
    "LineError": _LINE_ERROR,
    "LineErrorList": {"items": [_LINE_ERROR], "next_cursor": None},
    "UserList": {
        "items": [
            {
                "user_id": _USER,
                "service_user_id": "alice-1",
                "name": "Alice",
                "locale": None,
                "timezone": None,
                "quiet_hours": None,
                "created_at": _T,
                "updated_at": _T,
            }
        ],
        "next_cursor": None,
    },
    "VariantIn": _VARIANT,
    "VariantOut": _VARIANT,
    "SegmentIn": {"name": "pro-android", "description": "Paying users on 5.2+", "filter": _FILTER},
    "SegmentReplace": {"description": "Paying users on 5.2+", "filter": _FILTER},
    "SegmentOut": _SEGMENT,
    "SegmentList": {"items": [{**_SEGMENT, "reach": None}], "next_cursor": None},
    "ReachOut": _REACH,
    "SegmentsChoice": {"include": ["pro-android"], "exclude": ["churned"]},
    "EstimateIn": {"segments": {"include": ["pro-android"], "exclude": ["churned"]}, "platforms": ["AOS"]},
    "EstimateOut": {**_REACH, "exact": True, "method": "mysql_count", "unknown_users": None, "topics": None},
    "PreviewPlatform": _PREVIEW_AOS,
    "PreviewVariant": _PREVIEW_VARIANT,
    "PublishPreview": {"dry_run": True, "variants": [_PREVIEW_VARIANT], "priority": "high", "warnings": []}
    | {"ttl_seconds": 3600, "reach": {**_REACH, "exact": True, "method": "mysql_count"}},
    **engagement_examples.EXAMPLES,
}


def with_examples(document: dict[str, Any]) -> dict[str, Any]:
    """The document with ``EXAMPLES`` on its schemas (Swagger UI and ReDoc show them on every
    operation that uses the schema)."""
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        if name in EXAMPLES and "examples" not in schema:
            schema["examples"] = [EXAMPLES[name]]
    return document
