"""Web Push's payload limit, checked when a publish or a single send is made (docs/WEB-PUSH.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from notee.core.errors import PayloadTooLarge
from notee.domain import render
from notee.providers import webpush
from notee.providers.payload import Rich


def check_web_size(spec: Mapping[str, Any] | None, pushes: Mapping[Any, render.Rendered]) -> None:
    """Web Push's limit (docs/WEB-PUSH.md): each variant's encrypted body at most 4,096 bytes
    (``webpush.payload_bytes``), checked before anything is queued or sent for a service with a
    VAPID key, so an oversized push is refused with 422, never discovered per device."""
    rich = Rich.from_spec(spec)
    over: list[dict[str, Any]] = []
    for key, push in pushes.items():
        size = webpush.payload_bytes(push.title, push.body, push.data, rich)
        if size > webpush.PAYLOAD_LIMIT:
            where = f"variant {key}: " if key else ""
            msg = f"{where}WEB payload would be {size} bytes encrypted; at most {webpush.PAYLOAD_LIMIT}"
            over.append({"loc": ["payload", "web"], "type": "payload_too_large", "msg": msg})
    if over:
        raise PayloadTooLarge("rendered push too large: " + "; ".join(d["msg"] for d in over), details=over)
