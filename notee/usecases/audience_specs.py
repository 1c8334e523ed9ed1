"""What an audience job (a filter or segments) keeps of its audience: the spec its stored target
holds, made when the job is made (docs/AUDIENCES.md): the filter as asked and its parsed, normalised
form; or the segments named and a snapshot of their definitions, so a segment changed or deleted
later does not change the job."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from notee.core.audience import Audience, audience_to_json
from notee.domain import segments
from notee.domain.filters import parse_filter


def audience_spec(session: Session, service: str, name: str, value: Any) -> dict[str, Any]:
    """The stored spec of a ``filter`` (``value``: the request's groups) or ``segments`` target
    (``value``: ``{"include": [...], "exclude": [...]}``). InvalidInput (422) for a malformed
    filter, naming its part, or an unknown segment, naming it."""
    if name == "filter":
        parsed = parse_filter(value, ("body", "filter"))
        return {"filter": value, "audience": audience_to_json(Audience((parsed,)))}
    include, exclude = list(value["include"]), list(value.get("exclude") or [])
    audience = segments.audience_of(session, service, include, exclude)  # 422 naming unknown names
    return {"segments": {"include": include, "exclude": exclude}, "audience": audience_to_json(audience)}
