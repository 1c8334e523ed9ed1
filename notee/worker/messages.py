"""What turns a page of recipients into messages (``messages_for``): pure, no I/O. Every recipient
gets the job's rendered payload, or its locale's variant, or (a template that reads the recipient)
its own text; the rich fields are mapped once per page (docs/FANOUT.md, docs/PAYLOADS.md,
docs/TEMPLATES.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from notee.core import notification_id
from notee.core.vocabulary import OS, TOKEN, USER, RecipientRow
from notee.domain.personal import Personalizer
from notee.domain.render import choose_variant
from notee.providers.base import Message
from notee.providers.payload import Rich


def messages_for(
    page: Sequence[RecipientRow],
    payload: dict[str, Any],
    locales: dict[tuple[str, str], Any] | None = None,
    source: str = "",
) -> list[Message]:
    """One page's messages (pure, no I/O): every recipient gets the job's rendered payload, or, when
    the template has locale variants, the variant its locale (``locales``: (user_id, device_token) ->
    tag) matches best; nothing is rendered here, unless the template depends on the recipient
    (``personal`` in the payload; ``locales`` then holds profiles). The rich fields (``rich``,
    docs/PAYLOADS.md) are mapped once per page into one ``Rich`` every message of the page shares.
    ``source``: the job's part of the notification id (``notification_id.source_of_job``); "": none."""
    if "personal" in payload:
        return _personal_messages(page, payload, locales or {}, source)
    ttl, priority = payload.get("ttl_seconds"), payload.get("priority") or "high"
    default = (payload["title"], payload["body"], payload.get("data") or {})
    variants: dict[str, dict[str, Any]] = payload.get("variants") or {}
    rich = Rich.from_spec(payload.get("rich"))
    collapse = rich.collapse_key if rich is not None else None
    if not variants or not locales:
        title, body, data = default
        return [
            Message(r[TOKEN], r[OS], title, body, data, ttl, priority, collapse, rich, _nid(source, r)) for r in page
        ]
    by_locale: dict[str | None, tuple[str, str, dict[str, str]]] = {None: default}
    out = []
    for r in page:
        locale = locales.get((r[USER], r[TOKEN]))
        text = by_locale.get(locale)
        if text is None:
            tag = choose_variant(locale, variants)
            v = variants[tag] if tag is not None else None
            text = by_locale[locale] = default if v is None else (v["title"], v["body"], v.get("data") or {})
        out.append(Message(r[TOKEN], r[OS], text[0], text[1], text[2], ttl, priority, collapse, rich, _nid(source, r)))
    return out


_PERSONALIZERS: dict[int, tuple[dict[str, Any], Personalizer]] = {}  # by id(payload): one per job's task


def _nid(source: str, r: RecipientRow) -> str:
    return notification_id.make(source, r[TOKEN]) if source else ""


def _personal_messages(
    page: Sequence[RecipientRow], payload: dict[str, Any], profiles: dict[tuple[str, str], Any], source: str
) -> list[Message]:
    """A page of a template rendered per recipient: each recipient's text from its profile (cached
    by the fields the template reads: ``Personalizer``)."""
    held = _PERSONALIZERS.get(id(payload))
    if held is None or held[0] is not payload:
        if len(_PERSONALIZERS) >= 64:  # tasks that ended: forget the oldest
            del _PERSONALIZERS[next(iter(_PERSONALIZERS))]
        held = _PERSONALIZERS[id(payload)] = (payload, Personalizer(payload))
    personal = held[1]
    ttl, priority = personal.ttl, personal.priority
    rich = Rich.from_spec(payload.get("rich"))
    collapse = rich.collapse_key if rich is not None else None
    out = []
    for r in page:
        title, body, data = personal.text_for(profiles.get((r[USER], r[TOKEN])))
        out.append(Message(r[TOKEN], r[OS], title, body, data, ttl, priority, collapse, rich, _nid(source, r)))
    return out
