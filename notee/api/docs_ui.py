"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with every asset served by Notee itself, so the API
documentation works on a host without internet (FastAPI's own pages load both from a public CDN).

The assets come from the ``fastapi-offline`` distribution on PyPI (MIT), which ships Swagger UI's
``swagger-ui-bundle.js``/``swagger-ui.css`` (Apache-2.0) and ReDoc's ``redoc.standalone.js`` (MIT)
as package data; upgrading that pin upgrades both (docs/API.md, "Offline documentation"). Only its
files are used: the pages are FastAPI's own ``get_swagger_ui_html``/``get_redoc_html`` pointed at
``/docs-assets/``. Swagger UI's online validator badge is switched off (it would call out).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

ASSETS_URL = "/docs-assets"
ASSETS_DIR = Path(str(files(fastapi_offline.__name__) / "static"))


def install(app: FastAPI) -> None:
    """Mount the assets and add ``/docs`` and ``/redoc`` (the app is made with both URLs off)."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            oauth2_redirect_url=None,
            swagger_ui_parameters={"validatorUrl": None},  # no call to swagger.io's online validator
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
