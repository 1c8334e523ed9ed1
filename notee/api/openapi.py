"""What the OpenAPI document says beyond the routes themselves: a stable operationId per operation
(what generated clients name their methods after) and a description per tag.

The operationIds are part of the API: renaming one renames a method in every generated client, so
they are listed here by (method, path) rather than derived from Python function names. The Python
SDK (clients/python) uses the same names in snake case; tests/test_sdk.py checks the two agree and
that no route is missing here.
"""

from __future__ import annotations

import re

from fastapi.routing import APIRoute

OPERATION_IDS: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): "health",
    # admin
    ("POST", "/v1/admin/services"): "createService",
    ("GET", "/v1/admin/services"): "listServices",
    ("GET", "/v1/admin/services/{service}"): "getService",
    ("POST", "/v1/admin/services/{service}/api-keys"): "createApiKey",
    ("GET", "/v1/admin/services/{service}/api-keys"): "listApiKeys",
    ("DELETE", "/v1/admin/services/{service}/api-keys/{key_id}"): "revokeApiKey",
    ("PUT", "/v1/admin/services/{service}/credentials/fcm"): "putFcmCredentials",
    ("PUT", "/v1/admin/services/{service}/credentials/apns"): "putApnsCredentials",
    ("GET", "/v1/admin/services/{service}/credentials"): "getCredentials",
    ("DELETE", "/v1/admin/services/{service}/credentials/{provider}"): "deleteCredentials",
    ("POST", "/v1/admin/jobs/{job_id}/requeue"): "requeueJob",
    ("GET", "/v1/admin/services/{service}/dead-letters"): "adminListDeadLetters",
    ("POST", "/v1/admin/services/{service}/dead-letters/replay"): "adminReplayDeadLetters",
    # users and devices
    ("PUT", "/v1/users/{service_user_id}"): "putUser",
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
    ("POST", "/v1/users/{user_id}/send"): "sendToUser",
    # dead letters
    ("GET", "/v1/dead-letters"): "listDeadLetters",
    ("POST", "/v1/dead-letters/replay"): "replayDeadLetters",
}

TAGS: list[dict[str, str]] = [
    {"name": "health", "description": "Liveness of the API and of the stores it needs."},
    {"name": "admin", "description": "Operator API, authenticated by NOTEE_ADMIN_TOKEN: services (tenants), "
                                     "their API keys and provider credentials, and actions on any service's jobs."},
    {"name": "users", "description": "A service's users, identified by the service's own id "
                                     "(`service_user_id`) and by Notee's `user_id`."},
    {"name": "devices", "description": "Push tokens of a user's devices; token rotation."},
    {"name": "templates", "description": "The notification text of each (method, type): TOPIC templates are "
                                         "published to topics, CYCLE templates sent on recurring schedules, SINGLE "
                                         "templates sent to one user."},
    {"name": "subscriptions", "description": "Topic and recurring (cycle) subscriptions of a user, and bulk "
                                             "topic subscription."},
    {"name": "publish", "description": "Publishing a TOPIC template to a topic's subscribers, and the jobs that "
                                       "fan it out."},
    {"name": "sends", "description": "A SINGLE template to every device of one user, delivered synchronously."},
    {"name": "dead letters", "description": "Pushes that still failed after the retries: list and send again."},
]


def operation_id(route: APIRoute) -> str:
    """The listed operationId; a route missing from the list gets a camelCase name of its function
    (tests/test_api_openapi.py fails until it is listed)."""
    method = sorted(route.methods)[0]
    listed = OPERATION_IDS.get((method, route.path_format))
    if listed is not None:
        return listed
    head, *rest = route.name.split("_")
    return head + "".join(part.title() for part in rest)


def snake(operation: str) -> str:
    """``publishTopic`` -> ``publish_topic``: the SDK's name for an operation."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()
