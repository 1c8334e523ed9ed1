"""Request-scoped dependencies: the Runtime, one MySQL Session per request, the Cassandra session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from cassandra.cluster import Session as CqlSession
from fastapi import Depends, Request
from sqlalchemy.orm import Session

from notee.runtime import Runtime


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_db(runtime: RuntimeDep) -> Iterator[Session]:
    """One session per request; the route's domain call commits, anything else rolls back."""
    with runtime.sessions() as session:
        yield session


DbDep = Annotated[Session, Depends(get_db)]


def get_cql(runtime: RuntimeDep) -> CqlSession:
    return runtime.cql


CqlDep = Annotated[CqlSession, Depends(get_cql)]
