"""Per-recipient texts of a job whose template depends on the recipient (``recipient.*`` or a date
filter: ``render.depends_on_recipient``): pure, no I/O; the workers' page builder
(``notee/worker/reader.py messages_for``) is its user.

A job made of such a template carries, beside its rendered push (every recipient's fallback), its
sources and values (``personal``: ``render.render_all``). Each recipient's text is rendered from them
with its profile (``notee.store.recipient_sql``: one query per page, and one for their tags when the template reads
``recipient.tags``), cached by what the
template reads of a recipient (its variant, and only the fields it uses: a template that reads only
the time zone renders once per zone and locale, not once per device). A recipient whose text does not
render or is over a provider's size limit gets the fallback (logged): nothing is ever pushed half
rendered.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from notee.core.errors import PayloadTooLarge
from notee.domain import liquid
from notee.domain.render import Rendered, check_size, choose_variant

_LEFTOVER = re.compile(r"\{\{|\}\}")

log = logging.getLogger(__name__)

CACHE_LIMIT = 4096  # distinct renders kept per job (beyond: the cache starts over)
Text = tuple[str, str, dict[str, str]]
# A recipient as a page read finds it: (locale, time zone, name, service user id, tags or None when
# the template reads none); the locale is the device's, else its user's, the zone the user's, else
# the service's.
Profile = tuple[str | None, str | None, str, str, dict[str, Any] | None]
_FIELD_INDEX = {"locale": 0, "timezone": 1, "name": 2, "id": 3, "tags": 4}
_NOBODY: Profile = (None, None, "", "", None)


class Personalizer:
    """One job's per-recipient renderer (made once per job, used for every page)."""

    __slots__ = ("cache", "fallback", "fields", "priority", "slow", "tags", "texts", "ttl", "values")

    def __init__(self, payload: Mapping[str, Any]) -> None:
        personal = payload["personal"]
        self.values: dict[str, Any] = personal["values"]
        self.texts: dict[str, dict[str, Any]] = personal["texts"]
        self.tags = [tag for tag in self.texts if tag]
        self.ttl, self.priority = payload.get("ttl_seconds"), payload.get("priority") or "high"
        default = (payload["title"], payload["body"], payload.get("data") or {})
        variants = payload.get("variants") or {}
        self.fallback: dict[str, Text] = {"": default} | {
            tag: (v["title"], v["body"], v.get("data") or {}) for tag, v in variants.items()
        }
        # The profile positions the cache key takes: only what the template reads.
        self.fields = tuple(sorted(_FIELD_INDEX[f] for f in personal["fields"]))
        self.cache: dict[tuple[Any, ...], Text] = {}
        self.slow = False  # a render hit the time limit: the rest of the job gets the fallback

    def text_for(self, profile: Profile | None) -> Text:
        """The recipient's title, body and data (its variant's, rendered with its profile)."""
        who: Profile = profile or _NOBODY
        tag = choose_variant(who[0], self.tags) or ""
        key = (tag, *(_hashable(who[i]) for i in self.fields))
        hit = self.cache.get(key)
        if hit is None:
            if len(self.cache) >= CACHE_LIMIT:
                self.cache.clear()
            hit = self.cache[key] = self._render(tag, who)
        return hit

    def _render(self, tag: str, who: Profile) -> Text:
        """Only the fields that read the recipient are rendered; the others are the job's (the same
        text for everyone). Missing values, a limit, a filter's error, ``{{``/``}}`` in the result or a
        provider's size limit: the fallback."""
        fallback = self.fallback.get(tag, self.fallback[""])
        if self.slow:
            return fallback
        text = self.texts[tag]
        recipient = {"locale": who[0], "timezone": who[1], "name": who[2], "id": who[3], "tags": who[4]}
        context = liquid.Scope(recipient, tag or None).values(self.values)
        try:
            title = self._field(text["title"], context, fallback[0])
            body = self._field(text["body"], context, fallback[1])
            data = {k: self._field(v, context, fallback[2].get(k, v)) for k, v in (text.get("data") or {}).items()}
            if any(_LEFTOVER.search(t) for t in (title, body, *data.values())):
                raise liquid.TemplateError("a value would put {{ or }} on a device")
            check_size(Rendered(title, body, data, self.ttl, self.priority))
        except liquid.TemplateTimeout as exc:
            # a template slow for one recipient would be as slow for the next: the job's text for all
            log.warning("a recipient's text took too long (%s): every later recipient gets the job's text", exc)
            self.slow = True
            return fallback
        except (liquid.TemplateError, PayloadTooLarge) as exc:
            log.warning("a recipient's text does not render (%s): it gets the job's text", exc)
            return fallback
        return title, body, data

    @staticmethod
    def _field(source: str, context: dict[str, Any], rendered: str) -> str:
        parsed = liquid.parse(source)
        if not parsed.recipient_fields:
            return rendered
        out, missing = liquid.render_text(parsed, context)
        if missing:
            raise liquid.TemplateError(f"missing {', '.join(missing)}")
        return out


def _hashable(value: Any) -> Any:
    """A profile field as part of a cache key (tags: their sorted items)."""
    return tuple(sorted(value.items())) if isinstance(value, dict) else value
