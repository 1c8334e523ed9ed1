"""The rich fields of a push (docs/PAYLOADS.md): the ``payload`` object of a template, a topic
publish and a single send, checked here (every problem a 422 whose ``loc`` names the field), merged
(a request's over its template's), rendered (its text fields take placeholders like the title) and
measured per platform after rendering. The mapping to each provider's fields is
``notee.providers.payload``; pure functions, no I/O.

Canonical form (what is stored and what a job carries): the request's object with only the keys it
gives; ``sound: null`` is kept (no sound), every other null is dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from notee.core.errors import InvalidInput, PayloadTooLarge
from notee.domain import override_types, payload_variants, render
from notee.providers import apns, fcm
from notee.providers.payload import OWNED_ANDROID, OWNED_ANDROID_NOTIFICATION, OWNED_APS, Rich

T = TypeVar("T")
_ONE_LINE = re.compile(r"^[^\x00-\x1f\x7f-\x9f]*$")
_COLOR = re.compile(r"^#[0-9a-fA-F]{6}$")  # FCM: "#rrggbb"
_LABEL = re.compile(r"^[a-zA-Z0-9\-_.~%]{1,50}$")  # FCM fcm_options.analytics_label
_SOUND = re.compile(r"^[^/\\\x00-\x1f]{1,64}$")
MAX_OVERRIDE_BYTES = 2048
KINDS = ("alert", "background")
VISIBILITIES = ("PRIVATE", "PUBLIC", "SECRET")
NOTIFICATION_PRIORITIES = ("PRIORITY_MIN", "PRIORITY_LOW", "PRIORITY_DEFAULT", "PRIORITY_HIGH", "PRIORITY_MAX")
INTERRUPTION_LEVELS = ("passive", "active", "time-sensitive", "critical")
# The fields that take placeholders (rendered once per job like the title).
TEXT_FIELDS = (("image",), ("link",), ("ios", "subtitle"))
# What a background push may carry besides its data: nothing a user sees or hears.
BACKGROUND_ALLOWED = frozenset({"kind", "link", "collapse_key", "analytics_label", "override", "ios"})
BACKGROUND_IOS_ALLOWED = frozenset({"content_available"})


def _problem(path: tuple[str, ...], msg: str, type_: str = "value_error") -> InvalidInput:
    loc = ["body", "payload", *path]
    return InvalidInput(f"payload.{'.'.join(path)}: {msg}", details=[{"loc": loc, "type": type_, "msg": msg}])


def _text(path: tuple[str, ...], value: Any, max_len: int, pattern: re.Pattern[str] = _ONE_LINE) -> str:
    if not isinstance(value, str):
        raise _problem(path, "must be a string", "string_type")
    if not 1 <= len(value) <= max_len:
        raise _problem(path, f"length must be 1..{max_len}", "string_length")
    if not pattern.match(value):
        raise _problem(path, "has a character that is not allowed here", "pattern")
    if path not in TEXT_FIELDS and ("{{" in value or "}}" in value):
        # only the text fields are rendered: anything else would reach a device with its braces
        raise _problem(
            path, "takes no placeholders ({{ or }}); only image, link and ios.subtitle do", "invalid_placeholder"
        )
    return value


def _int(path: tuple[str, ...], value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _problem(path, f"must be an integer {low}..{high}", "int_type")
    return value


def _choice(path: tuple[str, ...], value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _problem(path, f"must be one of {', '.join(choices)}", "enum")
    return value


def _bool(path: tuple[str, ...], value: Any) -> bool:
    if not isinstance(value, bool):
        raise _problem(path, "must be true or false", "bool_type")
    return value


def _url(path: tuple[str, ...], value: Any) -> str:
    text = _text(path, value, 1024)
    if not text.startswith("https://") or " " in text:
        raise _problem(path, "must be an https:// URL", "url")
    return text


def _score(path: tuple[str, ...], value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise _problem(path, "must be a number 0..1", "float_type")
    return value


_COMMON: dict[str, Callable[[tuple[str, ...], Any], Any]] = {
    "kind": lambda p, v: _choice(p, v, KINDS),
    "image": _url,
    "sound": lambda p, v: _text(p, v, 64, _SOUND),
    "badge": lambda p, v: _int(p, v, 0, 99_999),
    "click_action": lambda p, v: _text(p, v, 128),
    "link": lambda p, v: _text(p, v, 1024),
    "category": lambda p, v: _text(p, v, 64),
    "collapse_key": lambda p, v: _text(p, v, 64),
    "analytics_label": lambda p, v: _text(p, v, 50, _LABEL),
}
_ANDROID: dict[str, Callable[[tuple[str, ...], Any], Any]] = {
    "channel_id": lambda p, v: _text(p, v, 100),
    "icon": lambda p, v: _text(p, v, 100),
    "color": lambda p, v: _text(p, v, 7, _COLOR),
    "tag": lambda p, v: _text(p, v, 100),
    "visibility": lambda p, v: _choice(p, v, VISIBILITIES),
    "notification_priority": lambda p, v: _choice(p, v, NOTIFICATION_PRIORITIES),
    "notification_count": lambda p, v: _int(p, v, 0, 99_999),
}
_IOS: dict[str, Callable[[tuple[str, ...], Any], Any]] = {
    "thread_id": lambda p, v: _text(p, v, 64),
    "mutable_content": _bool,
    "content_available": _bool,
    "interruption_level": lambda p, v: _choice(p, v, INTERRUPTION_LEVELS),
    "relevance_score": _score,
    "target_content_id": lambda p, v: _text(p, v, 128),
    "subtitle": lambda p, v: _text(p, v, 200),
    "launch_image": lambda p, v: _text(p, v, 128),
}


def _section(
    path: tuple[str, ...], value: Any, rules: Mapping[str, Callable[[tuple[str, ...], Any], Any]]
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _problem(path, "must be an object", "dict_type")
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key not in rules:
            raise _problem((*path, str(key)[:40]), f"unknown field; one of {', '.join(rules)}", "extra_forbidden")
        if v is not None:
            out[key] = rules[key]((*path, key), v)
    return out


def _override(value: Any) -> dict[str, Any]:
    """``override``: {android?: {...}, apns?: {...}}, keys Notee does not own, at most MAX_OVERRIDE_BYTES."""
    if not isinstance(value, dict):
        raise _problem(("override",), "must be an object with android and/or apns", "dict_type")
    out: dict[str, Any] = {}
    for side, owned in (("android", OWNED_ANDROID), ("apns", OWNED_APS)):
        block = value.get(side)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise _problem(("override", side), "must be an object", "dict_type")
        for key in block:
            if key in owned:
                raise _problem(("override", side, key), "is set by Notee; use the payload's own field", "owned_key")
            _typed((side, key), block[key])
        notification = block.get("notification")
        if side == "android" and notification is not None:
            if not isinstance(notification, dict):
                raise _problem(("override", "android", "notification"), "must be an object", "dict_type")
            for key in notification:
                if key in OWNED_ANDROID_NOTIFICATION:
                    raise _problem(
                        ("override", "android", "notification", key),
                        "is set by Notee; use the payload's own field",
                        "owned_key",
                    )
                _typed(("android", "notification", key), notification[key])
        out[side] = block
    for key in value:
        if key not in ("android", "apns"):
            raise _problem(("override", str(key)[:40]), "unknown platform; android or apns", "extra_forbidden")
    encoded = json.dumps(out, separators=(",", ":"), ensure_ascii=False)
    if any("{{" in text or "}}" in text for text in _strings(out)):
        raise _problem(("override",), "takes no placeholders ({{ or }})", "invalid_placeholder")
    size = len(encoded.encode())
    if size > MAX_OVERRIDE_BYTES:
        raise _problem(("override",), f"takes {size} bytes; at most {MAX_OVERRIDE_BYTES}", "too_long")
    return out


def _typed(path: tuple[str, ...], value: Any) -> None:
    """An override value of the type the provider takes (``override_types``), else 422 naming it."""
    if path[1:2] == ("notification",) and len(path) == 2:
        return  # the block itself, checked key by key
    found = override_types.problem(path[0], path[-1], value, notification=len(path) == 3)
    if found is not None:
        raise _problem(("override", *path), found[1], found[0])


def _strings(value: Any) -> list[str]:
    """Every string (keys too) inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [t for v in value for t in _strings(v)]
    return []


