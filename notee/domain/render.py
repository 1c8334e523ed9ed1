"""The one template renderer of SINGLE sends, TOPIC publishes and CYCLE jobs: pure functions, no I/O.

Language: Liquid (``notee/domain/liquid.py``, docs/TEMPLATES.md): ``{{ name }}`` and dotted names
(``user.name``) as before, plus conditionals, loops over list variables, filters (default, upcase,
truncate, number, datetime, plural, ...) and ``recipient.*``. A text that does not parse, an unknown
filter, a name that is not letters, digits and ``_``, or ``{{``/``}}`` outside of markup is refused
when the template is saved, so nothing that looks like a placeholder is ever pushed literally.

Filling: request variables, then the template's ``defaults``. Every name a render outputs (or loops
over, or filters) that neither fills is reported in one InvalidInput (422); a CYCLE template needs a
default for every name it reads. Values are inserted as they are (never re-rendered), and a rendered
text that would still carry ``{{...}}`` is refused.

Size: after rendering, each provider's own rule (``fcm.payload_bytes``, ``apns.payload_bytes``, both
4,096 bytes; a job may reach either platform). Jobs render once per job (``notee.usecases.publish``),
single sends once per send (``notee.usecases.single_send``), never once per device -- unless the
template depends on the recipient (``depends_on_recipient``: ``recipient.*`` or a date filter):
then the worker renders each recipient's text (``notee/domain/personal.py``).

Locales: variants per locale (BCP 47 tags, ``{"de": {"title", "body", "data"?, "subtitle"?}}``)
replace title and body (and ``payload.ios.subtitle``), merge their data over the template's, share
its defaults, ttl and priority. A recipient gets the best match for its locale (``choose_variant``:
language-Script-REGION, then language-Script, then language, then the template's own text). A job
renders the default and every variant once (``render_all``), never per device.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from notee.core.errors import InvalidInput, PayloadTooLarge
from notee.domain import liquid
from notee.providers import apns, fcm

NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
NAME_RE = re.compile(rf"^{NAME_PATTERN}$")
PLACEHOLDER = re.compile(rf"\{{\{{\s*({NAME_PATTERN})\s*\}}\}}")
_LEFTOVER = re.compile(r"\{\{|\}\}")
_SPECIAL = re.compile(r"(\.(size|first|last))+$")  # Liquid's properties of a list, not names
MAX_DEFAULTS = 32
MAX_DEFAULT_LEN = 1024
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class Variant:
    """A template's text in one locale: title, body, subtitle replace the template's, data merges over it."""

    title: str
    body: str
    data: Mapping[str, str] | None = None
    subtitle: str | None = None  # replaces payload.ios.subtitle (docs/PAYLOADS.md); rendered like it


@dataclass(frozen=True, slots=True)
class TemplateContent:
    """What a template says, whatever its method: the renderer's input."""

    title: str
    body: str
    data: Mapping[str, str] | None
    defaults: Mapping[str, str] | None
    ttl_seconds: int | None
    priority: str
    variants: Mapping[str, Variant] | None = None  # canonical BCP 47 tag -> its text

    def content_for(self, locale_key: str | None) -> TemplateContent:
        """The template as the renderer sees it in one variant (``None``: the template's own text)."""
        if locale_key is None:
            return TemplateContent(self.title, self.body, self.data, self.defaults, self.ttl_seconds, self.priority)
        v = (self.variants or {})[locale_key]
        base = _data_map(self.data)
        data = {**base, **(v.data or {})} if (base or v.data) else None
        return TemplateContent(v.title, v.body, data, self.defaults, self.ttl_seconds, self.priority)


