"""Template rendering and the providers' payload size limit: pure functions, no I/O.

``{{name}}`` placeholders (spaces inside the braces allowed) are filled from request variables.
A missing variable is an error (InvalidInput) rather than an empty string: a push that says
"Hi , your order shipped" cannot be recalled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from notee.errors import InvalidInput, PayloadTooLarge

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")
# Both providers cap the notification payload at 4096 bytes (APNs: 413 PayloadTooLarge above it;
# FCM: "message is too big"). https://developer.apple.com/documentation/usernotifications/generating-a-remote-notification
PAYLOAD_LIMIT = 4096


def placeholders(text: str) -> list[str]:
    return list(dict.fromkeys(PLACEHOLDER.findall(text)))


def render(text: str, variables: Mapping[str, str], *, field: str = "text") -> str:
    missing = [name for name in placeholders(text) if name not in variables]
    if missing:
        raise InvalidInput(f"missing template variable(s): {', '.join(missing)}",
                           details=[{"loc": ["body", "variables", name], "msg": "required by the template",
                                     "type": "missing", "field": field} for name in missing])
    return PLACEHOLDER.sub(lambda m: str(variables[m.group(1)]), text)


def render_all(title: str, body: str, data: Mapping[str, str] | None, variables: Mapping[str, str] | None
               ) -> tuple[str, str, dict[str, str]]:
    """Fill title, body and data values; every missing variable is reported at once."""
    variables = variables or {}
    needed = placeholders(title) + placeholders(body) + [n for v in (data or {}).values() for n in placeholders(v)]
    missing = [n for n in dict.fromkeys(needed) if n not in variables]
    if missing:
        raise InvalidInput(f"missing template variable(s): {', '.join(missing)}",
                           details=[{"loc": ["body", "variables", n], "msg": "required by the template",
                                     "type": "missing"} for n in missing])
    return (render(title, variables), render(body, variables),
            {k: render(v, variables) for k, v in (data or {}).items()})


def apns_payload(title: str, body: str, data: Mapping[str, str] | None) -> dict:
    """The APNs JSON payload: ``aps`` plus custom keys at the top level."""
    return {"aps": {"alert": {"title": title, "body": body}, "sound": "default"}, **(data or {})}


def payload_size(title: str, body: str, data: Mapping[str, str] | None) -> int:
    """Bytes of the larger of the two providers' payloads for this content."""
    apns = len(json.dumps(apns_payload(title, body, data), separators=(",", ":"), ensure_ascii=False).encode())
    fcm = len(json.dumps({"notification": {"title": title, "body": body}, "data": dict(data or {})},
                         separators=(",", ":"), ensure_ascii=False).encode())
    return max(apns, fcm)


def check_size(title: str, body: str, data: Mapping[str, str] | None) -> int:
    size = payload_size(title, body, data)
    if size > PAYLOAD_LIMIT:
        raise PayloadTooLarge(f"rendered payload is {size} bytes; providers accept at most {PAYLOAD_LIMIT}",
                              details=[{"loc": ["body"], "msg": f"{size} > {PAYLOAD_LIMIT} bytes",
                                        "type": "payload_too_large"}])
    return size