def check_payload(value: Any) -> dict[str, Any] | None:
    """The canonical ``payload`` object of ``value`` (None or {}: none); InvalidInput naming the
    first bad field."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise _problem((), "must be an object", "dict_type")
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key == "android":
            section = _section(("android",), v, _ANDROID) if v is not None else None
        elif key == "ios":
            section = _section(("ios",), v, _IOS) if v is not None else None
        elif key == "override":
            section = _override(v) if v is not None else None
        elif key in _COMMON:
            if v is None:
                if key == "sound":
                    out["sound"] = None  # no sound at all
                continue
            out[key] = _COMMON[key]((key,), v)
            continue
        else:
            raise _problem((str(key)[:40],), "unknown field; see docs/PAYLOADS.md", "extra_forbidden")
        if section:
            out[key] = section
    if out.get("kind") == "background":
        _check_background(out)
    return out or None


def _check_background(spec: Mapping[str, Any]) -> None:
    """APNs refuses a background push with an alert, a sound or a badge (and any priority but 5);
    Notee refuses the fields that would make one."""
    for key in spec:
        if key not in BACKGROUND_ALLOWED:
            raise _problem((key,), "a background push shows nothing: it carries no alert, sound or badge", "background")
    for key in spec.get("ios") or {}:
        if key not in BACKGROUND_IOS_ALLOWED:
            raise _problem(("ios", key), "a background push shows nothing", "background")


def check_text_for_kind(spec: Mapping[str, Any] | None, title: str | None, body: str | None) -> None:
    """A background push has no title or body (422 naming the one it has)."""
    if spec and spec.get("kind") == "background":
        for name, text in (("title", title), ("body", body)):
            if text:
                raise InvalidInput(
                    f"{name}: a background push shows nothing: leave it empty",
                    details=[{"loc": ["body", name], "type": "background", "msg": "a background push has no alert"}],
                )


def needs_text(spec: Mapping[str, Any] | None) -> bool:
    """Whether the push must have a title and a body: not a background push, nor a badge-only one."""
    return not (spec and (spec.get("kind") == "background" or "badge" in spec))


def merge(base: Any, over: Any) -> dict[str, Any] | None:
    """A request's payload over its template's: fields replace, ``android``/``ios``/``override``
    merge one level deeper; the result is checked again as a whole."""
    if isinstance(base, (str, bytes)):  # a JSON column read as text
        base = json.loads(base)
    over = check_payload(over)
    if not over:
        return dict(base) if base else None
    out: dict[str, Any] = dict(base or {})
    for key, value in over.items():
        if key in ("android", "ios", "override") and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return check_payload(out)


def texts(spec: Mapping[str, Any] | None) -> dict[str, str]:
    """The payload's text fields that take placeholders, by dotted name (``ios.subtitle``)."""
    out: dict[str, str] = {}
    for path in TEXT_FIELDS:
        node: Any = spec or {}
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, str):
            out[".".join(path)] = node
    return out


