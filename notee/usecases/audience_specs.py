"""What an audience job (a filter or segments) keeps of its audience: the spec its stored target
holds, made when the job is made (docs/AUDIENCES.md): the filter as asked and its parsed, normalised
form; or the segments named and a snapshot of their definitions, so a segment changed or deleted
later does not change the job."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from notee.core.audience import Audience, audience_to_json
from notee.core.errors import InvalidInput
from notee.domain.filters import parse_filter
from notee.store import audience_users_sql


def audience_spec(session: Session, service: str, name: str, value: Any) -> dict[str, Any]:
    """The stored spec of a ``filter`` (``value``: the request's groups) or ``segments`` target
    (``value``: ``{"include": [...], "exclude": [...]}``). InvalidInput (422) for a malformed
    filter, naming its part, or an unknown segment, naming it."""
    if name == "filter":
        parsed = parse_filter(value, ("body", "filter"))
        return {"filter": value, "audience": audience_to_json(Audience((parsed,)))}
    include, exclude = list(value["include"]), list(value.get("exclude") or [])
    stored = audience_users_sql.segment_filters(session, service, sorted(set(include + exclude)))
    unknown = [
        {"loc": ["body", "segments", side, i], "type": "unknown_segment", "msg": f"no segment {n!r}"}
        for side, names in (("include", include), ("exclude", exclude))
        for i, n in enumerate(names)
        if n not in stored
    ]
    if unknown:
        raise InvalidInput(f"segments: {unknown[0]['msg']}", details=unknown)
    definitions = {n: parse_filter(stored[n], ("segment", n, "filter")) for n in stored}
    audience = Audience(tuple(definitions[n] for n in include), tuple(definitions[n] for n in exclude))
    return {"segments": {"include": include, "exclude": exclude}, "audience": audience_to_json(audience)}
