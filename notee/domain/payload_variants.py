"""A locale variant's own rich fields (docs/PAYLOADS.md "Per locale"): today ``subtitle``, the
variant's ``payload.ios.subtitle``. Checked when the template is saved (the placeholder rules of the
payload's text fields), rendered once per job or send with the same variables and defaults as the
title, and applied to the payload of the recipients of that variant. Pure functions, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from notee.core.errors import InvalidInput
from notee.domain import render


def subtitles(variants: Mapping[str, render.Variant] | None) -> dict[str, str]:
    """{tag: subtitle source} of the variants that have their own subtitle."""
    return {tag: v.subtitle for tag, v in (variants or {}).items() if v.subtitle is not None}


def _relocated(exc: InvalidInput) -> InvalidInput:
    """render's problems of a subtitle (rendered as data, ``loc`` body.data.<tag>) as problems of
    variants.<tag>.subtitle; missing variables keep their ``loc``."""
    details = []
    for d in exc.details:
        loc = list(d.get("loc", []))
        if loc[:2] == ["body", "data"] and len(loc) == 3:
            loc = ["body", "variants", str(loc[2]), "subtitle"]
        details.append({**d, "loc": loc})
    return InvalidInput(exc.message.replace("data.", "variants.subtitle of "), details=details)


def check(method: str, content: render.TemplateContent) -> set[str]:
    """The variants' subtitles follow the placeholder rules of the payload's text fields (422
    naming ``variants.<tag>.subtitle``); answers the names they read (so their defaults are used)."""
    found = subtitles(content.variants)
    if not found:
        return set()
    try:
        render.check_template(method, render.TemplateContent("", "", found, content.defaults, None, "high"))
    except InvalidInput as exc:
        real = [d for d in exc.details if d.get("type") != "unused_default"]
        if real:
            raise _relocated(InvalidInput(exc.message, details=real)) from None
    return {name for text in found.values() for name in render.placeholders(text)}


def render_subtitles(content: render.TemplateContent, variables: Mapping[str, Any] | None) -> dict[str, str]:
    """{tag: rendered subtitle} of the variants that have one, filled like the title (every missing
    variable in one InvalidInput whose details have ``type`` missing)."""
    found = subtitles(content.variants)
    if not found:
        return {}
    try:
        return render.render(render.TemplateContent("", "", found, content.defaults, None, "high"), variables).data
    except InvalidInput as exc:
        if all(d.get("type") == "missing" for d in exc.details):
            raise
        raise _relocated(exc) from None


def for_variant(spec: Mapping[str, Any] | None, subtitle: str | None) -> dict[str, Any] | None:
    """The payload a variant's recipients get: ``spec`` with the variant's rendered subtitle (None:
    ``spec`` as it is)."""
    if subtitle is None:
        return dict(spec) if spec else None
    out = dict(spec or {})
    out["ios"] = {**(out.get("ios") or {}), "subtitle": subtitle}
    return out


def with_missing(first: Any, second: Any) -> tuple[Any, Any]:
    """``first()`` and ``second()``, both run: when both miss variables, one InvalidInput lists
    every missing one (the renderer's rule); any other problem is raised as it is."""
    results: list[Any] = []
    missing: list[dict[str, Any]] = []
    for call in (first, second):
        try:
            results.append(call())
        except InvalidInput as exc:
            if not exc.details or not all(d.get("type") == "missing" for d in exc.details):
                raise
            missing.extend(d for d in exc.details if d not in missing)
            results.append(None)
    if missing:
        names = list(dict.fromkeys(str(d["loc"][-1]) for d in missing))
        raise InvalidInput(f"missing template variable(s): {', '.join(names)}", details=missing)
    return results[0], results[1]
