"""The template language: Liquid (python-liquid), sandboxed and bounded, with Notee's filters
(docs/TEMPLATES.md). Pure functions, no I/O; ``notee/domain/render.py`` is its one user.

Sandboxed by the language: a template reads only the values it is given (request variables,
defaults, ``recipient``) by item lookup, never a Python attribute; ``include``/``render`` (files),
``tablerow`` (HTML) and ``{% raw %}`` (literal braces, which no push may carry) are not tags here.
Bounded: each field's render stops at LOOP_LIMIT loop iterations in total, OUTPUT_LIMIT characters of
output, LOCALS_LIMIT bytes of ``assign``/``capture`` values and NESTING_LIMIT nested blocks; an input
is at most 2,000 characters, so every render ends in milliseconds (tests/unit/test_templates_logic.py
runs hostile templates).

Missing values: a name the request, the defaults and the recipient all leave unset renders as
nothing but is recorded when it is output, looped over or given to a filter (``Missing``): the
renderer reports every such name at once; ``{% if name %}`` and ``| default:`` test it freely.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache, wraps
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from babel import Locale, UnknownLocaleError, dates, numbers
from liquid import BoundTemplate, Environment, RenderContext
from liquid.builtin.expressions.primitive import RangeLiteral
from liquid.exceptions import LiquidError, LoopIterationLimitError, OutputStreamLimitError
from liquid.filter import with_context
from liquid.undefined import Undefined

LOOP_LIMIT = 1000  # loop iterations of one field's render, nested loops multiplied
OUTPUT_LIMIT = 8192  # characters one field may render to (a push is at most 4,096 bytes)
LOCALS_LIMIT = 16384  # bytes of assign/capture values
NESTING_LIMIT = 10  # nested blocks (if, for, case, ...)
_REMOVED_TAGS = ("include", "render", "tablerow", "ifchanged")
# What the recipient offers a template: ``recipient.<field>`` (docs/TEMPLATES.md).
RECIPIENT_FIELDS = ("id", "name", "locale", "timezone", "tags")
# Filters whose output depends on the recipient's time zone: a template using one renders per recipient.
ZONE_FILTERS = frozenset({"datetime"})
# The render's formatting locale and zone: keys no Liquid name can spell (":" is not in its grammar).
LOCALE_KEY, ZONE_KEY = "notee:locale", "notee:zone"
_NAME_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MARKUP = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
_STRAY = re.compile(r"\{\{|\}\}|\{%|%\}")
# An output of a bare literal (``{{ 1 }}``, ``{{ "x" }}``): no value, no filter, most likely a typo.
_LITERAL_OUTPUT = re.compile(
    r"\{\{-?\s*(?:-?\d+(?:\.\d+)?|'[^']*'|\"[^\"]*\"|true|false|nil|null|empty|blank|\([^)]*\))\s*-?\}\}"
)

_missing: ContextVar[list[str] | None] = ContextVar("notee_liquid_missing", default=None)


class Missing(Undefined):
    """A value nobody set: renders as nothing, and its name is recorded when the template uses it
    (output, loop, filter), so the renderer can list every missing name in one error."""

    __slots__ = ()

    def _used(self) -> None:
        seen = _missing.get()
        if seen is not None:
            path = self.hint.removesuffix(" is undefined").strip("'") if self.hint else self.name
            seen.append(path if _NAME_SEGMENT.match(path.split(".")[0]) else self.name)

    def __getitem__(self, key: str) -> object:
        return Missing(f"{self.name}.{key}", token=self.token, hint=f"{self.name}.{key} is undefined")

    def __str__(self) -> str:
        self._used()
        return ""

    def __iter__(self) -> Any:
        self._used()
        return iter([])

    def items(self) -> Any:  # a {% for %} over a mapping reads its items
        self._used()
        return {}.items()

    def __int__(self) -> int:
        self._used()
        return 0


class _Env(Environment):
    loop_iteration_limit = LOOP_LIMIT
    output_stream_limit = OUTPUT_LIMIT
    local_namespace_limit = LOCALS_LIMIT
    block_nesting_limit = NESTING_LIMIT
    context_depth_limit = NESTING_LIMIT


def _locale(context: RenderContext) -> Locale:
    return _parse_locale(str(context.resolve(LOCALE_KEY, default="en") or "en"))


@lru_cache(maxsize=256)
def _parse_locale(tag: str) -> Locale:
    try:
        return Locale.parse(tag, sep="-")
    except (UnknownLocaleError, ValueError):
        try:
            return Locale.parse(tag.split("-")[0])
        except (UnknownLocaleError, ValueError):
            return Locale.parse("en")


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _number(value: object) -> Decimal:
    if isinstance(value, Undefined):
        str(value)  # records it as missing
        raise ValueError("a missing value is not a number")
    try:
        return Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{str(value)[:40]!r} is not a number") from None


def _instant(value: object) -> datetime:
    """An ISO 8601 date-time (without offset: UTC) or a Unix time in seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    text = str(value).strip()
    try:
        if re.fullmatch(r"-?\d+(\.\d+)?", text):
            return datetime.fromtimestamp(float(text), UTC)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{text[:40]!r} is not an ISO 8601 date-time or a Unix time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


