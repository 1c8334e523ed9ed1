"""`notee dead-letters list|replay` over HTTP: pushes that still failed after the retries. With a
service's key (NOTEE_API_KEY) they are that service's (``/v1/dead-letters``); with the admin token
(NOTEE_ADMIN_TOKEN) ``--service`` names the service (``/v1/admin/services/{service}/dead-letters``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import typer

from notee.cli.remote_client import print_json, sdk_client
from notee.core.logs import token_hint

dead_letters_app = typer.Typer(
    help="Pushes that still failed after the retries: list and send again (NOTEE_API_KEY, or NOTEE_ADMIN_TOKEN "
    "with --service).",
    no_args_is_help=True,
)

SERVICE_HELP = "Any service's, with NOTEE_ADMIN_TOKEN (default: NOTEE_API_KEY's service)."
PAGE = 500  # the listing's largest page


def _check_credentials(service: str | None) -> None:
    """Without --service the letters are the key's service's: without a key, say what is missing
    (the API would only answer 401)."""
    if service is None and not os.environ.get("NOTEE_API_KEY"):
        raise typer.BadParameter("set NOTEE_API_KEY, or give --service with NOTEE_ADMIN_TOKEN", param_hint="--service")


def _letters(notee: Any, service: str | None, job: str | None, limit: int) -> Iterator[Any]:
    """The dead letters, newest first, a page at a time: the key's service's, or ``service``'s."""
    cursor: str | None = None
    shown = 0
    while shown < limit:
        size = min(limit - shown, PAGE)
        if service is None:
            page = notee.list_dead_letters(limit=size, cursor=cursor, job_id=job)
        else:
            page = notee.admin_list_dead_letters(service, limit=size, cursor=cursor, job_id=job)
        yield from page.items
        shown += len(page.items)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


@dead_letters_app.command("list")
def dead_letters_list(
    service: str | None = typer.Option(None, help=SERVICE_HELP),
    job: str | None = typer.Option(None, help="Only this job's dead letters."),
    limit: int = typer.Option(100, min=1, help="At most this many, newest first."),
) -> None:
    """Dead letters, newest first, one JSON object a line (device tokens shortened); the count on stderr."""
    _check_credentials(service)
    count = 0
    with sdk_client() as notee:
        for letter in _letters(notee, service, job, limit):
            count += 1
            print_json(
                {
                    "id": letter.id,
                    "job_id": letter.job_id,
                    "device": token_hint(letter.device_token),
                    "provider": letter.provider,
                    "reason": letter.reason,
                    "attempts": letter.attempts,
                    "created_at": letter.created_at.isoformat(),
                }
            )
    typer.echo(f"{count} dead letter(s)", err=True)


@dead_letters_app.command("replay")
def dead_letters_replay(
    service: str | None = typer.Option(None, help=SERVICE_HELP),
    id: list[int] = typer.Option([], "--id", help="Dead letter ids (repeatable; default: the oldest 1,000)."),
    job: str | None = typer.Option(None, help="Only this job's dead letters."),
) -> None:
    """Send dead letters again; delivered and pruned ones are removed, failures are recorded anew.
    Prints the counts as JSON."""
    _check_credentials(service)
    ids = id or None
    with sdk_client() as notee:
        if service is None:
            replayed = notee.replay_dead_letters(ids=ids, job_id=job)
        else:
            replayed = notee.admin_replay_dead_letters(service, ids=ids, job_id=job)
    print_json(replayed)
