"""The `notee` commands that call a running Notee over HTTP, through the Python SDK
(clients/python): ``NOTEE_URL`` plus ``NOTEE_API_KEY`` (a service's key) or ``NOTEE_ADMIN_TOKEN``.

Every failure is one line on stderr and a non-zero exit: 1 for an error answer or an unreachable
server, 2 for a wrong command line (typer's own). Listings print one JSON object per line, so they
pipe into ``jq``; actions print one human line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NoReturn

import typer

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
template_app = typer.Typer(help="Notification templates (NOTEE_API_KEY).", no_args_is_help=True)
user_app = typer.Typer(help="Users and their devices (NOTEE_API_KEY).", no_args_is_help=True)
jobs_app = typer.Typer(help="Publish jobs: list, show, cancel (NOTEE_API_KEY).", no_args_is_help=True)
webhook_app = typer.Typer(
    help="Delivery webhooks: endpoints and their deliveries (NOTEE_API_KEY; docs/WEBHOOKS.md).", no_args_is_help=True
)


@contextmanager
def _client() -> Iterator[Any]:
    """An SDK client from the environment; every error becomes one line and exit code 1."""
    try:
        # deferred: the SDK is its own distribution (clients/python), needed only by these commands.
        import httpx
        from notee_client import Client, NoteeError
    except ImportError:
        _fail("the Notee SDK is not installed: pip install ./clients/python")
    try:
        client = Client(max_retries=2)
    except ValueError as exc:
        _fail(f"{exc}; e.g. NOTEE_URL=http://127.0.0.1:8080")
    try:
        with client:
            yield client
    except NoteeError as exc:
        detail = "; ".join(_detail(d) for d in exc.details[:3])
        _fail(f"{exc.status} {exc.code}: {exc.message}" + (f" ({detail})" if detail else ""))
    except httpx.HTTPError as exc:
        _fail(f"cannot reach Notee at {client._policy.base_url}: {exc or type(exc).__name__}")


def _detail(detail: Any) -> str:
    if isinstance(detail, dict):
        loc = ".".join(str(p) for p in detail.get("loc", []) if p not in ("body", "query", "path"))
        return f"{loc}: {detail.get('msg', '')}" if loc else str(detail.get("msg", detail))
    return str(detail)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _pairs(values: list[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; a value may itself contain '='."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=what)
        out[key] = value
    return out


def _print_json(model: Any) -> None:
    typer.echo(json.dumps(model.model_dump(mode="json"), ensure_ascii=False))


# --- admin ---------------------------------------------------------------------------------------


@service_app.command("create")
def service_create(
    service: str = typer.Argument(..., help="Tenant id, e.g. SHOP (A-Z, 0-9, _)."),
    name: str = typer.Option(..., "--name", help="Display name."),
    timezone: str | None = typer.Option(None, help="IANA time zone (default Asia/Seoul)."),
) -> None:
    """Create a service."""
    with _client() as notee:
        created = notee.create_service(service, name, timezone)
    typer.echo(f"service {created.service} created ({created.timezone})")


@service_app.command("update")
def service_update(
    service: str, delivery_mode: str = typer.Option(..., help="live, or dry_run (pushes are recorded, never sent).")
) -> None:
    """Change a service's delivery mode."""
    with _client() as notee:
        updated = notee.update_service(service, delivery_mode=delivery_mode)
    typer.echo(f"service {updated.service}: delivery_mode {updated.delivery_mode}")


@service_app.command("list")
def service_list() -> None:
    """Every service, one JSON object a line."""
    with _client() as notee:
        for service in notee.list_services():
            _print_json(service)


@key_app.command("create")
def key_create(service: str, label: str = typer.Option("", help="A note on what the key is for.")) -> None:
    """Create an API key; it is printed once, on stdout alone (the key id goes to stderr)."""
    with _client() as notee:
        created = notee.create_api_key(service, label)
    typer.echo(f"key {created.key_id} of {service} (store it now; it is not shown again):", err=True)
    typer.echo(created.api_key)


@key_app.command("list")
def key_list(service: str) -> None:
    """A service's keys (never their secrets), one JSON object a line."""
    with _client() as notee:
        for key in notee.list_api_keys(service):
            _print_json(key)


@key_app.command("revoke")
def key_revoke(service: str, key_id: str) -> None:
    """Revoke an API key (effective on its next request)."""
    with _client() as notee:
        notee.revoke_api_key(service, key_id)
    typer.echo(f"key {key_id} of {service} revoked")


