"""What turns a page of recipients into messages (``messages_for``): pure, no I/O. Every recipient
gets the job's rendered payload, or its locale's variant, or (a template that reads the recipient)
its own text; the rich fields are mapped once per page (docs/FANOUT.md, docs/PAYLOADS.md,
docs/TEMPLATES.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from notee.core import notification_id
from notee.core.vocabulary import OS, TOKEN, USER, RecipientRow
from notee.domain.payload_variants import for_variant
from notee.domain.personal import Personalizer
from notee.domain.render import choose_variant
from notee.providers.base import Message
from notee.providers.payload import Rich
from notee.store.page_holds_sql import PageHold


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
    riches = _Riches(payload)
    rich = riches.of(None)
    collapse = rich.collapse_key if rich is not None else None
    if not variants or not locales:
        title, body, data = default
        if not source:
            return [Message(r[TOKEN], r[OS], title, body, data, ttl, priority, collapse, rich) for r in page]
        # the hot path (a plain publish): the id's source and the hash are bound once per page
        prefix, device = source + ".", notification_id.device_part
        return [
            Message(r[TOKEN], r[OS], title, body, data, ttl, priority, collapse, rich, prefix + device(r[TOKEN]))
            for r in page
        ]
    by_locale: dict[str | None, tuple[tuple[str, str, dict[str, str]], Rich | None]] = {None: (default, rich)}
    out = []
    for r in page:
        locale = locales.get((r[USER], r[TOKEN]))
        held = by_locale.get(locale)
        if held is None:
            tag = choose_variant(locale, variants)
            v = variants[tag] if tag is not None else None
            text = default if v is None else (v["title"], v["body"], v.get("data") or {})
            held = by_locale[locale] = (text, riches.of(tag))
        (title, body, data), its = held
        out.append(Message(r[TOKEN], r[OS], title, body, data, ttl, priority, collapse, its, _nid(source, r)))
    return out


def not_yet_sent(messages: list[Message], hold: PageHold) -> tuple[list[Message], int]:
    """The messages of a page held in a provider outage (``hold``) still to send: not those done before
    (``hold.done``), nor those whose ``ttl_seconds`` passed since the page was first tried (a push past
    its TTL is worthless: counted in ``ttl_expired``, never sent or dead-lettered); and how many expired."""
    done, held_for = hold.done, hold.held_for_s
    left = [m for m in messages if m.device_token not in done]
    fresh = [m for m in left if m.ttl_seconds is None or held_for < m.ttl_seconds]
    return fresh, len(left) - len(fresh)


class _Riches:
    """The rich fields of one page per variant: the job's ``rich``, or with a variant's own
    ``subtitle`` over it (docs/PAYLOADS.md "Per locale"); each mapped once."""

    __slots__ = ("cache", "spec", "variants")

    def __init__(self, payload: dict[str, Any]) -> None:
        self.spec: dict[str, Any] | None = payload.get("rich")
        self.variants: dict[str, dict[str, Any]] = payload.get("variants") or {}
        self.cache: dict[str | None, Rich | None] = {}

    def of(self, tag: str | None) -> Rich | None:
        if tag not in self.cache:
            subtitle = self.variants.get(tag, {}).get("subtitle") if tag else None
            self.cache[tag] = Rich.from_spec(for_variant(self.spec, subtitle))
        return self.cache[tag]


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
    riches = _Riches(payload)
    rich = riches.of(None)
    collapse = rich.collapse_key if rich is not None else None
    out = []
    for r in page:
        profile = profiles.get((r[USER], r[TOKEN]))
        title, body, data = personal.text_for(profile)
        its = riches.of(choose_variant(profile[0], personal.tags)) if profile and riches.variants else rich
        out.append(Message(r[TOKEN], r[OS], title, body, data, ttl, priority, collapse, its, _nid(source, r)))
    return out
