"""Request-scoped dependencies: the Runtime, one MySQL Session per request, the Cassandra session,
the process's DeliverySender."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

from anyio import to_thread
from fastapi import Depends, Request
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from notee.api.subscribe_groups import SubscribeGroups
from notee.store.runtime import Runtime
from notee.usecases.sender import DeliverySender

log = logging.getLogger(__name__)


# Dependencies that do no I/O are ``async def``: FastAPI runs a plain ``def`` dependency on a worker
# thread, a hop that costs more than the dependency itself.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_db(runtime: RuntimeDep) -> AsyncIterator[Session]:
    """One session per request: the route owns it and commits after its domain call; whatever is
    not committed rolls back when it closes. Opening a session does no I/O, and closing one that
    holds no transaction (committed, or never used) neither: only a rollback goes to a worker thread."""
    session = runtime.sessions()
    try:
        yield session
    finally:
        try:
            if session.in_transaction():
                await to_thread.run_sync(session.close)
            else:
                session.close()
        except DBAPIError as exc:
            # MySQL went away mid-request: the response (503) is already on its way and the pool
            # discards the dead connection; raising here would make the server drop the connection.
            log.warning("mysql session close failed after the response: %s", type(exc).__name__)


DbDep = Annotated[Session, Depends(get_db)]


async def get_subscribe_groups(request: Request) -> SubscribeGroups:
    groups: SubscribeGroups = request.app.state.subscribe_groups
    return groups


SubscribeGroupsDep = Annotated[SubscribeGroups, Depends(get_subscribe_groups)]


async def get_sender(request: Request) -> DeliverySender:
    """The app's DeliverySender (providers, HTTP/2 pools): built by the lifespan, closed by it."""
    sender: DeliverySender = request.app.state.sender
    return sender


SenderDep = Annotated[DeliverySender, Depends(get_sender)]
