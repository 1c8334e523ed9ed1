"""Liveness and readiness, as Kubernetes probes ask them (docs/API.md "Probes").

- ``/livez``: the process answers; never touches a store, so a MySQL or Cassandra blip does not
  make an orchestrator restart every API process at once (a restart would not bring a store back).
- ``/readyz``: both stores answer; 503 with the failing store otherwise, so a load balancer sends
  requests elsewhere until they do. ``/healthz`` is the same check under its older name.
Both carry Notee's version."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import text

from notee.api.deps import RuntimeDep
from notee.core.version import VERSION
from notee.store.runtime import Runtime

router = APIRouter(tags=["health"])


class Alive(BaseModel):
    status: str = Field(description="Always `ok`: the process answers.")
    version: str = Field(description="Notee's version (semver).")


class Health(BaseModel):
    status: str = Field(description="`ok` when both stores answer, `degraded` otherwise (with 503).")
    version: str = Field(description="Notee's version (semver).")
    mysql: str
    cassandra: str
    emulator_url: str | None = Field(
        description="Set when NOTEE_EMULATOR_URL reroutes every push of every service to this emulator instead of "
        "FCM/APNs; null in production."
    )


def check_stores(runtime: Runtime, emulator_url: str | None) -> Health:
    def probe(fn: Callable[[], None]) -> str:
        try:
            fn()
            return "ok"
        except Exception as exc:  # reported, not raised: this is the health endpoint
            return f"down: {type(exc).__name__}"

    def mysql() -> None:
        with runtime.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def cassandra() -> None:
        runtime.cql.execute("SELECT release_version FROM system.local", timeout=3)

    m, c = probe(mysql), probe(cassandra)
    status = "ok" if m == c == "ok" else "degraded"
    return Health(status=status, version=VERSION, mysql=m, cassandra=c, emulator_url=emulator_url)


@router.get("/livez", response_model=Alive)
async def livez() -> Alive:
    """Liveness: 200 while the process answers. It reads no store (a store outage must not restart
    the API processes: docs/API.md "Probes")."""
    return Alive(status="ok", version=VERSION)


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
async def readyz(runtime: RuntimeDep, request: Request) -> JSONResponse:
    """Readiness: 200 when both stores answer; 503 with the failing store otherwise.
    ``emulator_url`` says when pushes go to an emulator rather than FCM/APNs."""
    return await _ready(runtime, request)


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
async def healthz(runtime: RuntimeDep, request: Request) -> JSONResponse:
    """The readiness check under its older name (``/readyz``): 200 when both stores answer, 503
    with the failing store otherwise."""
    return await _ready(runtime, request)


async def _ready(runtime: Runtime, request: Request) -> JSONResponse:
    health = await asyncio.to_thread(check_stores, runtime, request.app.state.settings.emulator_url)
    return JSONResponse(health.model_dump(), status_code=200 if health.status == "ok" else 503)
