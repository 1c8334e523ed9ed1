"""Pure publish logic: render a template with variables and overrides, check the payload size,
split a slot walk into task ranges. No I/O; table-driven tests in tests/test_fanout_render.py."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from notee.errors import InvalidInput, PayloadTooLarge

# FCM and APNs both cap a notification payload at 4 KB (FCM: "up to 4000 bytes" of message payload,
# https://firebase.google.com/docs/cloud-messaging/concept-options#notifications_and_data_messages;
# APNs: 4096 bytes, https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns).
MAX_PAYLOAD_BYTES = 4000

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def render_text(template: str, variables: Mapping[str, str], *, field: str) -> str:
    """Replace ``{{name}}`` placeholders; a placeholder without a variable is invalid input."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template)} - set(variables))
    if missing:
        raise InvalidInput(f"{field} needs variables: {', '.join(missing)}",
                           details=[{"loc": ["body", "variables", name], "type": "missing"} for name in missing])
    return _PLACEHOLDER.sub(lambda m: str(variables[m.group(1)]), template)


def render_payload(template: Mapping[str, Any], variables: Mapping[str, str] | None,
                   overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The message every recipient of a publish gets: template fields, then overrides (title, body
    replace; data merges over the template's data), then variables substituted into title and body."""
    variables = variables or {}
    overrides = overrides or {}
    title = overrides.get("title") if overrides.get("title") is not None else template["title"]
    body = overrides.get("body") if overrides.get("body") is not None else template["body"]
    base_data = template.get("data") or {}
    if isinstance(base_data, (str, bytes)):
        base_data = json.loads(base_data)
    data = {str(k): str(v) for k, v in {**base_data, **(overrides.get("data") or {})}.items()}
    payload = {
        "title": render_text(title, variables, field="title"),
        "body": render_text(body, variables, field="body"),
        "data": data,
        "ttl_seconds": template.get("ttl_seconds"),
        "priority": template.get("priority") or "high",
    }
    size = payload_size(payload)
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadTooLarge(f"rendered payload is {size} bytes; providers accept at most {MAX_PAYLOAD_BYTES}")
    return payload


def payload_size(payload: Mapping[str, Any]) -> int:
    """Bytes of what the providers count: title, body and data as compact UTF-8 JSON."""
    body = {"title": payload["title"], "body": payload["body"], "data": payload.get("data") or {}}
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())


def slot_ranges(max_slot: int, slots_per_task: int = 1) -> list[tuple[int, int]]:
    """Split slots ``0..max_slot`` (inclusive) into task ranges of ``slots_per_task`` slots."""
    if max_slot < 0:
        max_slot = 0
    if slots_per_task < 1:
        raise ValueError("slots_per_task must be >= 1")
    return [(a, min(a + slots_per_task - 1, max_slot)) for a in range(0, max_slot + 1, slots_per_task)]