@credentials_app.command("fcm")
def credentials_fcm(
    service: str, file: typer.FileText = typer.Option(..., "--file", help="The Firebase service-account JSON file.")
) -> None:
    """Store a service's Firebase service account (encrypted at rest)."""
    try:
        account = json.load(file)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--file") from exc
    with _client() as notee:
        status = notee.put_fcm_credentials(service, account)
    typer.echo(f"credentials of {service}: fcm={status.fcm} apns={status.apns}")


@credentials_app.command("apns")
def credentials_apns(
    service: str,
    key_id: str = typer.Option(...),
    team_id: str = typer.Option(...),
    bundle_id: str = typer.Option(...),
    key_file: typer.FileText = typer.Option(..., "--key-file", help="The .p8 signing key."),
    sandbox: bool = typer.Option(False, help="Use APNs' sandbox (development builds)."),
) -> None:
    """Store a service's APNs token-signing key (encrypted at rest)."""
    with _client() as notee:
        status = notee.put_apns_credentials(
            service, key_id=key_id, team_id=team_id, bundle_id=bundle_id, private_key=key_file.read(), sandbox=sandbox
        )
    typer.echo(f"credentials of {service}: fcm={status.fcm} apns={status.apns}")


# --- templates, users, subscriptions -----------------------------------------------------------------


@template_app.command("put")
def template_put(
    method: str = typer.Argument(..., help="TOPIC, CYCLE or SINGLE."),
    type: str = typer.Argument(..., help="Notification type, e.g. news."),
    title: str = typer.Option(..., help="Title; may hold {{variables}}."),
    body: str = typer.Option(..., help="Body; may hold {{variables}}."),
    data: list[str] = typer.Option([], help="KEY=VALUE sent with the push (repeatable)."),
    ttl: int | None = typer.Option(None, help="Seconds the provider keeps an undelivered push."),
    priority: str | None = typer.Option(None, help="high (default) or normal."),
) -> None:
    """Create or update a template."""
    with _client() as notee:
        template = notee.put_template(
            method.upper(),
            type,
            title=title,
            body=body,
            data=_pairs(data, "--data") or None,
            ttl_seconds=ttl,
            priority=priority,
        )
    typer.echo(f"template {template.method}/{template.type} saved (version {template.version})")


@template_app.command("list")
def template_list() -> None:
    """The service's templates, one JSON object a line."""
    with _client() as notee:
        for template in notee.list_templates():
            _print_json(template)


@user_app.command("put")
def user_put(
    service_user_id: str = typer.Argument(..., help="Your own id of the user."),
    name: str = typer.Option("", help="The user's name."),
    locale: str | None = typer.Option(None, help="BCP 47 tag choosing templates' locale variants, e.g. pt-BR."),
    timezone: str | None = typer.Option(None, help="IANA time zone (local-time publishes, quiet hours)."),
    quiet: str | None = typer.Option(None, help="Quiet hours HH:MM-HH:MM local, e.g. 22:00-07:00."),
) -> None:
    """Create or update a user; prints Notee's user_id."""
    window = None
    if quiet is not None:
        start, _, end = quiet.partition("-")
        window = {"start": start, "end": end}
    with _client() as notee:
        user = notee.put_user(service_user_id, name, locale=locale, timezone=timezone, quiet_hours=window)
    typer.echo(user.user_id)


@user_app.command("device")
def user_device(
    user_id: str,
    token: str,
    os: str = typer.Option(..., help="AOS (FCM) or IOS (APNs)."),
    region: str = typer.Option("", help="Optional region code, e.g. KR."),
) -> None:
    """Register a device (push token) of a user."""
    with _client() as notee:
        device = notee.add_device(user_id, token, os.upper(), region)
    typer.echo(f"device {device.os} registered")


def subscribe(
    user_id: str = typer.Argument(..., help="Notee's user_id."),
    type: str = typer.Argument(..., help="The template's notification type."),
    topic: str | None = typer.Argument(None, help="Topic (TOPIC templates); omit for a CYCLE schedule."),
    days: str | None = typer.Option(None, help="CYCLE: days, e.g. MON,WED,FRI."),
    at: str | None = typer.Option(None, help="CYCLE: local time HH:MM."),
    timezone: str | None = typer.Option(None, help="CYCLE: IANA zone (default: the service's)."),
) -> None:
    """Subscribe a user to a topic (`notee subscribe USER news sports`) or to a recurring schedule
    (`notee subscribe USER daily --days MON,FRI --at 09:30`)."""
    with _client() as notee:
        if topic is not None:
            if days or at:
                raise typer.BadParameter("a topic subscription takes no --days/--at")
            result = notee.subscribe_topic(user_id, type, topic)
        else:
            if not days or not at:
                raise typer.BadParameter("give a TOPIC, or --days and --at for a recurring schedule")
            hour, _, minute = at.partition(":")
            if not (hour.isdigit() and minute.isdigit()):
                raise typer.BadParameter(f"{at!r} is not HH:MM", param_hint="--at")
            result = notee.subscribe_cycle(
                user_id,
                type,
                days=[d.strip().upper() for d in days.split(",")],
                hour=int(hour),
                minute=int(minute),
                timezone=timezone,
            )
    typer.echo(f"{result.status}: {result.devices} device(s)" + (f", {result.schedule}" if result.schedule else ""))


