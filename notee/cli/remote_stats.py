"""`notee stats`: a service's engagement figures over HTTP (its API key; docs/ENGAGEMENT.md): one job
or single send, or per template type, topic or day; `--export` writes a job's raw receipt events."""

from __future__ import annotations

from datetime import date
from typing import Any

import typer

from notee.cli.remote_client import AsJson, fail, print_json, sdk_client

_FIGURES = ("targeted", "sent", "delivered", "opened", "clicked", "dismissed")


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _line(key: str, counts: Any) -> str:
    c = counts.model_dump()
    figures = " ".join(f"{name}={c[name]}" for name in _FIGURES)
    return f"{key}: {figures} open={_rate(c['open_rate'])} click={_rate(c['click_rate'])}"


def _day(value: str | None, option: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        fail(f"{option} must be a day, YYYY-MM-DD")


def stats(
    job: str | None = typer.Option(None, "--job", help="A job id, or a single send's send_id."),
    by: str = typer.Option("type", "--by", help="Without --job: type, topic or day."),
    since: str | None = typer.Option(None, "--from", help="First day (YYYY-MM-DD, the service's zone)."),
    until: str | None = typer.Option(None, "--to", help="Last day, inclusive (default: today)."),
    export: bool = typer.Option(False, "--export", help="With --job: its raw receipt events, one JSON object a line."),
    as_json: AsJson = False,
) -> None:
    """Targeted, sent, delivered, opened, clicked and the rates: of one job, or per type, topic or day."""
    if export and job is None:
        fail("--export needs --job")
    with sdk_client() as notee:
        if job is not None and export:
            cursor = None
            while True:
                page = notee.export_receipts(job, cursor=cursor, limit=1000)
                for item in page.items:
                    print_json(item)
                cursor = page.next_cursor
                if cursor is None:
                    return
        if job is not None:
            one = notee.get_job_stats(job)
            if as_json:
                print_json(one)
            else:
                typer.echo(_line(f"{one.job_id} ({one.type})", one.counts))
            return
        if by not in ("type", "topic", "day"):
            fail("--by must be type, topic or day")
        table = notee.get_stats(by, from_=_day(since, "--from"), to=_day(until, "--to"))
    if as_json:
        print_json(table)
        return
    for row in table.items:
        typer.echo(_line(row.key, row.counts))
    if table.jobs_truncated:
        typer.echo("(more jobs than the summary covers: targeted and sent count the newest)", err=True)