_DATE_STYLES = {"short", "medium", "long", "full"}


@with_context
def datetime_filter(value: object, fmt: object = "medium", *, context: RenderContext) -> str:
    """``{{ at | datetime: "short" }}``: a date-time in the recipient's time zone and locale. ``fmt``:
    short, medium, long, full (date and time), ``date:<style>``, ``time:<style>`` or a CLDR pattern."""
    if isinstance(value, Undefined):
        return str(value)
    zone = str(context.resolve(ZONE_KEY, default="UTC") or "UTC")
    locale = str(context.resolve(LOCALE_KEY, default="en") or "en")
    return _format_datetime(value if isinstance(value, (int, float)) else str(value), str(fmt), zone, locale)


@lru_cache(maxsize=4096)
def _format_datetime(value: str | float, style: str, zone: str, tag: str) -> str:
    """The datetime filter's text: cached, as a job formats the same instants in a few zones and
    locales for every recipient (babel's formatting is the costly part of a per-recipient render)."""
    moment = _instant(value).astimezone(_zone(zone))
    locale = _parse_locale(tag)
    kind, _, sub = style.partition(":")
    if kind == "date" and (sub or "medium") in _DATE_STYLES:
        return dates.format_date(moment, sub or "medium", locale=locale)
    if kind == "time" and (sub or "medium") in _DATE_STYLES:
        return dates.format_time(moment, sub or "medium", tzinfo=moment.tzinfo, locale=locale)
    return dates.format_datetime(moment, style, tzinfo=moment.tzinfo, locale=locale)


@with_context
def number_filter(value: object, digits: object = None, *, context: RenderContext) -> str:
    """``{{ n | number }}``, ``{{ n | number: 2 }}``: a number in the locale's digits and separators
    (``digits``: exactly that many decimals)."""
    if isinstance(value, Undefined):
        return str(value)
    amount, locale = _number(value), _locale(context)
    if digits is None:
        return numbers.format_decimal(amount, locale=locale)
    places = max(0, min(int(_number(digits)), 10))
    pattern = "#,##0" + ("." + "0" * places if places else "")
    return numbers.format_decimal(amount, format=pattern, locale=locale, decimal_quantization=True)


_PLURAL_FORMS = ("zero", "one", "two", "few", "many", "other")


@with_context
def plural_filter(value: object, *forms: object, context: RenderContext, **named: object) -> str:
    """``{{ n | plural: "message", "messages" }}`` (one, other) or ``{{ n | plural: one: "# item",
    few: "# items", other: "# items" }}``: the form of the locale's plural category of ``n`` (CLDR),
    else ``other``; ``#`` in the form is ``n`` in the locale's digits."""
    if isinstance(value, Undefined):
        return str(value)
    unknown = set(named) - set(_PLURAL_FORMS)
    if unknown:
        raise ValueError(f"plural takes {', '.join(_PLURAL_FORMS)}, not {', '.join(sorted(unknown))}")
    if len(forms) > 2:
        raise ValueError("plural takes two forms (one, other) or named forms")
    given = {**dict(zip(("one", "other"), forms, strict=False)), **named}
    if "other" not in given:
        raise ValueError('plural needs an "other" form')
    amount, locale = _number(value), _locale(context)
    form = given.get(locale.plural_form(amount), given["other"])
    return str(form).replace("#", numbers.format_decimal(amount, locale=locale))