BULK_CHUNK = 1000  # user ids per request: the bulk endpoint's maximum


def subscribe_bulk(
    type: str = typer.Argument(..., help="The TOPIC template's notification type."),
    topic: str = typer.Argument(..., help="The topic."),
    user_ids: list[str] = typer.Argument(None, help="Notee user_ids; none: read them from --file."),
    file: typer.FileText | None = typer.Option(None, help="One user_id a line ('-': standard input)."),
) -> None:
    """Subscribe many users to a topic, 1,000 per request; prints the counts and one JSON line per
    user not found (exit 1 then)."""
    ids = list(user_ids or [])
    if file is not None:
        ids += [line.strip() for line in file if line.strip()]
    if not ids:
        raise typer.BadParameter("give user ids, or --file with one a line")
    counts = {"subscribed": 0, "already_subscribed": 0, "not_found": 0}
    with _client() as notee:
        for i in range(0, len(ids), BULK_CHUNK):
            result = notee.bulk_subscribe(type, topic, ids[i : i + BULK_CHUNK])
            for item in result.results:
                counts[item.status] += 1
                if item.status == "not_found":
                    _print_json(item)
    typer.echo(" · ".join(f"{name} {n}" for name, n in counts.items()))
    if counts["not_found"]:
        raise typer.Exit(1)


# --- publishing ------------------------------------------------------------------------------------

_SEND_AT_HELP = "Send then, not now: RFC 3339 with its offset, e.g. 2026-12-01T09:00:00+09:00 (a scheduled job)."


def _instant(value: str | None) -> datetime | None:
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


def publish(
    type: str = typer.Argument(..., help="The TOPIC template's notification type."),
    topic: str = typer.Argument(..., help="The topic."),
    var: list[str] = typer.Option([], "--var", help="NAME=VALUE for a {{NAME}} placeholder (repeatable)."),
    data: list[str] = typer.Option([], help="KEY=VALUE merged over the template's data (repeatable)."),
    title: str | None = typer.Option(None, help="Replaces the template's title."),
    body: str | None = typer.Option(None, help="Replaces the template's body."),
    local_time: str | None = typer.Option(
        None, "--local-time", help="HH:MM: reach each recipient when its time zone's clock next shows it."
    ),
    idempotency_key: str | None = typer.Option(None, help="Repeat-safe key (default: a new one)."),
    send_at: str | None = typer.Option(None, "--send-at", help=_SEND_AT_HELP),
    wait: bool = typer.Option(False, "--wait", help="Follow the job with a progress line until it ends."),
    timeout: float | None = typer.Option(None, help="With --wait: give up waiting after this many seconds."),
) -> None:
    """Publish a TOPIC template to every subscriber of a topic; prints the job id."""
    with _client() as notee:
        accepted = notee.publish_topic(
            type,
            topic,
            variables=_pairs(var, "--var") or None,
            data=_pairs(data, "--data") or None,
            title=title,
            body=body,
            local_time=local_time,
            idempotency_key=idempotency_key,
            send_at=_instant(send_at),
        )
        typer.echo(accepted.job_id)
        if wait:
            # deferred: the SDK is its own distribution, loaded only by these commands (see _client).
            from notee_client import JobTimeout

            bar = _ProgressLine()
            try:
                job = notee.wait(accepted.job_id, on_progress=bar.update, poll_interval=0.5, timeout=timeout)
            except JobTimeout as exc:
                bar.close()
                _fail(str(exc))
            bar.close()
            if job.state != "done":
                _fail(f"job {job.job_id} {job.state}" + (f": {job.error}" if job.error else ""))


