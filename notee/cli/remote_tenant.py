"""The commands over HTTP that manage a service's own things (NOTEE_API_KEY): templates, users and their
devices, subscriptions (one, or in bulk), delivery webhooks, quiet hours, and what Notee does for it
(subscriber counts, topics, the cycle calendar, the delivery summary).
"""

from __future__ import annotations

import typer

from notee.cli.remote_client import (
    PAYLOAD_HELP,
    USER_HELP,
    AsJson,
    instant,
    pairs,
    payload_of,
    print_calendar,
    print_json,
    say,
    sdk_client,
    variants_of,
)

template_app = typer.Typer(help="Notification templates (NOTEE_API_KEY).", no_args_is_help=True)
user_app = typer.Typer(help="Users and their devices (NOTEE_API_KEY).", no_args_is_help=True)
webhook_app = typer.Typer(
    help="Delivery webhooks: endpoints and their deliveries (NOTEE_API_KEY; docs/WEBHOOKS.md).", no_args_is_help=True
)


# --- templates, users, subscriptions -----------------------------------------------------------------


@template_app.command("put")
def template_put(
    method: str = typer.Argument(..., help="TOPIC, CYCLE or SINGLE."),
    type: str = typer.Argument(..., help="Notification type, e.g. news."),
    title: str = typer.Option(..., help="Title; may hold {{variables}} (empty for a background push)."),
    body: str = typer.Option(..., help="Body; may hold {{variables}}."),
    data: list[str] = typer.Option([], help="KEY=VALUE sent with the push (repeatable)."),
    ttl: int | None = typer.Option(None, help="Seconds the provider keeps an undelivered push."),
    priority: str | None = typer.Option(None, help="high (default) or normal."),
    payload: str | None = typer.Option(None, "--payload", help=PAYLOAD_HELP),
    variants: str | None = typer.Option(
        None, "--variants", help='Locale variants as JSON: {"de": {"title": ..., "body": ..., "subtitle": ...}}.'
    ),
    subtitle: list[str] = typer.Option(
        [], "--subtitle", help="LOCALE=TEXT: that variant's own iOS subtitle, over --variants (repeatable)."
    ),
    as_json: AsJson = False,
) -> None:
    """Create or update a template (a whole replacement: what is not given is not kept)."""
    with sdk_client() as notee:
        template = notee.put_template(
            method.upper(),
            type,
            title=title,
            body=body,
            data=pairs(data, "--data") or None,
            ttl_seconds=ttl,
            priority=priority,
            payload=payload_of(payload, None, None, None, False),
            variants=variants_of(variants, pairs(subtitle, "--subtitle")),
        )
    say(f"template {template.method}/{template.type} saved (version {template.version})", template, as_json)


@template_app.command("show")
def template_show(
    method: str = typer.Argument(..., help="TOPIC, CYCLE or SINGLE."),
    type: str = typer.Argument(..., help="Notification type, e.g. news."),
) -> None:
    """One template, as JSON."""
    with sdk_client() as notee:
        print_json(notee.get_template(method.upper(), type))


@template_app.command("delete")
def template_delete(
    method: str = typer.Argument(..., help="TOPIC, CYCLE or SINGLE."),
    type: str = typer.Argument(..., help="Notification type, e.g. news."),
    as_json: AsJson = False,
) -> None:
    """Delete a template; its subscriptions stop receiving."""
    with sdk_client() as notee:
        notee.delete_template(method.upper(), type)
    gone = {"method": method.upper(), "type": type, "deleted": True}
    say(f"template {method.upper()}/{type} deleted", gone, as_json)


@template_app.command("list")
def template_list() -> None:
    """The service's templates, one JSON object a line."""
    with sdk_client() as notee:
        for template in notee.list_templates():
            print_json(template)


@user_app.command("put")
def user_put(
    service_user_id: str = typer.Argument(..., help="Your own id of the user."),
    name: str = typer.Option("", help="The user's name."),
    locale: str | None = typer.Option(None, help="BCP 47 tag choosing templates' locale variants, e.g. pt-BR."),
    timezone: str | None = typer.Option(None, help="IANA time zone (local-time publishes, quiet hours)."),
    quiet: str | None = typer.Option(None, help="Quiet hours HH:MM-HH:MM local, e.g. 22:00-07:00."),
    as_json: AsJson = False,
) -> None:
    """Create or update a user; prints Notee's user_id (with --json, the user)."""
    window = None
    if quiet is not None:
        start, _, end = quiet.partition("-")
        window = {"start": start, "end": end}
    with sdk_client() as notee:
        user = notee.put_user(service_user_id, name, locale=locale, timezone=timezone, quiet_hours=window)
    say(user.user_id, user, as_json)


