"""What an audience job (a filter or segments) keeps of its audience: the spec its stored target
holds, snapshotted when the job is made (docs/AUDIENCES.md "Segments")."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from notee.core.errors import InvalidInput


def audience_spec(session: Session, service: str, name: str, value: Any) -> dict[str, Any]:
    """The stored spec of a ``filter`` or ``segments`` target."""
    del session, service, value
    raise InvalidInput(
        f"{name} targets are not available yet", details=[{"loc": ["body", name], "type": "unsupported"}]
    )