_make_range = RangeLiteral._make_range


def _bounded_range(self: RangeLiteral, start: Any, stop: Any) -> range:
    """A range literal of at most LOOP_LIMIT numbers: ``{% assign r = (1..1000000000) %}{{ r | join }}``
    would otherwise spend minutes in a filter, where the loop limit does not look."""
    made = _make_range(self, start, stop)
    if made.stop - made.start > LOOP_LIMIT:  # not len(): a range of 10**100 numbers overflows it
        raise LoopIterationLimitError(f"a range of more than {LOOP_LIMIT} numbers", token=self.token)
    return made


# Notee is python-liquid's only user in its processes, so the bound applies to every range it makes.
RangeLiteral._make_range = _bounded_range  # type: ignore[method-assign]


def _bounded(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` refusing to make a text longer than OUTPUT_LIMIT (the output limit looks only at what is
    written, so ``{{ s | replace: "a", s | replace: "a", s }}`` would otherwise grow 2,000 characters
    to billions before anything is written); ``replace`` is refused before it runs."""

    @wraps(fn)
    def bounded(value: Any, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("replace") and isinstance(value, str) and len(args) >= 2:
            old, new = str(args[0]), str(args[1])
            grows = (value.count(old) if old else len(value) + 1) * max(len(new) - len(old), 0)
            if len(value) + grows > OUTPUT_LIMIT:
                raise OutputStreamLimitError(f"{name} would make more than {OUTPUT_LIMIT} characters", token=None)
        out = fn(value, *args, **kwargs)
        if isinstance(out, str) and len(out) > OUTPUT_LIMIT:
            raise OutputStreamLimitError(f"{name} made more than {OUTPUT_LIMIT} characters", token=None)
        return out

    return bounded


def _environment() -> Environment:
    env = _Env(undefined=Missing, strict_filters=True)
    for tag in _REMOVED_TAGS:
        env.tags.pop(tag, None)
    filters: dict[str, Callable[..., Any]] = {
        "datetime": datetime_filter,
        "number": number_filter,
        "plural": plural_filter,
    }
    env.filters.update(filters)
    for name, fn in list(env.filters.items()):
        env.filters[name] = _bounded(name, fn)
    return env


ENV = _environment()


@dataclass(frozen=True, slots=True)
class Parsed:
    """One field's template: the parsed form, the paths of the values it reads from outside
    (``user.name``, ``items``, ``recipient.name``: first occurrence order) and its filters."""

    template: BoundTemplate
    paths: tuple[str, ...]
    filters: frozenset[str]

    @property
    def recipient_fields(self) -> frozenset[str]:
        """The recipient fields the text depends on (``timezone`` and ``locale`` for a date filter)."""
        used = {p.split(".")[1] for p in self.paths if p.startswith("recipient.") and p.count(".") >= 1}
        if self.paths.count("recipient"):
            used.update(RECIPIENT_FIELDS)
        if self.filters & ZONE_FILTERS:
            used.update(("timezone", "locale"))
        return frozenset(used)


class Tags(dict[str, Any]):
    """``recipient.tags``: a tag the user does not have is nil (``| default:`` fills it), not a
    missing value: users differ in their tags, and a push is not refused for one of them."""

    def __missing__(self, key: str) -> None:
        return None


class TemplateError(ValueError):
    """A field that is not a template Notee renders: the message says why, readably."""


def message_of(exc: LiquidError) -> str:
    """The engine's message without its source excerpt (the 422 names the field instead)."""
    text = str(exc.message if exc.message is not None else exc)
    return text.splitlines()[0] if text else type(exc).__name__


@lru_cache(maxsize=1024)
def parse(text: str) -> Parsed:
    """``text`` parsed, or TemplateError: a syntax error, an unknown filter or tag, a name that is not
    letters, digits and ``_`` (``{{ a-b }}``), or ``{{``/``}}``/``{%``/``%}`` outside of markup."""
    if "{{{" in text or "}}}" in text:
        raise TemplateError("'{{{' or '}}}': a value is written {{ name }}")
    stray = _STRAY.search(_MARKUP.sub("", text))
    if stray is not None:
        raise TemplateError(f"{stray.group(0)!r} outside of {{{{ ... }}}} or {{% ... %}}")
    try:
        template = ENV.from_string(text)
        analysis = template.analyze(include_partials=False)
    except LiquidError as exc:
        raise TemplateError(message_of(exc)) from None
    for name, uses in analysis.variables.items():
        for var in uses:
            for segment in var.segments:
                if isinstance(segment, str) and not _NAME_SEGMENT.match(segment):
                    raise TemplateError(f"{str(var)!r}: a name is letters, digits and _ (like user.name)")
        if not _NAME_SEGMENT.match(name):
            raise TemplateError(f"{name!r}: a name is letters, digits and _ (like user.name)")
    unknown = sorted(set(analysis.filters) - set(ENV.filters))
    if unknown:
        raise TemplateError(f"unknown filter {', '.join(unknown)}")
    paths = tuple(dict.fromkeys(str(v) for uses in analysis.globals.values() for v in uses))
    return Parsed(template, paths, frozenset(analysis.filters))


def reads(texts: Iterable[str]) -> frozenset[str]:
    """The recipient fields these texts read (``Parsed.recipient_fields``); a text that does not
    parse reads nothing (it is refused when saved or rendered)."""
    used: set[str] = set()
    for text in texts:
        try:
            used |= parse(text).recipient_fields
        except TemplateError:
            continue
    return frozenset(used)


def literal_output(text: str) -> str | None:
    """The first ``{{ <literal> }}`` of ``text`` (a literal shown as it is, no value and no filter)."""
    found = _LITERAL_OUTPUT.search(text)
    return found.group(0) if found else None


def nest(values: Mapping[str, Any]) -> dict[str, Any]:
    """Flat request names (``user.name``) as the nested objects Liquid looks into; a plain name and
    a dotted one under it (``user`` and ``user.name``): the dotted one wins."""
    out: dict[str, Any] = {}
    for key in sorted(values, key=lambda k: k.count(".")):
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = values[key]
    return out


@dataclass(frozen=True, slots=True)
class Scope:
    """What a render reads besides the template: the recipient (``recipient.*``: id, name, locale, tags,
    timezone; None: a render for every recipient, whose ``recipient.*`` are empty) and the locale
    numbers and dates are formatted in."""

    recipient: Mapping[str, Any] | None = None
    locale: str | None = None

    def values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The Liquid scope of a render: the nested values, ``recipient``, the formatting locale and zone."""
        who = dict.fromkeys(RECIPIENT_FIELDS, "") | dict(self.recipient or {})
        who["tags"] = Tags(who["tags"] or {})
        locale = who.get("locale") or self.locale or "en"
        return nest(values) | {
            "recipient": who,
            LOCALE_KEY: locale,
            ZONE_KEY: who.get("timezone") or "UTC",
        }


def render_text(parsed: Parsed, scope: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The field rendered with ``scope`` (nested values, ``recipient``, LOCALE_KEY, ZONE_KEY) and the
    names it used that nobody set. TemplateError on a resource limit or a filter's bad input."""
    seen: list[str] = []
    token = _missing.set(seen)
    try:
        text = parsed.template.render(scope)
    except LiquidError as exc:
        raise TemplateError(message_of(exc)) from None
    except (ValueError, ArithmeticError, TypeError) as exc:
        raise TemplateError(str(exc)[:200]) from None
    finally:
        _missing.reset(token)
    return text, list(dict.fromkeys(seen))