@user_app.command("show")
def user_show(user: str = typer.Argument(..., help=USER_HELP)) -> None:
    """One user, as JSON."""
    with sdk_client() as notee:
        print_json(notee.get_user(user))


@user_app.command("list")
def user_list(
    created_since: str | None = typer.Option(
        None, help="Only users created at or after this RFC 3339 time (with its offset)."
    ),
    has_devices: bool | None = typer.Option(
        None, "--has-devices/--no-devices", help="Only users with a device, or only users without one."
    ),
    platform: str | None = typer.Option(None, help="Only users with a device of this platform: IOS, AOS or WEB."),
    limit: int | None = typer.Option(None, min=1, help="At most this many (default: every user)."),
) -> None:
    """The service's users, newest first, one JSON object a line (every page, or --limit)."""
    since = instant(created_since, "--created-since")
    with sdk_client() as notee:
        users = notee.iter_users(
            created_since=since,
            has_devices=has_devices,
            platform=platform.upper() if platform else None,
            page_size=min(limit or 200, 200),
        )
        for n, user in enumerate(users):
            if limit is not None and n >= limit:
                break
            print_json(user)


@user_app.command("device")
def user_device(
    user_id: str = typer.Argument(..., help=USER_HELP),
    token: str = typer.Argument(..., help="The device's push token."),
    os: str = typer.Option(..., help="AOS (FCM) or IOS (APNs)."),
    region: str = typer.Option("", help="Optional region code, e.g. KR."),
    app_version: str | None = typer.Option(None, help="The app's version, e.g. 5.2.1 (left out: unchanged)."),
    as_json: AsJson = False,
) -> None:
    """Register a device (push token) of a user."""
    with sdk_client() as notee:
        device = notee.add_device(user_id, token, os.upper(), region, app_version=app_version)
    say(f"device {device.os} registered", device, as_json)


def subscribe(
    user_id: str = typer.Argument(..., help=USER_HELP),
    type: str = typer.Argument(..., help="The template's notification type."),
    topic: str | None = typer.Argument(None, help="Topic (TOPIC templates); omit for a CYCLE schedule."),
    days: str | None = typer.Option(None, help="CYCLE: days, e.g. MON,WED,FRI."),
    at: str | None = typer.Option(None, help="CYCLE: local time HH:MM."),
    timezone: str | None = typer.Option(None, help="CYCLE: IANA zone (default: the service's)."),
    as_json: AsJson = False,
) -> None:
    """Subscribe a user to a topic (`notee subscribe USER news sports`) or to a recurring schedule
    (`notee subscribe USER daily --days MON,FRI --at 09:30`)."""
    with sdk_client() as notee:
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
    schedule = f", {result.schedule}" if result.schedule else ""
    say(f"{result.status}: {result.devices} device(s){schedule}", result, as_json)


BULK_CHUNK = 1000  # user ids per request: the bulk endpoint's maximum


def subscribe_bulk(
    type: str = typer.Argument(..., help="The TOPIC template's notification type."),
    topic: str = typer.Argument(..., help="The topic."),
    user_ids: list[str] = typer.Argument(None, help="Notee user_ids; none: read them from --file."),
    file: typer.FileText | None = typer.Option(None, help="One user_id a line ('-': standard input)."),
    as_json: AsJson = False,
) -> None:
    """Subscribe many users to a topic, 1,000 per request; prints the counts and one JSON line per
    user not found (exit 1 then). With --json: the API's answers as one, ``{results, subscribed,
    already_subscribed, not_found}`` (the results of every request)."""
    ids = list(user_ids or [])
    if file is not None:
        ids += [line.strip() for line in file if line.strip()]
    if not ids:
        raise typer.BadParameter("give user ids, or --file with one a line")
    counts = {"subscribed": 0, "already_subscribed": 0, "not_found": 0}
    results = []
    with sdk_client() as notee:
        for i in range(0, len(ids), BULK_CHUNK):
            for item in notee.bulk_subscribe(type, topic, ids[i : i + BULK_CHUNK]).results:
                counts[item.status] += 1
                results.append(item.model_dump(mode="json"))
                if item.status == "not_found" and not as_json:
                    print_json(item)
    say(" · ".join(f"{name} {n}" for name, n in counts.items()), {"results": results, **counts}, as_json)
    if counts["not_found"]:
        raise typer.Exit(1)


