"""The SDK's enum-like fields are ``Literal`` types (clients/python/notee_sdk/models.py), and each
holds exactly the values the server's OpenAPI document gives that field: a value the server adds or
drops fails here. Every ``Literal`` field of the SDK's models is in the table, and every enum of an
answer's schema in the document is either in it or listed with the reason the SDK does not type it."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from notee_sdk import models as m
from pydantic import BaseModel

# (SDK model, field) -> (schema of the document, property)
TABLE = {
    ("Service", "delivery_mode"): ("ServiceOut", "delivery_mode"),
    ("Device", "os"): ("DeviceOut", "os"),
    ("Template", "method"): ("TemplateOut", "method"),
    ("Template", "priority"): ("TemplateOut", "priority"),
    ("Template", "quiet_hours"): ("TemplateOut", "quiet_hours"),
    ("Subscribed", "status"): ("SubscribeOut", "status"),
    ("Subscription", "method"): ("SubscriptionOut", "method"),
    ("BulkResult", "status"): ("BulkResult", "status"),
    ("PublishAccepted", "state"): ("PublishAccepted", "state"),
    ("GeneralPublishAccepted", "state"): ("GeneralPublishAccepted", "state"),
    ("Job", "state"): ("JobStatus", "state"),
    ("RateLimit", "rate_class"): ("RateLimitOut", "class"),
    ("Webhook", "events"): ("WebhookOut", "events"),
    ("WebhookCreated", "events"): ("WebhookCreated", "events"),
    ("WebhookDelivery", "event_type"): ("WebhookDeliveryOut", "event_type"),
    ("WebhookDelivery", "state"): ("WebhookDeliveryOut", "state"),
}
# Literal fields of the SDK's request models (the SDK posts them): checked against the request schema.
REQUESTS: dict[tuple[str, str], tuple[str, str]] = {("Receipt", "event"): ("ReceiptIn", "event")}
# Enums of answers the SDK has no Literal field for, each with the reason (none today).
UNMAPPED: dict[tuple[str, str], str] = {}


def _literal(annotation: Any) -> set[Any] | None:
    """The values of the Literal in ``annotation`` (also inside ``X | None`` and ``list[X]``)."""
    if typing.get_origin(annotation) is Literal:
        return set(typing.get_args(annotation))
    if typing.get_origin(annotation) in (list, typing.Union, types.UnionType):
        found = [v for arg in typing.get_args(annotation) if (v := _literal(arg)) is not None]
        return found[0] if found else None
    return None


def _enum(document: dict[str, Any], node: dict[str, Any]) -> set[Any] | None:
    if "$ref" in node:  # an enum of its own, or none (an object's properties are not the field's values)
        target = document["components"]["schemas"][node["$ref"].split("/")[-1]]
        return set(target["enum"]) if "enum" in target else None
    if "enum" in node:
        return set(node["enum"])
    for inner in [*node.get("anyOf", []), *([node["items"]] if "items" in node else [])]:
        if (found := _enum(document, inner)) is not None:
            return found
    return None


def _sdk_models() -> dict[str, type[BaseModel]]:
    return {
        name: value
        for name, value in vars(m).items()
        if isinstance(value, type) and issubclass(value, m.Model) and value is not m.Model
    }


def _answer_schemas(document: dict[str, Any]) -> set[str]:
    """Every schema an answer of the document refers to, directly or through another schema."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            name = ref.split("/")[-1]
            if ref.startswith("#/components/schemas/") and name not in found:
                found.add(name)
                walk(document["components"]["schemas"][name])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for operations in document["paths"].values():
        for operation in operations.values():
            if isinstance(operation, dict):
                walk(operation.get("responses", {}))
    return found


def test_each_literal_holds_the_servers_values(client):
    document = client.get("/openapi.json").json()
    models = _sdk_models()
    for (model, field), (schema, prop) in (TABLE | REQUESTS).items():
        sdk = _literal(models[model].model_fields[field].annotation)
        server = _enum(document, document["components"]["schemas"][schema]["properties"][prop])
        assert sdk is not None, f"{model}.{field} is not a Literal"
        assert sdk == server, f"{model}.{field} {sorted(sdk)} != {schema}.{prop} {sorted(server or [])}"


def test_every_literal_field_of_the_sdk_is_checked():
    typed = {
        (name, field)
        for name, model in _sdk_models().items()
        for field, info in model.model_fields.items()
        if _literal(info.annotation) is not None
    }
    assert typed == set(TABLE) | set(REQUESTS)


def test_every_enum_of_an_answer_is_typed_by_the_sdk_or_listed(client):
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    enums = {
        (name, prop)
        for name in _answer_schemas(document)
        for prop, node in schemas[name].get("properties", {}).items()
        if _enum(document, node) is not None
    }
    assert enums == set(TABLE.values()) | set(UNMAPPED)