def variants_from_json(value: Any) -> dict[str, Variant] | None:
    """A template row's ``variants`` column (JSON object, possibly read as text) as Variants."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    return {
        k: Variant(v["title"], v["body"], v.get("data") or None, v.get("subtitle")) for k, v in value.items()
    } or None


def choose_variant(locale: str | None, variants: Collection[str]) -> str | None:
    """The variant a recipient of ``locale`` gets: the longest prefix of its tag that is a variant
    (RFC 4647 "lookup": ``zh-Hant-TW`` -> ``zh-Hant`` -> ``zh``), else None (the template's own text).
    ``locale`` and the variant keys are canonical BCP 47 tags."""
    if not locale or not variants:
        return None
    parts = locale.split("-")
    while parts:
        tag = "-".join(parts)
        if tag in variants:
            return tag
        parts.pop()
    return None


def _data_map(data: Any) -> dict[str, str]:
    if isinstance(data, (str, bytes)):  # a JSON column read as text
        data = json.loads(data)
    return dict(data or {})


@dataclass(frozen=True, slots=True)
class Rendered:
    """One push's content, identical for every recipient of a send or job."""

    title: str
    body: str
    data: dict[str, str]
    ttl_seconds: int | None
    priority: str

    def as_job_payload(self) -> dict[str, Any]:
        """The JSON a fan-out job stores and its workers send."""
        return {
            "title": self.title,
            "body": self.body,
            "data": self.data,
            "ttl_seconds": self.ttl_seconds,
            "priority": self.priority,
        }


def placeholders(text: str) -> list[str]:
    """Names of the plain ``{{ name }}`` placeholders in ``text``, first occurrence order, each once."""
    return list(dict.fromkeys(PLACEHOLDER.findall(text)))


def _fields(title: str, body: str, data: Mapping[str, str] | None) -> list[tuple[list[str], str]]:
    """(location, text) of every field a placeholder may appear in."""
    return [
        (["body", "title"], title),
        (["body", "body"], body),
        *((["body", "data", key], value) for key, value in (data or {}).items()),
    ]


def _has_braces(text: str) -> bool:
    return bool(_LEFTOVER.search(text))


def _all_fields(template: TemplateContent) -> list[tuple[list[str], str]]:
    """Every field of the template and of its variants (``["body", "variants", tag, ...]``)."""
    fields = _fields(template.title, template.body, template.data)
    for tag, v in (template.variants or {}).items():
        fields += [(["body", "variants", tag, *loc[1:]], text) for loc, text in _fields(v.title, v.body, v.data)]
    return fields


def _filled(path: str, names: Collection[str]) -> bool:
    """Whether a value named ``path`` (``user.name``) or one of its parents (``user``) is given."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in names for i in range(len(parts), 0, -1))


def _parse_problem(loc: list[str], text: str) -> tuple[liquid.Parsed | None, dict[str, Any] | None]:
    """The field parsed, or the problem that refuses it (the engine's message, readable)."""
    try:
        parsed = liquid.parse(text)
    except liquid.TemplateError as exc:
        return None, {"loc": loc, "type": "invalid_placeholder", "msg": f"{exc}; a value is written {{{{ name }}}}"}
    unknown = [p for p in parsed.paths if p.startswith("recipient.") and p.split(".")[1] not in liquid.RECIPIENT_FIELDS]
    if unknown:
        fields = ", ".join(f"recipient.{f}" for f in liquid.RECIPIENT_FIELDS)
        return parsed, {"loc": loc, "type": "invalid_placeholder", "msg": f"{unknown[0]} is not one of {fields}"}
    literal = liquid.literal_output(text)
    if literal is not None:
        msg = f"{literal[:40]!r} shows no value; a value is written {{{{ name }}}}"
        return parsed, {"loc": loc, "type": "invalid_placeholder", "msg": msg}
    return parsed, None


def check_template(method: str, template: TemplateContent) -> None:
    """The rules a template must meet to be saved; every problem is reported in one InvalidInput."""
    problems: list[dict[str, Any]] = []
    used: set[str] = set()
    for loc, text in _all_fields(template):
        parsed, problem = _parse_problem(loc, text)
        if problem is not None:
            problems.append(problem)
        names = [p for p in parsed.paths if p.split(".")[0] != "recipient"] if parsed else []
        used.update(names)
        if method == "CYCLE":
            unfilled = [n for n in names if not _filled(n, template.defaults or {})]
            if unfilled:
                problems.append(
                    {
                        "loc": loc,
                        "type": "missing_default",
                        "msg": f"a CYCLE push has no request to fill {', '.join(unfilled)}: give each a default",
                    }
                )
    problems.extend(_check_defaults(template.defaults, used))
    if problems:
        raise InvalidInput(
            "template: " + "; ".join(f"{'.'.join(p['loc'][1:])}: {p['msg']}" for p in problems), details=problems
        )


def recipient_fields(template: TemplateContent) -> frozenset[str]:
    """What the template (or a variant) reads of the recipient (``liquid.reads``); not empty: it is
    rendered per recipient (docs/TEMPLATES.md)."""
    return liquid.reads(text for _, text in _all_fields(template))


def depends_on_recipient(template: TemplateContent) -> bool:
    """Whether the template is rendered per recipient by the workers (``recipient_fields``)."""
    return bool(recipient_fields(template))


def _check_defaults(defaults: object, used: set[str]) -> list[dict[str, Any]]:
    if defaults is None:
        return []
    if not isinstance(defaults, Mapping):
        return [{"loc": ["body", "defaults"], "type": "dict_type", "msg": "must be an object of strings"}]
    problems: list[dict[str, Any]] = []
    if len(defaults) > MAX_DEFAULTS:
        problems.append({"loc": ["body", "defaults"], "type": "too_long", "msg": f"at most {MAX_DEFAULTS} names"})
    for name, value in defaults.items():
        loc = ["body", "defaults", str(name)]
        if not isinstance(name, str) or not NAME_RE.match(name):
            problems.append({"loc": loc, "type": "invalid_name", "msg": "must be a placeholder name like user.name"})
        elif not any(_filled(path, (name,)) for path in used):
            problems.append({"loc": loc, "type": "unused_default", "msg": "the template has no such placeholder"})
        if not isinstance(value, str) or len(value) > MAX_DEFAULT_LEN or _CONTROL_BUT_NEWLINE.search(value):
            problems.append(
                {
                    "loc": loc,
                    "type": "value_error",
                    "msg": f"must be a string of at most {MAX_DEFAULT_LEN} characters, no control characters",
                }
            )
        elif _has_braces(value):
            problems.append({"loc": loc, "type": "invalid_placeholder", "msg": "a default must not contain {{ or }}"})
    return problems


def merge(template: TemplateContent, overrides: Mapping[str, Any] | None) -> tuple[str, str, dict[str, str]]:
    """(title, body, data) to render: the overrides' title and body replace, their data merges over."""
    overrides = overrides or {}
    title: str = overrides["title"] if overrides.get("title") is not None else template.title
    body: str = overrides["body"] if overrides.get("body") is not None else template.body
    base = _data_map(template.data)
    return title, body, {str(k): str(v) for k, v in {**base, **(overrides.get("data") or {})}.items()}


def fill(
    fields: tuple[str, str, dict[str, str]], values: Mapping[str, Any], scope: liquid.Scope
) -> tuple[str, str, dict[str, str]]:
    """The fields rendered with ``values`` (variables over defaults). InvalidInput: a field that does
    not render (its message, naming the field), or every name used and missing, at once."""
    title, body, data = fields
    context = scope.values(values)
    out: list[str] = []
    missing: dict[str, None] = {}
    for loc, text in _fields(title, body, data):
        try:
            parsed = liquid.parse(text)
            rendered, unset = liquid.render_text(parsed, context)
        except liquid.TemplateError as exc:
            raise InvalidInput(
                f"{'.'.join(loc[1:])}: {exc}", details=[{"loc": loc, "type": "template_error", "msg": str(exc)}]
            ) from None
        for name in unset:  # a missing parent (``user``) stands for every path the field reads under it
            under = [_SPECIAL.sub("", p) for p in parsed.paths if p == name or p.startswith(name + ".")]
            missing.update(dict.fromkeys(under or [name]))
        out.append(rendered)
    if missing:
        raise InvalidInput(
            f"missing template variable(s): {', '.join(missing)}",
            details=[
                {
                    "loc": ["body", "variables", n],
                    "type": "missing",
                    "msg": "required by the template and it has no default",
                }
                for n in missing
            ],
        )
    return out[0], out[1], dict(zip(data, out[2:], strict=True))


def render(
    template: TemplateContent,
    variables: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    scope: liquid.Scope | None = None,
) -> Rendered:
    """The push every recipient gets (or, with ``scope.recipient``, the one recipient's): overrides
    (title, body, ttl_seconds, priority replace; data merges over the template's), then variables and defaults filled into
    title, body and data values, then the providers' size rules. Raises InvalidInput (every missing
    variable at once, a field that does not render, or a value that would put ``{{``/``}}`` on a
    device) and PayloadTooLarge."""
    values = {**(template.defaults or {}), **(variables or {})}
    title, body, data = fill(merge(template, overrides), values, scope or liquid.Scope())
    over = overrides or {}  # a publish's or send's own ttl and priority replace the template's
    ttl = over["ttl_seconds"] if over.get("ttl_seconds") is not None else template.ttl_seconds
    rendered = Rendered(title, body, data, ttl, over.get("priority") or template.priority or "high")
    leftovers = [
        loc
        for loc, text in _fields(rendered.title, rendered.body, rendered.data)
        if _has_braces(text) or _has_braces(loc[-1])
    ]
    if leftovers:
        raise InvalidInput(
            "the rendered push would contain '{{' or '}}' (from a variable, an override or an "
            "invalid placeholder); nothing was sent",
            details=[{"loc": loc, "type": "invalid_placeholder", "msg": "contains {{ or }}"} for loc in leftovers],
        )
    check_size(rendered)
    return rendered


@dataclass(frozen=True, slots=True)
class Localized:
    """A job's push: the template's own rendering and one per locale variant; ``personal``, for a
    template that depends on the recipient, what the workers render each recipient's text from."""

    default: Rendered
    variants: dict[str, Rendered]
    personal: dict[str, Any] | None = None

    def as_job_payload(self) -> dict[str, Any]:
        """The job's stored payload: the default push, plus ``variants`` {tag: {title, body, data}}
        when the template has any (ttl and priority are the template's for every variant), plus
        ``personal`` {values, texts: {"" or tag: {title, body, data}}} when it is rendered per recipient
        (the rendered texts are then each recipient's fallback: docs/TEMPLATES.md)."""
        payload = self.default.as_job_payload()
        if self.variants:
            payload["variants"] = {
                tag: {"title": r.title, "body": r.body, "data": r.data} for tag, r in self.variants.items()
            }
        if self.personal is not None:
            payload["personal"] = self.personal
        return payload


def render_all(
    template: TemplateContent, variables: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None
) -> Localized:
    """``render`` once for the template's own text and once per variant (a topic or cycle job's
    push, made once per job). Overrides apply to every variant. Every missing variable of every
    variant is reported in one InvalidInput; a variant over a provider's size limit is PayloadTooLarge.
    A template that depends on the recipient also gets its sources for the workers (``personal``)."""
    keys: list[str | None] = [None, *(template.variants or {})]
    done: dict[str | None, Rendered] = {}
    missing: dict[str, dict[str, Any]] = {}
    for key in keys:
        try:
            done[key] = render(template.content_for(key), variables, overrides, liquid.Scope(locale=key))
        except PayloadTooLarge as exc:
            if key is None:
                raise
            raise PayloadTooLarge(f"variant {key}: {exc.message}", details=exc.details) from None
        except InvalidInput as exc:
            if not all(d.get("type") == "missing" for d in exc.details):
                raise
            for d in exc.details:
                missing.setdefault(d["loc"][-1], d)
    if missing:
        raise InvalidInput(f"missing template variable(s): {', '.join(missing)}", details=list(missing.values()))
    texts: dict[str, dict[str, Any]] = {}  # what the workers render each recipient's text from
    sources: list[str] = []
    for key in keys:
        title, body, data = merge(template.content_for(key), overrides)
        texts[key or ""] = {"title": title, "body": body, "data": data}
        sources += [title, body, *data.values()]
    fields = sorted(liquid.reads(sources))
    values = {**(template.defaults or {}), **(variables or {})}
    personal = {"values": values, "texts": texts, "fields": fields} if fields else None
    return Localized(done.pop(None), {k: v for k, v in done.items() if k is not None}, personal)


def check_size(rendered: Rendered) -> None:
    """Each provider's own limit on the rendered content; PayloadTooLarge names every platform over it."""
    over: list[dict[str, Any]] = []
    for name, size, limit in (
        ("fcm", fcm.payload_bytes(rendered.title, rendered.body, rendered.data), fcm.PAYLOAD_LIMIT),
        ("apns", apns.payload_bytes(rendered.title, rendered.body, rendered.data), apns.PAYLOAD_LIMIT),
    ):
        if size > limit:
            over.append(
                {
                    "loc": ["payload", name],
                    "type": "payload_too_large",
                    "msg": f"{name.upper()} payload would be {size} bytes; at most {limit}",
                }
            )
    if over:
        raise PayloadTooLarge("rendered push too large: " + "; ".join(d["msg"] for d in over), details=over)
