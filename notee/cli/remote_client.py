"""What the `notee` commands that call a running Notee over HTTP share: the SDK client from the
environment (``NOTEE_URL`` plus ``NOTEE_API_KEY`` or ``NOTEE_ADMIN_TOKEN``), failures as one line
and exit 1, ``KEY=VALUE`` options, ``--send-at`` times and JSON lines (notee.cli.remote).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NoReturn

import typer

SEND_AT_HELP = "Send then, not now: RFC 3339 with its offset, e.g. 2026-12-01T09:00:00+09:00 (a scheduled job)."


@contextmanager
def sdk_client() -> Iterator[Any]:
    """An SDK client from the environment; every error becomes one line and exit code 1."""
    try:
        # deferred: the SDK is its own distribution (clients/python), needed only by these commands.
        import httpx
        from notee_client import Client, NoteeError
    except ImportError:
        fail("the Notee SDK is not installed: pip install ./clients/python")
    try:
        sdk = Client(max_retries=2)
    except ValueError as exc:
        fail(f"{exc}; e.g. NOTEE_URL=http://127.0.0.1:8080")
    try:
        with sdk:
            yield sdk
    except NoteeError as exc:
        detail = "; ".join(_detail(d) for d in exc.details[:3])
        fail(f"{exc.status} {exc.code}: {exc.message}" + (f" ({detail})" if detail else ""))
    except httpx.HTTPError as exc:
        fail(f"cannot reach Notee at {sdk._policy.base_url}: {exc or type(exc).__name__}")


def _detail(detail: Any) -> str:
    if isinstance(detail, dict):
        loc = ".".join(str(p) for p in detail.get("loc", []) if p not in ("body", "query", "path"))
        return f"{loc}: {detail.get('msg', '')}" if loc else str(detail.get("msg", detail))
    return str(detail)


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def pairs(values: list[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; a value may itself contain '='."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=what)
        out[key] = value
    return out


def print_json(model: Any) -> None:
    """One JSON object on a line: an SDK model, or a plain dict."""
    fields = model if isinstance(model, dict) else model.model_dump(mode="json")
    typer.echo(json.dumps(fields, ensure_ascii=False))


def instant(value: str | None) -> datetime | None:
    """``--send-at``: an RFC 3339 time with its offset; anything else is one line and exit 2."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value) if "T" in value.upper() else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        typer.echo(f"error: --send-at {value!r} is not an RFC 3339 time with its offset", err=True)
        raise typer.Exit(2)
    return moment


def print_calendar(cal: Any) -> None:
    """A cycle calendar: a JSON line per minute, then a count line on stderr."""
    for minute in cal.minutes:
        print_json(minute)
    more = " (truncated: more were due)" if cal.truncated else ""
    typer.echo(f"{len(cal.minutes)} minute(s), {cal.subscriptions:,} subscription(s) due{more}", err=True)
