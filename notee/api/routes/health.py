"""Liveness and readiness."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import text

from notee.api.deps import RuntimeDep
from notee.store.runtime import Runtime

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
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
    return Health(status="ok" if m == c == "ok" else "degraded", mysql=m, cassandra=c, emulator_url=emulator_url)


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
async def healthz(runtime: RuntimeDep, request: Request) -> JSONResponse:
    """Ready when both stores answer; 503 with the failing store otherwise. ``emulator_url`` says
    when pushes go to an emulator rather than FCM/APNs."""
    health = await asyncio.to_thread(check_stores, runtime, request.app.state.settings.emulator_url)
    return JSONResponse(health.model_dump(), status_code=200 if health.status == "ok" else 503)
