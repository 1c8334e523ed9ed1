"""Every route of an app as one flat table (FastAPI nests included routers): what the access log's
route labels (``notee.api.access``) and a 405's ``Allow`` header (``notee.api.errors``) are read from."""

from __future__ import annotations

import re
from typing import Any

from fastapi.routing import iter_route_contexts
from starlette.routing import compile_path


def route_table(app: Any) -> list[tuple[re.Pattern[str], frozenset[str], str]]:
    """(path regex, methods, template) of every route of ``app``, built once per app. FastAPI nests
    included routers, so the flat list comes from its route contexts (each with its full path)."""
    table: list[tuple[re.Pattern[str], frozenset[str], str]] | None = getattr(app.state, "route_table", None)
    if table is None:
        table = []
        for context in iter_route_contexts(app.router.routes):
            if context.path is not None:
                methods = getattr(context.original_route, "methods", None) or ()
                table.append((compile_path(context.path)[0], frozenset(methods), context.path))
        app.state.route_table = table
    return table


def allowed_methods(app: Any, path: str) -> list[str]:
    """Every method ``path`` is served with (RFC 9110 15.5.6: a 405's ``Allow``), sorted: FastAPI
    keeps one route per (path, method), and Starlette's own 405 names only the first route whose
    path matched."""
    return sorted({m for regex, methods, _ in route_table(app) if regex.match(path) for m in methods})
