"""What the `notee` commands that call a running Notee over HTTP share: the SDK client from the
environment (``NOTEE_URL`` plus ``NOTEE_API_KEY`` or ``NOTEE_ADMIN_TOKEN``), the exit codes, failures
as one line, ``--json``, ``KEY=VALUE`` options, ``--send-at`` times and JSON lines (notee.cli.remote).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from enum import IntEnum
from typing import Annotated, Any, NoReturn

import typer

USER_HELP = "Notee's user_id, or ext:<your id> (e.g. ext:alice)."
SEND_AT_HELP = "Send then, not now: RFC 3339 with its offset, e.g. 2026-12-01T09:00:00+09:00 (a scheduled job)."


class ExitCode(IntEnum):
    """Every `notee` command's exit codes (README "CLI"; notee.cli.remote): scripts tell the failures
    apart by these, so a code never changes meaning."""

    OK = 0
    FAILED = 1  # anything else: a conflict (409), a server error (500), a job that failed
    INVALID = 2  # a wrong command line (typer's own), or the API's 400/422
    NOT_FOUND = 3  # the API's 404
    UNAUTHORIZED = 4  # the API's 401/403: a missing, wrong or revoked key or token
    UNAVAILABLE = 5  # the API's 503, or 429 after the SDK's retries, or Notee (or a store) unreachable


_EXIT_BY_STATUS = {
    400: ExitCode.INVALID,
    422: ExitCode.INVALID,
    404: ExitCode.NOT_FOUND,
    401: ExitCode.UNAUTHORIZED,
    403: ExitCode.UNAUTHORIZED,
    429: ExitCode.UNAVAILABLE,
    503: ExitCode.UNAVAILABLE,
}


def exit_code_for(status: int) -> ExitCode:
    """The exit code of an API error answer's HTTP status."""
    return _EXIT_BY_STATUS.get(status, ExitCode.FAILED)


AsJson = Annotated[
    bool, typer.Option("--json", help="Print the API's answer as one JSON object instead of a line of prose.")
]


@contextmanager
def sdk_client() -> Iterator[Any]:
    """An SDK client from the environment; every error becomes one line on stderr and its exit code
    (``ExitCode``)."""
    try:
        # deferred: the SDK is its own distribution (clients/python), needed only by these commands.
        import httpx
        from notee_sdk import Client, NoteeError
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
        fail(f"{exc.status} {exc.code}: {exc.message}" + (f" ({detail})" if detail else ""), exit_code_for(exc.status))
    except httpx.HTTPError as exc:
        # A transport error (refused, reset, timed out) is Notee unreachable; anything else (a redirect
        # loop, say) is no outage.
        unreachable = isinstance(exc, httpx.TransportError)
        code = ExitCode.UNAVAILABLE if unreachable else ExitCode.FAILED
        fail(f"cannot reach Notee at {sdk._policy.base_url}: {exc or type(exc).__name__}", code)


def _detail(detail: Any) -> str:
    if isinstance(detail, dict):
        loc = ".".join(str(p) for p in detail.get("loc", []) if p not in ("body", "query", "path"))
        return f"{loc}: {detail.get('msg', '')}" if loc else str(detail.get("msg", detail))
    return str(detail)


def fail(message: str, code: ExitCode = ExitCode.FAILED) -> NoReturn:
    """One line on stderr, then exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def pairs(values: list[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; a value may itself contain '='."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=what)
        out[key] = value
    return out


PAYLOAD_HELP = (
    "The rich fields as a JSON object (docs/PAYLOADS.md); --badge, --sound, --image, --background set over it."
)


def json_option(text: str, option: str) -> Any:
    """An option's JSON text parsed, or the option's usage error (exit 2) naming it."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint=option) from None


def json_object_option(text: str, option: str, must: str) -> dict[str, Any]:
    """An option's JSON text that must be an object (``must``: the usage error's words otherwise)."""
    value = json_option(text, option)
    if not isinstance(value, dict):
        raise typer.BadParameter(must, param_hint=option)
    return value


def payload_of(text: str | None, badge: int | None, sound: str | None, image: str | None, background: bool) -> Any:
    """The ``payload`` object of ``--payload JSON`` and the flags for its common fields (None: none);
    the server checks it (a bad field: its 422)."""
    out: dict[str, Any] = json_object_option(text, "--payload", "must be a JSON object") if text else {}
    given = {"badge": badge, "sound": sound, "image": image, "kind": "background" if background else None}
    out.update({k: v for k, v in given.items() if v is not None})
    return out or None


def variants_of(text: str | None, subtitles: dict[str, str]) -> Any:
    """The ``variants`` object of ``--variants JSON`` with each ``--subtitle LOCALE=TEXT`` set as that
    variant's ``subtitle`` (None: no variants); a subtitle for a locale without a variant is refused
    here, the server checks the rest (its 422)."""
    out: dict[str, Any] = json_object_option(text, "--variants", "must be a JSON object of locales") if text else {}
    for locale, subtitle in subtitles.items():
        if not isinstance(out.get(locale), dict):
            raise typer.BadParameter(f"no variant {locale!r} in --variants", param_hint="--subtitle")
        out[locale] = {**out[locale], "subtitle": subtitle}
    return out or None


def print_json(model: Any) -> None:
    """One JSON object on a line: an SDK model, or a plain dict."""
    fields = model if isinstance(model, dict) else model.model_dump(mode="json")
    typer.echo(json.dumps(fields, ensure_ascii=False))


def say(line: str, answer: Any, as_json: bool) -> None:
    """A command's outcome: its line of prose, or with ``--json`` the API's ``answer`` as one JSON object."""
    if as_json:
        print_json(answer)
    else:
        typer.echo(line)


def instant(value: str | None, option: str = "--send-at") -> datetime | None:
    """A time ``option`` gave: RFC 3339 with its offset; anything else is one line and exit 2."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value) if "T" in value.upper() else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        fail(f"{option} {value!r} is not an RFC 3339 time with its offset", ExitCode.INVALID)
    return moment


def print_calendar(cal: Any) -> None:
    """A cycle calendar: a JSON line per minute, then a count line on stderr."""
    for minute in cal.minutes:
        print_json(minute)
    more = " (truncated: more were due)" if cal.truncated else ""
    typer.echo(f"{len(cal.minutes)} minute(s), {cal.subscriptions:,} subscription(s) due{more}", err=True)
