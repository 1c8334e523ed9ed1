"""`notee admin ...`: the operator's commands over HTTP (NOTEE_ADMIN_TOKEN): services, their API keys
and provider credentials; the calendar, jobs and delivery summary of every service.
"""

from __future__ import annotations

import json

import typer

from notee.cli.remote_client import AsJson, print_calendar, print_json, say, sdk_client

admin_app = typer.Typer(
    help="Operator commands (NOTEE_ADMIN_TOKEN): services, API keys, the calendar and delivery summary of every service.",
    no_args_is_help=True,
)
service_app = typer.Typer(help="Services (tenants).", no_args_is_help=True)
key_app = typer.Typer(help="A service's API keys.", no_args_is_help=True)
credentials_app = typer.Typer(help="A service's provider credentials (never printed back).", no_args_is_help=True)
admin_app.add_typer(service_app, name="service")
admin_app.add_typer(key_app, name="key")
admin_app.add_typer(credentials_app, name="credentials")


@service_app.command("create")
def service_create(
    service: str = typer.Argument(..., help="Tenant id, e.g. SHOP (A-Z, 0-9, _)."),
    name: str = typer.Option(..., "--name", help="Display name."),
    timezone: str = typer.Option(
        "UTC", help="IANA time zone of its cycle schedules, local-time publishes and quiet hours."
    ),
    as_json: AsJson = False,
) -> None:
    """Create a service (its time zone: UTC unless given)."""
    with sdk_client() as notee:
        created = notee.create_service(service, name, timezone)
    say(f"service {created.service} created ({created.timezone})", created, as_json)


@service_app.command("update")
def service_update(
    service: str,
    delivery_mode: str = typer.Option(..., help="live, or dry_run (pushes are recorded, never sent)."),
    as_json: AsJson = False,
) -> None:
    """Change a service's delivery mode."""
    with sdk_client() as notee:
        updated = notee.update_service(service, delivery_mode=delivery_mode)
    say(f"service {updated.service}: delivery_mode {updated.delivery_mode}", updated, as_json)


@service_app.command("list")
def service_list() -> None:
    """Every service, one JSON object a line."""
    with sdk_client() as notee:
        for service in notee.list_services():
            print_json(service)


@key_app.command("create")
def key_create(
    service: str,
    label: str = typer.Option("", help="A note on what the key is for."),
    client: bool = typer.Option(
        False, "--client", help="A client key (nck_): safe inside an app, it may only post receipts."
    ),
    as_json: AsJson = False,
) -> None:
    """Create an API key; it is printed once, on stdout alone (the key id goes to stderr); with --json,
    the key and its id as one JSON object."""
    with sdk_client() as notee:
        created = notee.create_api_key(service, label, kind="client" if client else "server")
    if as_json:
        print_json(created)
        return
    typer.echo(f"key {created.key_id} of {service} (store it now; it is not shown again):", err=True)
    typer.echo(created.api_key)


@key_app.command("list")
def key_list(service: str) -> None:
    """A service's keys (never their secrets), one JSON object a line."""
    with sdk_client() as notee:
        for key in notee.list_api_keys(service):
            print_json(key)


@key_app.command("revoke")
def key_revoke(service: str, key_id: str, as_json: AsJson = False) -> None:
    """Revoke an API key (effective on its next request)."""
    with sdk_client() as notee:
        notee.revoke_api_key(service, key_id)
    say(f"key {key_id} of {service} revoked", {"service": service, "key_id": key_id, "revoked": True}, as_json)


@credentials_app.command("fcm")
def credentials_fcm(
    service: str,
    file: typer.FileText = typer.Option(..., "--file", help="The Firebase service-account JSON file."),
    as_json: AsJson = False,
) -> None:
    """Store a service's Firebase service account (encrypted at rest)."""
    try:
        account = json.load(file)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--file") from exc
    with sdk_client() as notee:
        status = notee.put_fcm_credentials(service, account)
    say(f"credentials of {service}: fcm={status.fcm} apns={status.apns} webpush={status.webpush}", status, as_json)


@credentials_app.command("apns")
def credentials_apns(
    service: str,
    key_id: str = typer.Option(...),
    team_id: str = typer.Option(...),
    bundle_id: str = typer.Option(...),
    key_file: typer.FileText = typer.Option(..., "--key-file", help="The .p8 signing key."),
    sandbox: bool = typer.Option(False, help="Use APNs' sandbox (development builds)."),
    as_json: AsJson = False,
) -> None:
    """Store a service's APNs token-signing key (encrypted at rest)."""
    with sdk_client() as notee:
        status = notee.put_apns_credentials(
            service, key_id=key_id, team_id=team_id, bundle_id=bundle_id, private_key=key_file.read(), sandbox=sandbox
        )
    say(f"credentials of {service}: fcm={status.fcm} apns={status.apns} webpush={status.webpush}", status, as_json)


@credentials_app.command("webpush")
def credentials_webpush(
    service: str,
    subject: str = typer.Option(..., help="Contact for push services: mailto:you@example.com or an https: URL."),
    key_file: typer.FileText | None = typer.Option(
        None, "--key-file", help="Upload this VAPID private key (PEM); left out: Notee generates a new key pair."
    ),
    as_json: AsJson = False,
) -> None:
    """Generate (or upload) a service's VAPID key pair for Web Push; prints the public key its web
    page subscribes with. Replaces any previous key (docs/WEB-PUSH.md, "Rotating the VAPID key")."""
    with sdk_client() as notee:
        if key_file is None:
            key = notee.generate_vapid_key(service, subject)
        else:
            key = notee.put_vapid_key(service, subject, key_file.read().strip())
    verb = "generated" if key.generated else "stored"
    say(f"VAPID key of {service} {verb}; public key: {key.public_key}", key, as_json)


@admin_app.command("calendar")
def admin_calendar(
    hours: int = typer.Option(24, min=1, help="How far ahead, in hours (at most a week)."),
    service: str | None = typer.Option(None, help="Only this service (default: every service)."),
) -> None:
    """The cycle calendar of every service (or one), one JSON object a line per minute."""
    with sdk_client() as notee:
        cal = notee.admin_get_calendar(hours=hours, service=service)
    print_calendar(cal)


@admin_app.command("jobs")
def admin_jobs(
    service: str = typer.Argument(..., help="The service (tenant)."),
    state: str | None = typer.Option(None, help="scheduled, queued, running, done, failed, expired, cancelled."),
    method: str | None = typer.Option(None, help="TOPIC, CYCLE or SINGLE."),
    type: str | None = typer.Option(None, help="Notification type."),
    limit: int = typer.Option(50, min=1, help="At most this many jobs."),
) -> None:
    """Any service's jobs, newest first, one JSON object a line."""
    shown = 0
    cursor: str | None = None
    with sdk_client() as notee:
        while shown < limit:
            page = notee.admin_list_jobs(
                service, state=state, method=method, type=type, cursor=cursor, limit=min(limit - shown, 200)
            )
            for job in page.items:
                print_json(job)
            shown += len(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor


@admin_app.command("summary")
def admin_summary(hours: int = typer.Option(24, min=1, help="The current hour and this many - 1 before it.")) -> None:
    """The delivery summary of every service, one JSON object a line."""
    with sdk_client() as notee:
        cursor: str | None = None
        while True:
            page = notee.admin_list_delivery_summaries(hours=hours, limit=200, cursor=cursor)
            for item in page.items:
                print_json(item)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
