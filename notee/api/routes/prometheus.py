"""``GET /metrics``: the process's Prometheus metrics (notee/core/metrics.py), in the text exposition format.

Served where the admin API is served (the single listener, or the admin listener when
``NOTEE_API_ADMIN_PORT`` splits them; never on a tenant-only listener) and only with the admin
token: the labels name every service and its volumes, which no tenant may see. Prometheus sends the
token with ``authorization: {credentials_file: ...}`` (deploy/prometheus/prometheus.yml). Not in the
OpenAPI document: it is not a JSON API.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from notee.api.auth import AdminDep

router = APIRouter()


@router.get("/metrics", include_in_schema=False, dependencies=[AdminDep])
async def scrape() -> Response:
    # in a thread: the job queue's levels are one MySQL read
    body = await asyncio.to_thread(generate_latest, REGISTRY)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