def _with_texts(spec: Mapping[str, Any], filled: Mapping[str, str]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in spec.items()}
    for name, value in filled.items():
        *parents, leaf = name.split(".")
        node = out
        for part in parents:
            node = node[part]
        node[leaf] = value
    return out


def _relocated(exc: InvalidInput) -> InvalidInput:
    """render's problems about the payload's texts (rendered as data, ``loc`` body.data.<name>) as
    problems of payload.<name>."""
    details = []
    for d in exc.details:
        loc = list(d.get("loc", []))
        if loc[:2] == ["body", "data"] and len(loc) == 3:
            loc = ["body", "payload", *str(loc[2]).split(".")]
        details.append({**d, "loc": loc})
    return InvalidInput(exc.message.replace("data.", "payload."), details=details)


def check_template(method: str, content: render.TemplateContent, spec: Mapping[str, Any] | None) -> None:
    """``render.check_template`` for a template with a payload: a default its payload's text fields
    use is not unused, and those fields follow the same placeholder rules."""
    used = {name for text in texts(spec).values() for name in render.placeholders(text)}
    used |= payload_variants.check(method, content)  # each variant's own subtitle
    try:
        render.check_template(method, content)
    except InvalidInput as exc:
        real = [d for d in exc.details if not (d.get("type") == "unused_default" and d["loc"][-1] in used)]
        if real:
            raise InvalidInput(exc.message, details=real) from None
    _check_placeholders(method, spec, content.defaults)


