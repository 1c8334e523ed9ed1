"""What the OpenAPI document says beyond the routes themselves: a stable operationId per operation
(what generated clients name their methods after) and a description per tag.

The operationIds are part of the API: renaming one renames a method in every generated client, so
they are listed here by (method, path) rather than derived from Python function names. The Python
SDK (clients/python) uses the same names in snake case; tests/{unit,integration}/test_sdk.py checks the two agree and
that no route is missing here.

``markdown`` renders the document as docs/API-REFERENCE.md; the schemas' examples are
``notee.api.openapi_examples``; ``key_patterns`` states the key rule of maps as JSON Schema means it.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi.routing import APIRoute

from notee.api.documented import merge_schema

OPERATION_IDS: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): "health",
    ("GET", "/livez"): "live",
    ("GET", "/readyz"): "ready",
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
    ("POST", "/v1/admin/services/{service}/credentials/webpush/generate"): "generateVapidKey",
    ("PUT", "/v1/admin/services/{service}/credentials/webpush"): "putVapidKey",
    ("GET", "/v1/admin/services/{service}/credentials/webpush"): "getVapidKey",
    # users and devices
    ("PUT", "/v1/users/{service_user_id}"): "putUser",
    ("GET", "/v1/users"): "listUsers",
    ("GET", "/v1/service/quiet-hours"): "getQuietHours",
    ("PUT", "/v1/service/quiet-hours"): "putQuietHours",
    ("GET", "/v1/service/webpush"): "getVapidPublicKey",
    ("GET", "/v1/users/{user_id}"): "getUser",
    ("DELETE", "/v1/users/{user_id}"): "deleteUser",
    ("POST", "/v1/users/{user_id}/devices"): "addDevice",
    ("GET", "/v1/users/{user_id}/devices"): "listDevices",
    ("DELETE", "/v1/users/{user_id}/devices/{token}"): "deleteDevice",
    ("POST", "/v1/devices/rotate"): "rotateToken",
    ("GET", "/v1/users/{user_id}/tags"): "getTags",
    ("PATCH", "/v1/users/{user_id}/tags"): "patchTags",
    ("PUT", "/v1/users/{user_id}/tags"): "replaceTags",
    ("DELETE", "/v1/users/{user_id}/tags/{key}"): "deleteTag",
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
    ("POST", "/v1/publish/{type}"): "publish",
    ("GET", "/v1/jobs"): "listJobs",
    ("GET", "/v1/jobs/{job_id}"): "getJob",
    ("POST", "/v1/jobs/{job_id}/cancel"): "cancelJob",
    ("GET", "/v1/jobs/{job_id}/failures"): "getJobFailures",
    ("POST", "/v1/admin/jobs/{job_id}/requeue"): "requeueJob",
    ("GET", "/v1/admin/services/{service}/jobs"): "adminListJobs",
    ("GET", "/v1/admin/processes"): "listProcesses",
    # dead letters
    ("GET", "/v1/dead-letters"): "listDeadLetters",
    ("POST", "/v1/dead-letters/replay"): "replayDeadLetters",
    ("GET", "/v1/admin/services/{service}/dead-letters"): "adminListDeadLetters",
    ("POST", "/v1/admin/services/{service}/dead-letters/replay"): "adminReplayDeadLetters",
    ("POST", "/v1/users/{user_id}/send"): "sendToUser",
    # engagement
    ("POST", "/v1/receipts"): "postReceipts",
    ("GET", "/v1/stats"): "getStats",
    ("GET", "/v1/stats/jobs/{job_id}"): "getJobStats",
    ("GET", "/v1/stats/jobs/{job_id}/receipts"): "exportReceipts",
    # insight: subscriber counts, the cycle calendar, the delivery summary
    ("GET", "/v1/subscriber-counts"): "getSubscriberCounts",
    ("GET", "/v1/topics"): "listTopics",
    ("GET", "/v1/calendar"): "getCalendar",
    ("GET", "/v1/delivery-summary"): "getDeliverySummary",
    ("GET", "/v1/admin/services/{service}/subscriber-counts"): "adminGetSubscriberCounts",
    ("GET", "/v1/admin/services/{service}/topics"): "adminListTopics",
    ("GET", "/v1/admin/calendar"): "adminGetCalendar",
    ("GET", "/v1/admin/delivery-summary"): "adminListDeliverySummaries",
    # bulk import and export
    ("POST", "/v1/imports"): "createImport",
    ("GET", "/v1/imports"): "listImports",
    ("GET", "/v1/imports/{import_id}"): "getImport",
    ("GET", "/v1/imports/{import_id}/errors"): "listImportErrors",
    ("GET", "/v1/exports/users"): "exportUsers",
    # delivery webhooks
    ("POST", "/v1/webhooks"): "createWebhook",
    ("GET", "/v1/webhooks"): "listWebhooks",
    ("GET", "/v1/webhooks/{endpoint_id}"): "getWebhook",
    ("DELETE", "/v1/webhooks/{endpoint_id}"): "deleteWebhook",
    ("GET", "/v1/webhooks/{endpoint_id}/deliveries"): "listWebhookDeliveries",
    ("POST", "/v1/webhooks/{endpoint_id}/deliveries/{delivery_id}/resend"): "resendWebhookDelivery",
    # audiences: saved segments and estimates
    ("POST", "/v1/segments"): "createSegment",
    ("GET", "/v1/segments"): "listSegments",
    ("GET", "/v1/segments/{name}"): "getSegment",
    ("PUT", "/v1/segments/{name}"): "putSegment",
    ("DELETE", "/v1/segments/{name}"): "deleteSegment",
    ("POST", "/v1/audience/estimate"): "estimateAudience",
    ("POST", "/v1/publish/{type}/preview"): "preview",
    ("POST", "/v1/topics/{type}/{topic}/publish/preview"): "previewTopic",
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
    {
        "name": "engagement",
        "description": "Receipts from the apps (delivered, opened, clicked, dismissed; a client key may post "
        "them) and the figures per job, template type, topic and day (docs/ENGAGEMENT.md).",
    },
    {"name": "dead letters", "description": "Pushes that still failed after the retries: list and send again."},
    {
        "name": "insight",
        "description": "What Notee is doing for the service: subscriber counts per template and per topic, "
        "the cycle calendar of the coming hours, and a delivery summary of the last hours.",
    },
    {
        "name": "imports",
        "description": "Bulk import of users, devices, tags and topic subscriptions from NDJSON or CSV (a job "
        "a worker applies; progress and failed lines by number), and their export in the same format.",
    },
    {
        "name": "webhooks",
        "description": "Signed event callbacks (job.finished, job.failed, token.pruned, dead_letter.created; opt-in, "
        "batched: receipt.delivered, receipt.opened, receipt.clicked, receipt.dismissed) "
        "to a service's HTTPS endpoints, and their recent deliveries (docs/WEBHOOKS.md).",
    },
    {
        "name": "audiences",
        "description": "Saved segments (named filters over tags and attributes) and the estimate of what a "
        "publish's target reaches now (docs/AUDIENCES.md).",
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


def key_patterns(node: Any) -> Any:
    """``node`` (the document) with each map's key pattern stated as ``propertyNames``: pydantic
    writes a ``dict`` whose keys have a pattern as ``patternProperties``, which lets any other key
    through, while the server refuses it. Idempotent (the document is cached and served again)."""
    if isinstance(node, dict):
        by_pattern = node.get("patternProperties")
        if isinstance(by_pattern, dict) and len(by_pattern) == 1:
            ((pattern, values),) = by_pattern.items()
            merge_schema(node, {"propertyNames": {"pattern": pattern}, "additionalProperties": values})
            del node["patternProperties"]
        for value in node.values():
            key_patterns(value)
    elif isinstance(node, list):
        for value in node:
            key_patterns(value)
    return node


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
