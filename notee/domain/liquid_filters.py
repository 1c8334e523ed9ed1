"""Notee's own Liquid filters (docs/TEMPLATES.md): ``number``, ``datetime`` and ``plural``, in the
render's locale (CLDR, by babel) and the recipient's time zone; ``notee/domain/liquid.py`` installs
them in its environment. Pure functions, no I/O."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from babel import Locale, UnknownLocaleError, dates, numbers
from liquid import RenderContext
from liquid.filter import with_context
from liquid.undefined import Undefined

# The render's formatting locale and zone: keys no Liquid name can spell (":" is not in its grammar).
LOCALE_KEY, ZONE_KEY = "notee:locale", "notee:zone"


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