def _check_placeholders(method: str, spec: Mapping[str, Any] | None, defaults: Mapping[str, str] | None) -> None:
    found = texts(spec)
    if not found:
        return
    try:
        render.check_template(method, render.TemplateContent("", "", found, defaults, None, "high"))
    except InvalidInput as exc:
        real = [d for d in exc.details if d.get("type") != "unused_default"]
        if real:
            raise _relocated(InvalidInput(exc.message, details=real)) from None


def render_with(
    spec: Mapping[str, Any] | None,
    defaults: Mapping[str, str] | None,
    variables: Mapping[str, str] | None,
    push: Callable[[], T],
) -> tuple[T, dict[str, Any] | None]:
    """``push()`` (a render of the title, body and data) and the payload's text fields filled from
    the same variables and defaults; every missing variable of both in one InvalidInput."""
    found = texts(spec)
    missing: list[dict[str, Any]] = []
    result: T | None = None
    filled: dict[str, str] = {}
    try:
        result = push()
    except InvalidInput as exc:
        if not exc.details or not all(d.get("type") == "missing" for d in exc.details):
            raise
        missing.extend(exc.details)
    if found:
        try:
            done = render.render(render.TemplateContent("", "", found, defaults, None, "high"), variables)
            filled = done.data
        except PayloadTooLarge:
            raise
        except InvalidInput as exc:
            if not all(d.get("type") == "missing" for d in exc.details):
                raise _relocated(exc) from None
            missing.extend(d for d in exc.details if d not in missing)
    if missing:
        names = list(dict.fromkeys(str(d["loc"][-1]) for d in missing))
        raise InvalidInput(f"missing template variable(s): {', '.join(names)}", details=missing)
    assert result is not None
    rendered = _with_texts(spec, filled) if spec else None
    if rendered and "image" in filled:
        _url(("image",), rendered["image"])  # a variable must not turn it into something else
    return result, rendered


def check_size(title: str, body: str, data: Mapping[str, str], spec: Mapping[str, Any] | None, where: str = "") -> None:
    """Each platform's limit on the rendered push with its payload (``fcm``/``apns.payload_bytes``):
    PayloadTooLarge with the exact byte count of every platform over it."""
    rich = Rich.from_spec(spec)
    if rich is None:
        return  # render.check_size measured it already
    over: list[dict[str, Any]] = []
    for name, size, limit in (
        ("fcm", fcm.payload_bytes(title, body, data, rich), fcm.PAYLOAD_LIMIT),
        ("apns", apns.payload_bytes(title, body, data, rich), apns.PAYLOAD_LIMIT),
    ):
        if size > limit:
            msg = f"{where}{name.upper()} payload would be {size} bytes; at most {limit}"
            over.append({"loc": ["payload", name], "type": "payload_too_large", "msg": msg})
    if over:
        raise PayloadTooLarge("rendered push too large: " + "; ".join(d["msg"] for d in over), details=over)


def check_rendered(spec: Mapping[str, Any] | None, pushes: Mapping[Any, render.Rendered]) -> None:
    """The rules a rendered push with its payload meets before anything is queued or sent: a
    background push has no title or body; each variant within each platform's size limit."""
    if not spec:
        return
    for key, push in pushes.items():
        check_text_for_kind(spec, push.title, push.body)
        check_size(push.title, push.body, push.data, spec, f"variant {key}: " if key else "")
