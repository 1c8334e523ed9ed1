"""`notee segment create|list|show|update|delete` and `notee estimate` over HTTP (NOTEE_API_KEY): a
service's saved segments and the estimate of what a publish's target reaches now (docs/AUDIENCES.md).
"""

from __future__ import annotations

from typing import Any

import typer

from notee.cli.remote_client import AsJson, json_option, print_json, say, sdk_client

segment_app = typer.Typer(
    help="Saved segments: named filters over tags and attributes (NOTEE_API_KEY).", no_args_is_help=True
)

FILTER_HELP = (
    'The filter as JSON: groups (ORed) of predicates (ANDed), e.g. \'[[{"tag": "plan", "op": "=", "value": "pro"}]]\'.'
)


def _filter(text: str, option: str = "--filter") -> list[Any]:
    value = json_option(text, option)
    if not isinstance(value, list):
        raise typer.BadParameter("a JSON list of groups of predicates", param_hint=option)
    return value


def _reach_line(users: int | None, devices: int | None, by_platform: dict[str, int] | None) -> str:
    platforms = ", ".join(f"{p} {n:,}" for p, n in sorted((by_platform or {}).items()))
    users_text = "unknown" if users is None else f"{users:,}"
    devices_text = "unknown" if devices is None else f"{devices:,}" + (f" ({platforms})" if platforms else "")
    return f"users {users_text} · devices {devices_text}"


@segment_app.command("create")
def segment_create(
    name: str = typer.Argument(..., help="1-64 of A-Z a-z 0-9 _ . -"),
    filter: str = typer.Option(..., "--filter", help=FILTER_HELP),
    description: str | None = typer.Option(None, help="At most 500 characters."),
    as_json: AsJson = False,
) -> None:
    """Save a filter under a name (exit 1 when the name is taken)."""
    with sdk_client() as notee:
        made = notee.create_segment(name, _filter(filter), description=description)
    say(f"segment {made.name} created", made, as_json)


@segment_app.command("update")
def segment_update(
    name: str = typer.Argument(...),
    filter: str = typer.Option(..., "--filter", help=FILTER_HELP),
    description: str | None = typer.Option(None, help="At most 500 characters (default: none)."),
    as_json: AsJson = False,
) -> None:
    """Replace a segment's filter and description (creates it when there is none of that name)."""
    with sdk_client() as notee:
        put = notee.put_segment(name, _filter(filter), description=description)
    reach = put.reach
    line = f"segment {put.name} saved" + (f": {_reach_line(reach.users, reach.devices, None)}" if reach else "")
    say(line, put, as_json)


@segment_app.command("list")
def segment_list(
    counts: bool = typer.Option(False, "--counts", help="Count what each reaches now (one count per segment)."),
) -> None:
    """The service's segments in name order, one JSON object a line."""
    with sdk_client() as notee:
        for segment in notee.iter_segments(counts=counts, page_size=20 if counts else 200):
            print_json(segment)


@segment_app.command("show")
def segment_show(name: str = typer.Argument(...)) -> None:
    """One segment and what it reaches now, as one JSON object."""
    with sdk_client() as notee:
        print_json(notee.get_segment(name))


@segment_app.command("delete")
def segment_delete(name: str = typer.Argument(...), as_json: AsJson = False) -> None:
    """Delete a segment (jobs already made keep their snapshot of it)."""
    with sdk_client() as notee:
        notee.delete_segment(name)
    say(f"segment {name} deleted", {"name": name, "deleted": True}, as_json)


def estimate(
    filter: str | None = typer.Option(None, "--filter", help=FILTER_HELP),
    segment: list[str] = typer.Option([], "--segment", help="Include this segment (repeatable)."),
    exclude: list[str] = typer.Option([], "--exclude", help="With --segment: exclude this segment (repeatable)."),
    user: list[str] = typer.Option([], "--user", help="A service user id of a user list (repeatable)."),
    topic: str | None = typer.Option(None, help="A topic (with --type)."),
    condition: str | None = typer.Option(None, help="A condition over topics (with --type)."),
    type: str | None = typer.Option(None, "--type", help="The TOPIC template's type (topic, condition)."),
    platform: list[str] = typer.Option([], "--platform", help="Narrow to IOS, AOS or WEB (repeatable)."),
    as_json: AsJson = False,
) -> None:
    """How many users and devices a publish's target would reach now: give one of --filter,
    --segment (with --exclude), --user, --topic or --condition."""
    if exclude and not segment:
        raise typer.BadParameter("--exclude needs --segment", param_hint="--exclude")
    with sdk_client() as notee:
        found = notee.estimate_audience(
            filter=_filter(filter) if filter is not None else None,
            include=segment or None,
            exclude=exclude or None,
            users=user or None,
            topic=topic,
            condition=condition,
            type=type,
            platforms=platform or None,
        )
    how = "exact" if found.exact else f"estimated ({found.method})"
    say(f"{_reach_line(found.users, found.devices, found.devices_by_platform)} · {how}", found, as_json)