class _ProgressLine:
    """``sent 1,200/5,000 · failed 3 · pruned 1 · 850/s · ~4 s left`` on stderr: redrawn in place on
    a terminal, one line per change otherwise (logs, CI)."""

    def __init__(self, out: Any = None) -> None:
        self.out = out or sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.last = ""

    def update(self, job: Any) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-6)
        done = job.sent + job.failed + job.pruned
        rate = done / elapsed
        line = (
            f"{job.state}: sent {job.sent:,}/{job.targeted:,} · failed {job.failed:,} · pruned {job.pruned:,}"
            f" · {rate:,.0f}/s"
        )
        if job.state in ("queued", "running") and job.tasks and job.tasks_done < job.tasks and rate > 0:
            remaining = max(job.targeted - done, 0)
            line += f" · ~{remaining / rate:,.0f} s left" if remaining else ""
        if line == self.last:
            return
        self.last = line
        if self.tty:
            self.out.write("\r\x1b[2K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.tty and self.last:
            self.out.write("\n")
            self.out.flush()


@jobs_app.command("list")
def jobs_list(
    state: str | None = typer.Option(None, help="scheduled, queued, running, done, failed, ..."),
    method: str | None = typer.Option(None, help="TOPIC (publishes), CYCLE (schedules) or SINGLE (scheduled sends)."),
    type: str | None = typer.Option(None, help="Notification type."),
    limit: int = typer.Option(50, min=1, help="At most this many jobs."),
) -> None:
    """The service's jobs, newest first, one JSON object a line."""
    with _client() as notee:
        for n, job in enumerate(notee.iter_jobs(state=state, method=method, type=type, page_size=min(limit, 200))):
            if n >= limit:
                break
            _print_json(job)


@jobs_app.command("show")
def jobs_show(job_id: str) -> None:
    """One job's state and counts, as JSON."""
    with _client() as notee:
        _print_json(notee.get_job(job_id))


@jobs_app.command("cancel")
def jobs_cancel(job_id: str) -> None:
    """Cancel a scheduled, queued or running job; prints its final state and counts."""
    with _client() as notee:
        job = notee.cancel_job(job_id)
    typer.echo(f"job {job.job_id} {job.state}: sent {job.sent:,} of {job.targeted:,} read · failed {job.failed:,}")


def send(
    user_id: str = typer.Argument(..., help="Notee's user_id."),
    type: str = typer.Argument(..., help="The SINGLE template's notification type."),
    var: list[str] = typer.Option([], "--var", help="NAME=VALUE for a {{NAME}} placeholder (repeatable)."),
    data: list[str] = typer.Option([], help="KEY=VALUE merged over the template's data (repeatable)."),
    send_at: str | None = typer.Option(None, "--send-at", help=_SEND_AT_HELP),
) -> None:
    """Send a SINGLE template to every device of one user, now (prints the counts), or at --send-at
    (prints the scheduled job's id)."""
    when = _instant(send_at)
    with _client() as notee:
        if when is not None:
            accepted = notee.send_to_user(
                user_id,
                type,
                variables=_pairs(var, "--var") or None,
                data=_pairs(data, "--data") or None,
                send_at=when,
            )
            typer.echo(accepted.job_id)
            return
        result = notee.send_to_user(
            user_id, type, variables=_pairs(var, "--var") or None, data=_pairs(data, "--data") or None
        )
    typer.echo(
        f"devices {result.devices} · delivered {result.delivered} · failed {result.failed} · pruned {result.pruned}"
    )
    if result.failed:
        raise typer.Exit(1)


# --- insight: subscriber counts, the cycle calendar, the delivery summary ----------------------------


def subscribers() -> None:
    """Subscribed users per TOPIC and CYCLE template, one JSON object a line."""
    with _client() as notee:
        for count in notee.get_subscriber_counts().items:
            _print_json(count)


def topics(
    type: str | None = typer.Option(None, help="Only this TOPIC template's topics."),
    limit: int = typer.Option(1000, min=1, help="At most this many topics."),
) -> None:
    """The service's topics that have subscribers, with their counts, one JSON object a line."""
    shown = 0
    cursor: str | None = None
    with _client() as notee:
        while shown < limit:
            page = notee.list_topics(type=type, cursor=cursor, limit=min(limit - shown, 1000))
            for topic in page.items:
                _print_json(topic)
            shown += len(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor


def calendar(hours: int = typer.Option(24, min=1, help="How far ahead, in hours (at most a week).")) -> None:
    """The cycle calendar: one JSON object a line per coming minute at which templates fall due."""
    with _client() as notee:
        cal = notee.get_calendar(hours=hours)
    _print_calendar(cal)


def _print_calendar(cal: Any) -> None:
    for minute in cal.minutes:
        _print_json(minute)
    more = " (truncated: more were due)" if cal.truncated else ""
    typer.echo(f"{len(cal.minutes)} minute(s), {cal.subscriptions:,} subscription(s) due{more}", err=True)


def summary(hours: int = typer.Option(24, min=1, help="The current hour and this many - 1 before it.")) -> None:
    """What the service's jobs did in the last hours, per hour, as JSON."""
    with _client() as notee:
        _print_json(notee.get_delivery_summary(hours=hours))


@admin_app.command("calendar")
def admin_calendar(
    hours: int = typer.Option(24, min=1, help="How far ahead, in hours (at most a week)."),
    service: str | None = typer.Option(None, help="Only this service (default: every service)."),
) -> None:
    """The cycle calendar of every service (or one), one JSON object a line per minute."""
    with _client() as notee:
        cal = notee.admin_get_calendar(hours=hours, service=service)
    _print_calendar(cal)


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
    with _client() as notee:
        while shown < limit:
            page = notee.admin_list_jobs(
                service, state=state, method=method, type=type, cursor=cursor, limit=min(limit - shown, 200)
            )
            for job in page.items:
                _print_json(job)
            shown += len(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor


@admin_app.command("summary")
def admin_summary(hours: int = typer.Option(24, min=1, help="The current hour and this many - 1 before it.")) -> None:
    """The delivery summary of every service, one JSON object a line."""
    with _client() as notee:
        for item in notee.admin_list_delivery_summaries(hours=hours):
            _print_json(item)


# --- delivery webhooks -----------------------------------------------------------------------------


@webhook_app.command("create")
def webhook_create(
    url: str = typer.Argument(..., help="The HTTPS URL Notee POSTs events to."),
    event: list[str] = typer.Option([], "--event", help="An event it receives (repeatable; default all four)."),
    description: str | None = typer.Option(None, help="A note for you."),
) -> None:
    """Register an endpoint; prints it as JSON with its signing secret, which is shown only now."""
    with _client() as notee:
        _print_json(notee.create_webhook(url, events=event or None, description=description))


@webhook_app.command("list")
def webhook_list() -> None:
    """The service's endpoints, one JSON object a line (never a secret)."""
    with _client() as notee:
        for endpoint in notee.list_webhooks():
            _print_json(endpoint)


@webhook_app.command("delete")
def webhook_delete(endpoint_id: str) -> None:
    """Delete an endpoint and its deliveries."""
    with _client() as notee:
        notee.delete_webhook(endpoint_id)
    typer.echo(f"webhook {endpoint_id} deleted")


@webhook_app.command("deliveries")
def webhook_deliveries(
    endpoint_id: str,
    state: str | None = typer.Option(None, help="pending, delivered or failed."),
    limit: int = typer.Option(50, min=1, max=200, help="At most this many, newest first."),
) -> None:
    """An endpoint's recent deliveries, one JSON object a line."""
    with _client() as notee:
        for delivery in notee.list_webhook_deliveries(endpoint_id, state=state, limit=limit).items:
            _print_json(delivery)


@webhook_app.command("resend")
def webhook_resend(endpoint_id: str, delivery_id: int) -> None:
    """Send a delivery again (same event id and body)."""
    with _client() as notee:
        delivery = notee.resend_webhook_delivery(endpoint_id, delivery_id)
    typer.echo(f"delivery {delivery.delivery_id} ({delivery.event_type} {delivery.event_id}) {delivery.state}")


def quiet_hours(
    window: str | None = typer.Argument(
        None, help="HH:MM-HH:MM local (22:00-07:00 crosses midnight); 'off' clears; nothing: show."
    ),
) -> None:
    """The service's quiet hours: TOPIC pushes due inside them are held (or dropped, per template)."""
    with _client() as notee:
        if window is None:
            answer = notee.get_quiet_hours()
        elif window == "off":
            answer = notee.put_quiet_hours(None)
        else:
            start, _, end = window.partition("-")
            answer = notee.put_quiet_hours(start, end)
    q = answer.quiet_hours
    typer.echo(f"{q['start']}-{q['end']}" if q else "off")


def install(app: typer.Typer) -> None:
    """Add these commands to the `notee` command."""
    app.add_typer(admin_app, name="admin")
    app.add_typer(template_app, name="template")
    app.add_typer(user_app, name="user")
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(webhook_app, name="webhook")
    app.command("subscribe")(subscribe)
    app.command("subscribe-bulk")(subscribe_bulk)
    app.command("publish")(publish)
    app.command("send")(send)
    app.command("subscribers")(subscribers)
    app.command("topics")(topics)
    app.command("calendar")(calendar)
    app.command("summary")(summary)
    app.command("quiet-hours")(quiet_hours)
