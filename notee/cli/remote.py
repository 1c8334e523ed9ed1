"""The `notee` commands that call a running Notee over HTTP, through the Python SDK
(clients/python): ``NOTEE_URL`` plus ``NOTEE_API_KEY`` (a service's key) or ``NOTEE_ADMIN_TOKEN``.

Every failure is one line on stderr and an exit code that says which kind
(``remote_client.ExitCode``, the one table; README "CLI"):

====  ==========================================================================================
0     ok
1     anything else: a conflict (409), a server error (500), a job that failed, a failed send
2     invalid: a wrong command line (typer's own), or the API's 400/422
3     not found: the API's 404
4     unauthorized: the API's 401/403 (a missing, wrong or revoked key or token)
5     unavailable: the API's 503, its 429 after the SDK's retries, or Notee unreachable
====  ==========================================================================================

Listings print one JSON object per line, so they pipe into ``jq``; ``show`` commands print one JSON
object; actions print one human line, or with ``--json`` the API's answer as one JSON object.

The commands live by what they manage: ``remote_admin`` (the operator's), ``remote_tenant`` (a
service's templates, users, subscriptions, webhooks, quiet hours and insight), ``remote_publish``
(publish, send, jobs), ``remote_segments`` (segments, estimate), ``remote_imports`` (bulk import and
export), ``remote_dead_letters`` (a service's dead letters, or any service's with the admin token),
``remote_tags`` (a user's tags), ``remote_stats`` (engagement figures); ``remote_client`` is what they share.
"""

from __future__ import annotations

import typer

from notee.cli import remote_tags  # noqa: F401 (registers `notee user tags|tag|untag` on user_app)
from notee.cli.remote_admin import admin_app
from notee.cli.remote_dead_letters import dead_letters_app
from notee.cli.remote_imports import export_file, import_file
from notee.cli.remote_publish import jobs_app, publish, send
from notee.cli.remote_segments import estimate, segment_app
from notee.cli.remote_stats import stats
from notee.cli.remote_tenant import (
    calendar,
    quiet_hours,
    subscribe,
    subscribe_bulk,
    subscribers,
    summary,
    template_app,
    topics,
    user_app,
    webhook_app,
)


def install(app: typer.Typer) -> None:
    """Add these commands to the `notee` command."""
    app.add_typer(admin_app, name="admin")
    app.add_typer(template_app, name="template")
    app.add_typer(user_app, name="user")
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(webhook_app, name="webhook")
    app.add_typer(dead_letters_app, name="dead-letters")
    app.add_typer(segment_app, name="segment")
    app.command("subscribe")(subscribe)
    app.command("subscribe-bulk")(subscribe_bulk)
    app.command("publish")(publish)
    app.command("send")(send)
    app.command("estimate")(estimate)
    app.command("subscribers")(subscribers)
    app.command("topics")(topics)
    app.command("calendar")(calendar)
    app.command("summary")(summary)
    app.command("stats")(stats)
    app.command("quiet-hours")(quiet_hours)
    app.command("import")(import_file)
    app.command("export")(export_file)
