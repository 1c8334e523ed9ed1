"""Templates: a service's notification templates by (method, type), their text per locale
(variants) and the cache version every write bumps (services: ``notee/domain/services.py``;
rendering: ``notee/domain/render.py``; input rules: ``notee/domain/rules.py``). Each function takes
the caller's Session and the process's ``Statements`` (the version counters and the subscriptions
live in Cassandra), checks its input with the rules, and writes in the caller's transaction: the
caller commits (docs/ARCHITECTURE.md, "Unit of work").

Tenant isolation: every query is scoped by ``service``; another tenant's template is NotFound.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from notee.core.clock import aware_utc, stored_now
from notee.core.errors import NotFound, PayloadTooLarge
from notee.core.vocabulary import METHODS, PRIORITIES
from notee.domain import payloads, render, subscriptions
from notee.domain.rules import (
    MAX_TEMPLATE_BYTES,
    MAX_VARIANTS,
    TYPE_RE,
    bad,
    check_choice,
    check_data,
    check_locale,
    check_pattern,
    check_text,
    check_ttl,
    template_size,
)
from notee.store import templates_sql as store
from notee.store.cql.statements import Statements
from notee.store.mysql import AnyRow
from notee.store.templates_sql import TemplateRow


@dataclass(frozen=True)
class Template:
    method: str
    type: str
    title: str
    body: str
    data: dict[str, str] | None
    defaults: dict[str, str] | None
    ttl_seconds: int | None
    priority: str
    notification_key: str
    version: int
    created_at: datetime
    updated_at: datetime
    created: bool = False
    variants: dict[str, dict[str, Any]] | None = None
    quiet_hours: str = "hold"
    payload: dict[str, Any] | None = None  # the rich fields (docs/PAYLOADS.md)

    def content(self) -> render.TemplateContent:
        """What the renderer needs of this template."""
        return render.TemplateContent(
            self.title,
            self.body,
            self.data,
            self.defaults,
            self.ttl_seconds,
            self.priority,
            render.variants_from_json(self.variants),
        )


@dataclass(frozen=True, slots=True)
class TemplateInput:
    """A template's content as a request gives it (the API's body, the console's form), before the
    rules check it. ``variants``: {BCP 47 tag: {title, body, data?}}, the text per locale;
    ``quiet_hours``: what a push due inside a recipient's quiet hours does, ``hold`` or ``drop``."""

    title: str
    body: str
    data: dict[str, str] | None = None
    defaults: dict[str, str] | None = None
    ttl_seconds: int | None = None
    priority: str = "high"
    variants: dict[str, dict[str, Any]] | None = None
    quiet_hours: str = "hold"
    payload: dict[str, Any] | None = None


def _template(row: AnyRow, version: int, created: bool = False) -> Template:
    return Template(
        row.notification_method,
        row.notification_type,
        row.title,
        row.body,
        row.data,
        row.defaults,
        row.ttl_seconds,
        row.priority,
        row.notification_key,
        version,
        aware_utc(row.created_at),
        aware_utc(row.updated_at),
        created,
        row.variants,
        row.quiet_hours,
        row.payload,
    )


def _check_template_id(method: Any, type_: Any) -> None:
    check_choice("method", method, METHODS)
    check_pattern("type", type_, TYPE_RE, "1..64 of letters, digits, _ . -")


def put_template(
    session: Session, st: Statements, service: str, method: str, type_: str, given: TemplateInput
) -> Template:
    """Create or update. notification_key is created once and never changes; every write bumps the
    cache version counter before the caller commits: a counter timeout is reported (never retried)
    and the write is not committed, so no template changes without its version; a commit that
    fails after the bump costs one needless cache reload. Placeholders and defaults follow
    notee/domain/render.py (a CYCLE template needs a default for each placeholder); variant tags
    are canonicalised."""
    _check_template_id(method, type_)
    checked = _checked_row(service, method, type_, given)
    new_key = str(uuid.uuid4())
    row = store.upsert_template(session, checked, new_key=new_key, now=stored_now())
    created = row.notification_key == new_key
    if created:
        # A new template: every slot row it will ever have is written with its target_slots row, so
        # its jobs may walk only the occupied slots (docs/FANOUT.md "Occupancy"). Before the commit:
        # no subscription can exist yet; a failed commit leaves a marker no template has (harmless).
        st.mark_occupancy_known(new_key, "created")
    st.add_version(service, method, type_)  # counter: never retried on timeout
    version = st.counters(service, method, type_)[0]
    return _template(row, version, created=created)


