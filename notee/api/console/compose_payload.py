"""The composer's rich fields (docs/PAYLOADS.md): the publish's ``payload``, merged by the API over
the template's, from a control per common field (``payload.image``, ``payload.android.channel_id``,
...) and a JSON textarea for the rest (``payload_json``; the controls win where both set a field).

Nothing is checked here but the JSON's syntax: the body goes to the publish route's model and the
domain's payload rules, so a bad value is the API's own 422 naming the field, which
``invalid_fields`` maps back to the control that holds it."""

from __future__ import annotations

from typing import Any

from notee.api.console.template_pages import json_object
from notee.core.errors import InvalidInput

PREFIX = "payload."
JSON_FIELD = "payload_json"
# The controls, in the form's order: the common fields of docs/PAYLOADS.md and the Android and iOS
# ones a campaign sets most. ``sound`` has a mode control of its own (``payload.sound_mode``).
TEXT_FIELDS = (
    "image",
    "link",
    "category",
    "click_action",
    "collapse_key",
    "analytics_label",
    "android.channel_id",
    "ios.subtitle",
    "ios.thread_id",
)
CHOICE_FIELDS = {
    "kind": ("alert", "background"),
    "ios.interruption_level": ("passive", "active", "time-sensitive", "critical"),
}


def _put(payload: dict[str, Any], path: str, value: Any) -> None:
    head, _, rest = path.partition(".")
    if rest:
        inner = payload.setdefault(head, {})
        if isinstance(inner, dict):  # a JSON textarea's non-object here: the API's 422 names it
            inner[rest] = value
        return
    payload[head] = value


def _sound(form: dict[str, str]) -> tuple[bool, Any]:
    """(given, value): ``default`` plays the default sound, ``none`` sends no sound key (null)."""
    mode = form.get(PREFIX + "sound_mode", "").strip()
    if mode == "default":
        return True, "default"
    if mode == "none":
        return True, None
    if mode == "name":
        return True, form.get(PREFIX + "sound", "").strip()
    return False, None


def payload_of(form: dict[str, str]) -> dict[str, Any] | None:
    """The publish's ``payload`` the form asks for (None: the template's as it is)."""
    extra = json_object(form.get(JSON_FIELD, ""), JSON_FIELD)
    if extra is not None and not isinstance(extra, dict):
        raise InvalidInput(f"{JSON_FIELD}: a JSON object", details=[{"loc": [JSON_FIELD], "type": "dict_type"}])
    payload: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in (extra or {}).items()}
    for path in (*CHOICE_FIELDS, *TEXT_FIELDS):
        value = form.get(PREFIX + path, "").strip()
        if value:
            _put(payload, path, value)
    badge = form.get(PREFIX + "badge", "").strip()
    if badge:  # not a whole number: sent as it is, so the API's rule refuses it naming the field
        payload["badge"] = int(badge) if badge.isdigit() else badge
    given, sound = _sound(form)
    if given:
        payload["sound"] = sound
    return payload or None


def invalid_fields(details: list[dict[str, Any]] | None, form: dict[str, str]) -> list[str]:
    """The form's controls an error's ``details`` name (``["body", "payload", "android", "color"]``:
    ``payload.android.color`` when the form's control holds a value, else the JSON textarea when it
    holds something; a field the template holds, or a size over a provider's limit
    (``["payload", "fcm"]``), names no control: the message says it)."""
    names: list[str] = []
    for d in details or []:
        loc = [str(p) for p in d.get("loc") or []]
        if loc and loc[0] == "body":
            loc = loc[1:]
        if not loc:
            continue
        name = ".".join(loc)
        if form.get(name, "").strip():  # a value this form gave (not one the template holds)
            names.append(name)
        elif name == "payload.sound" and form.get(PREFIX + "sound_mode", "").strip():
            names.append(PREFIX + "sound_mode")
        elif loc[0] == "payload" and form.get(JSON_FIELD, "").strip():
            names.append(JSON_FIELD)
    return list(dict.fromkeys(names))