# --- insight: subscriber counts, the cycle calendar, the delivery summary ----------------------------


def subscribers() -> None:
    """Subscribed users per TOPIC and CYCLE template, one JSON object a line."""
    with sdk_client() as notee:
        for count in notee.get_subscriber_counts().items:
            print_json(count)


def topics(
    type: str | None = typer.Option(None, help="Only this TOPIC template's topics."),
    limit: int = typer.Option(1000, min=1, help="At most this many topics."),
) -> None:
    """The service's topics that have subscribers, with their counts, one JSON object a line."""
    shown = 0
    cursor: str | None = None
    with sdk_client() as notee:
        while shown < limit:
            page = notee.list_topics(type=type, cursor=cursor, limit=min(limit - shown, 1000))
            for topic in page.items:
                print_json(topic)
            shown += len(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor


def calendar(hours: int = typer.Option(24, min=1, help="How far ahead, in hours (at most a week).")) -> None:
    """The cycle calendar: one JSON object a line per coming minute at which templates fall due."""
    with sdk_client() as notee:
        cal = notee.get_calendar(hours=hours)
    print_calendar(cal)


def summary(hours: int = typer.Option(24, min=1, help="The current hour and this many - 1 before it.")) -> None:
    """What the service's jobs did in the last hours, per hour, as JSON."""
    with sdk_client() as notee:
        print_json(notee.get_delivery_summary(hours=hours))


# --- delivery webhooks -----------------------------------------------------------------------------


@webhook_app.command("create")
def webhook_create(
    url: str = typer.Argument(..., help="The HTTPS URL Notee POSTs events to."),
    event: list[str] = typer.Option(
        [],
        "--event",
        help="An event it receives (repeatable; default the four job and token events; receipt.* only when named).",
    ),
    description: str | None = typer.Option(None, help="A note for you."),
) -> None:
    """Register an endpoint; prints it as JSON with its signing secret, which is shown only now."""
    with sdk_client() as notee:
        print_json(notee.create_webhook(url, events=event or None, description=description))


@webhook_app.command("list")
def webhook_list() -> None:
    """The service's endpoints, one JSON object a line (never a secret)."""
    with sdk_client() as notee:
        for endpoint in notee.list_webhooks():
            print_json(endpoint)


@webhook_app.command("delete")
def webhook_delete(endpoint_id: str, as_json: AsJson = False) -> None:
    """Delete an endpoint and its deliveries."""
    with sdk_client() as notee:
        notee.delete_webhook(endpoint_id)
    say(f"webhook {endpoint_id} deleted", {"endpoint_id": endpoint_id, "deleted": True}, as_json)


@webhook_app.command("deliveries")
def webhook_deliveries(
    endpoint_id: str,
    state: str | None = typer.Option(None, help="pending, delivered or failed."),
    limit: int = typer.Option(50, min=1, max=200, help="At most this many, newest first."),
) -> None:
    """An endpoint's recent deliveries, one JSON object a line."""
    with sdk_client() as notee:
        for delivery in notee.list_webhook_deliveries(endpoint_id, state=state, limit=limit).items:
            print_json(delivery)


@webhook_app.command("resend")
def webhook_resend(endpoint_id: str, delivery_id: int, as_json: AsJson = False) -> None:
    """Send a delivery again (same event id and body)."""
    with sdk_client() as notee:
        delivery = notee.resend_webhook_delivery(endpoint_id, delivery_id)
    line = f"delivery {delivery.delivery_id} ({delivery.event_type} {delivery.event_id}) {delivery.state}"
    say(line, delivery, as_json)


def quiet_hours(
    window: str | None = typer.Argument(
        None, help="HH:MM-HH:MM local (22:00-07:00 crosses midnight); 'off' clears; nothing: show."
    ),
    as_json: AsJson = False,
) -> None:
    """The service's quiet hours: TOPIC pushes due inside them are held (or dropped, per template)."""
    with sdk_client() as notee:
        if window is None:
            answer = notee.get_quiet_hours()
        elif window == "off":
            answer = notee.put_quiet_hours(None)
        else:
            start, _, end = window.partition("-")
            answer = notee.put_quiet_hours(start, end)
    q = answer.quiet_hours
    say(f"{q['start']}-{q['end']}" if q else "off", answer, as_json)
