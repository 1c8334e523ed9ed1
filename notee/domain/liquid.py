"""The template language: Liquid (python-liquid), sandboxed and bounded, with Notee's filters
(``notee/domain/liquid_filters.py``, docs/TEMPLATES.md). Pure functions, no I/O; ``notee/domain/render.py`` is its one user.

Sandboxed by the language: a template reads only the values it is given (request variables,
defaults, ``recipient``) by item lookup, never a Python attribute; ``include``/``render`` (files),
``tablerow`` (HTML) and ``{% raw %}`` (literal braces, which no push may carry) are not tags here.
Bounded: each field's render stops at LOOP_LIMIT loop iterations in total, OUTPUT_LIMIT characters of
output, LOCALS_LIMIT bytes of ``assign``/``capture`` values, NESTING_LIMIT nested blocks and
TIME_LIMIT_S seconds of its thread's CPU time; an input is at most 2,000 characters
(tests/unit/test_templates_logic.py runs hostile templates).

Missing values: a name the request, the defaults and the recipient all leave unset renders as
nothing but is recorded when it is output, looped over or given to a filter (``Missing``): the
renderer reports every such name at once; ``{% if name %}`` and ``| default:`` test it freely.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache, wraps
from time import thread_time
from typing import Any

from liquid import BoundTemplate, Environment, RenderContext
from liquid.builtin.expressions.primitive import RangeLiteral
from liquid.exceptions import LiquidError, LoopIterationLimitError, OutputStreamLimitError
from liquid.undefined import Undefined

from notee.domain.liquid_filters import LOCALE_KEY, ZONE_KEY, datetime_filter, number_filter, plural_filter

LOOP_LIMIT = 1000  # loop iterations of one field's render, nested loops multiplied
# CPU seconds one field's render may take: the limits above bound each kind of work, not what a loop
# of filter chains adds up to (a field renders in well under a millisecond, the hostile templates
# that hit another limit in 0.1 s, over 0.25 s on a loaded 2-core machine: docs/TEMPLATES.md). CPU
# time of the rendering thread, not the wall clock: on a loaded machine a 30 µs render can wait
# over a second for a core (seen at load 29 on 2 cores), and the limit is for hostile templates,
# not unlucky ones.
TIME_LIMIT_S = 1.0
# The thread's CPU clock is a system call (about 0.8 µs, five times monotonic's), so it is read at
# every CLOCK_EVERY-th check point, first at the CLOCK_EVERY-th: a render of fewer check points (an
# ordinary template has a handful) never reads it, and a hostile one overruns by at most that many.
CLOCK_EVERY = 16
OUTPUT_LIMIT = 8192  # characters one field may render to (a push is at most 4,096 bytes)
LOCALS_LIMIT = 16384  # bytes of assign/capture values
NESTING_LIMIT = 10  # nested blocks (if, for, case, ...)
_REMOVED_TAGS = ("include", "render", "tablerow", "ifchanged")
# What the recipient offers a template: ``recipient.<field>`` (docs/TEMPLATES.md).
RECIPIENT_FIELDS = ("id", "name", "locale", "timezone", "tags")
# Filters whose output depends on the recipient's time zone: a template using one renders per recipient.
ZONE_FILTERS = frozenset({"datetime"})
_NAME_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MARKUP = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
_STRAY = re.compile(r"\{\{|\}\}|\{%|%\}")
# An output of a bare literal (``{{ 1 }}``, ``{{ "x" }}``): no value, no filter, most likely a typo.
_LITERAL_OUTPUT = re.compile(
    r"\{\{-?\s*(?:-?\d+(?:\.\d+)?|'[^']*'|\"[^\"]*\"|true|false|nil|null|empty|blank|\([^)]*\))\s*-?\}\}"
)

_missing: ContextVar[list[str] | None] = ContextVar("notee_liquid_missing", default=None)


class RenderTimeLimitError(LiquidError):
    """A render went on longer than TIME_LIMIT_S (``_on_time``)."""


class _Budget:
    """One render's time budget: check points until the next clock read, and the CPU-time deadline
    (None until the first read)."""

    __slots__ = ("countdown", "deadline")

    def __init__(self) -> None:
        self.countdown = CLOCK_EVERY
        self.deadline: float | None = None


_budget: ContextVar[_Budget | None] = ContextVar("notee_liquid_budget", default=None)


def _on_time() -> None:
    """RenderTimeLimitError once the current render has spent its CPU time: counted at every variable
    lookup, filter call and loop (the points every long render passes through over and over), the
    clock read at every CLOCK_EVERY-th."""
    budget = _budget.get()
    if budget is None:
        return
    budget.countdown -= 1
    if budget.countdown > 0:
        return
    budget.countdown = CLOCK_EVERY
    now = thread_time()
    if budget.deadline is None:
        budget.deadline = now + TIME_LIMIT_S
    elif now > budget.deadline:
        raise RenderTimeLimitError(f"the render took longer than {TIME_LIMIT_S:g} s", token=None)


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


class _Context(RenderContext):
    """The render context with the time limit (``BoundTemplate.context_class`` is python-liquid's
    documented way to use a subclass)."""

    def get(self, path: Any, *args: Any, **kwargs: Any) -> object:
        _on_time()
        return super().get(path, *args, **kwargs)

    def raise_for_loop_limit(self, length: int = 1) -> None:
        _on_time()
        super().raise_for_loop_limit(length)


class _Template(BoundTemplate):
    context_class = _Context


class _Env(Environment):
    template_class = _Template
    loop_iteration_limit = LOOP_LIMIT
    output_stream_limit = OUTPUT_LIMIT
    local_namespace_limit = LOCALS_LIMIT
    block_nesting_limit = NESTING_LIMIT
    context_depth_limit = NESTING_LIMIT


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
        _on_time()
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


class TemplateTimeout(TemplateError):
    """A render stopped at TIME_LIMIT_S."""


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
    names it used that nobody set. TemplateError on a resource limit (TIME_LIMIT_S included) or a
    filter's bad input."""
    seen: list[str] = []
    token, timer = _missing.set(seen), _budget.set(_Budget())
    try:
        text = parsed.template.render(scope)
    except RenderTimeLimitError as exc:
        raise TemplateTimeout(message_of(exc)) from None
    except LiquidError as exc:
        raise TemplateError(message_of(exc)) from None
    except (ValueError, ArithmeticError, TypeError) as exc:
        raise TemplateError(str(exc)[:200]) from None
    finally:
        _missing.reset(token)
        _budget.reset(timer)
    return text, list(dict.fromkeys(seen))