def _checked_row(service: str, method: str, type_: str, given: TemplateInput) -> TemplateRow:
    """The row ``given`` writes once the rules pass it (checked in this order: the first failure is
    the one reported): payload, text, data, ttl, priority, variants, quiet_hours, then the placeholders
    (``render.check_template``, the payload's text fields too) and the size of each locale's text.
    A background or badge-only push may have an empty title and body (a background one must)."""
    payload = payloads.check_payload(given.payload)
    text_min = 1 if payloads.needs_text(payload) else 0
    check_text("title", given.title, min_len=text_min, max_len=200)
    check_text("body", given.body, min_len=text_min, max_len=2000, newlines=True)
    payloads.check_text_for_kind(payload, given.title, given.body)
    data = check_data(given.data)
    ttl_seconds = check_ttl(given.ttl_seconds)
    check_choice("priority", given.priority, PRIORITIES)
    variants = _check_variants(given.variants)
    if variants and payload and payload.get("kind") == "background":
        raise bad("variants", "a background push has no text to translate", "background")
    check_choice("quiet_hours", given.quiet_hours, ("hold", "drop"))
    payloads.check_template(
        method,
        render.TemplateContent(
            given.title,
            given.body,
            data,
            given.defaults,
            ttl_seconds,
            given.priority,
            render.variants_from_json(variants),
        ),
        payload,
    )
    _check_sizes(given.title, given.body, data, variants)
    return TemplateRow(
        service,
        method,
        type_,
        given.title,
        given.body,
        data=data,
        defaults=dict(given.defaults) if given.defaults else None,
        variants=variants,
        ttl_seconds=ttl_seconds,
        priority=given.priority,
        quiet_hours=given.quiet_hours,
        payload=payload,
    )


def _check_sizes(
    title: str, body: str, data: dict[str, str] | None, variants: dict[str, dict[str, Any]] | None
) -> None:
    """PayloadTooLarge when the template's text, or one variant's (its data over the template's),
    takes more than MAX_TEMPLATE_BYTES."""
    for where, (t, b, d) in [("", (title, body, data))] + [
        (f"variants.{tag}: ", (v["title"], v["body"], {**(data or {}), **(v.get("data") or {})}))
        for tag, v in (variants or {}).items()
    ]:
        size = template_size(t, b, d)
        if size > MAX_TEMPLATE_BYTES:
            raise PayloadTooLarge(
                f"{where}title + body + data take {size} bytes; at most {MAX_TEMPLATE_BYTES}",
                details=[{"loc": ["body"], "type": "payload_too_large", "msg": "template too large"}],
            )


def _check_variants(variants: Any) -> dict[str, dict[str, Any]] | None:
    """A template's locale variants: at most MAX_VARIANTS, BCP 47 keys (canonicalised, distinct),
    each {title, body, data?, subtitle?} under the template's own text rules (``subtitle``: this
    locale's ``payload.ios.subtitle``). None or {}: no variants."""
    if variants is None or variants == {}:
        return None
    if not isinstance(variants, dict):
        raise bad("variants", "must be an object of locale -> {title, body, data}", "dict_type")
    if len(variants) > MAX_VARIANTS:
        raise bad("variants", f"at most {MAX_VARIANTS} locales")
    out: dict[str, dict[str, Any]] = {}
    for tag, v in variants.items():
        key = check_locale(tag, f"variants.{str(tag)[:40]}")
        if key in out:
            raise bad(
                f"variants.{str(tag)[:40]}",
                f"the same locale as another key ({key}; tags are case-insensitive)",
                "duplicate",
            )
        if not isinstance(v, dict) or set(v) - {"title", "body", "data", "subtitle"}:
            raise bad(f"variants.{key}", "must be an object with title, body, optional data and subtitle", "dict_type")
        check_text(f"variants.{key}.title", v.get("title"), min_len=1, max_len=200)
        check_text(f"variants.{key}.body", v.get("body"), min_len=1, max_len=2000, newlines=True)
        vdata = check_data(v.get("data"))
        out[key] = {"title": v["title"], "body": v["body"], **({"data": vdata} if vdata else {})}
        if v.get("subtitle") is not None:  # this locale's payload.ios.subtitle
            out[key]["subtitle"] = check_text(f"variants.{key}.subtitle", v["subtitle"], min_len=1, max_len=200)
    return out


def get_template(session: Session, st: Statements, service: str, method: str, type_: str) -> Template:
    _check_template_id(method, type_)
    row = store.get_template(session, service, method, type_)
    if row is None:
        raise NotFound("template not found")
    return _template(row, st.counters(service, method, type_)[0])


def list_templates(session: Session, st: Statements, service: str) -> list[Template]:
    rows = store.list_templates(session, service)
    versions = st.versions(service) if rows else {}
    return [_template(r, versions.get((r.notification_method, r.notification_type), 0)) for r in rows]


def delete_template(session: Session, st: Statements, service: str, method: str, type_: str) -> None:
    """Deletes the template (when the caller commits) and disables its subscriptions (Cassandra
    first: see ``subscriptions.on_template_deleted``). The counters stay (``no`` must never go
    backwards if the template is created again)."""
    _check_template_id(method, type_)
    row = store.get_template(session, service, method, type_)
    if row is None:
        raise NotFound("template not found")
    subscriptions.on_template_deleted(st, service, method, type_, row.notification_key)
    store.delete_template(session, service, method, type_)
