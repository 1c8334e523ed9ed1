"""The commands over HTTP that send (NOTEE_API_KEY): `notee publish` to a topic, a condition, a filter,
segments or a list of users (following the job with a progress line), `notee send` to one user, and
`notee jobs list|show|cancel` (and `requeue`, the operator's, with NOTEE_ADMIN_TOKEN).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer

from notee.cli.remote_client import (
    PAYLOAD_HELP,
    SEND_AT_HELP,
    USER_HELP,
    AsJson,
    fail,
    instant,
    json_option,
    pairs,
    payload_of,
    print_json,
    say,
    sdk_client,
)

PayloadOpt = typer.Option(None, "--payload", help=PAYLOAD_HELP)
BadgeOpt = typer.Option(None, "--badge", help="The app icon's badge (0 clears it).")
SoundOpt = typer.Option(None, "--sound", help="The sound's name.")
ImageOpt = typer.Option(None, "--image", help="An https:// image URL.")
TtlOpt = typer.Option(None, "--ttl", help="Seconds FCM and APNs keep the push for an offline device (0..2419200).")
PriorityOpt = typer.Option(None, "--priority", help="high or normal: replaces the template's priority.")
BackgroundOpt = typer.Option(
    False, "--background", help="A silent background push (the template's title and body must be empty)."
)

jobs_app = typer.Typer(
    help="Publish jobs: list, show, cancel (NOTEE_API_KEY); requeue (NOTEE_ADMIN_TOKEN).", no_args_is_help=True
)


def publish(
    type: str = typer.Argument(..., help="The template's notification type."),
    topic: str | None = typer.Argument(None, help="The topic (the same as --topic)."),
    topic_option: str | None = typer.Option(None, "--topic", help="Every subscriber of this topic."),
    condition: str | None = typer.Option(
        None, "--condition", help="FCM's condition over topics: \"'a' in topics && !('b' in topics)\"."
    ),
    filter_json: str | None = typer.Option(None, "--filter", help="A filter: its JSON (a list of groups)."),
    segment: list[str] = typer.Option([], "--segment", help="Users in this saved segment (repeatable)."),
    exclude_segment: list[str] = typer.Option(
        [], "--exclude-segment", help="…and not in this one (repeatable; with --segment)."
    ),
    users: str | None = typer.Option(
        None, "--users", help="Your user ids: a file (one a line, or a JSON list) or a comma-separated list."
    ),
    platform: list[str] = typer.Option([], "--platform", help="Only devices of IOS, AOS or WEB (repeatable)."),
    method: str = typer.Option("TOPIC", "--method", help="The template's method: TOPIC, or SINGLE (not for topics)."),
    var: list[str] = typer.Option([], "--var", help="NAME=VALUE for a {{NAME}} placeholder (repeatable)."),
    data: list[str] = typer.Option([], help="KEY=VALUE merged over the template's data (repeatable)."),
    title: str | None = typer.Option(None, help="Replaces the template's title."),
    body: str | None = typer.Option(None, help="Replaces the template's body."),
    local_time: str | None = typer.Option(
        None, "--local-time", help="HH:MM: reach each recipient when its time zone's clock next shows it."
    ),
    idempotency_key: str | None = typer.Option(None, help="Repeat-safe key (default: a new one)."),
    send_at: str | None = typer.Option(None, "--send-at", help=SEND_AT_HELP),
    wait: bool = typer.Option(False, "--wait", help="Follow the job with a progress line until it ends."),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print what would be sent (per locale and platform), the reach and warnings; send nothing.",
    ),
    timeout: float | None = typer.Option(None, help="With --wait: give up waiting after this many seconds."),
    payload: str | None = PayloadOpt,
    badge: int | None = BadgeOpt,
    sound: str | None = SoundOpt,
    image: str | None = ImageOpt,
    background: bool = BackgroundOpt,
    ttl: int | None = TtlOpt,
    priority: str | None = PriorityOpt,
    as_json: AsJson = False,
) -> None:
    """Publish a template to one target: TOPIC (or --topic), --condition, --filter, --segment or
    --users, optionally narrowed by --platform; prints the job id (with --json, the API's answer, or
    with --wait the finished job). A user list also says how many of its ids are unknown (stderr)."""
    fields: dict[str, Any] = {
        "variables": pairs(var, "--var") or None,
        "data": pairs(data, "--data") or None,
        "title": title,
        "body": body,
        "local_time": local_time,
        "idempotency_key": idempotency_key,
        "send_at": instant(send_at),
        "payload": payload_of(payload, badge, sound, image, background),
        "ttl_seconds": ttl,
        "priority": priority,
    }
    targets = _targets(topic_option if topic is None else topic, condition, filter_json, segment, users)
    general = {"exclude_segments": exclude_segment or None, "platforms": platform or None, "method": method}
    with sdk_client() as notee:
        if dry_run:  # the general route's preview: a topic given either way is its topic target
            _print_preview(notee.preview(type, **targets, **general, **fields), as_json)
            return
        if topic is not None and topic_option is None and not platform and method == "TOPIC" and _one(targets):
            accepted = notee.publish_topic(type, topic, **fields)  # the original form: `notee publish TYPE TOPIC`
        else:
            accepted = notee.publish(type, **targets, **general, **fields)
            if getattr(accepted, "unknown_users", None):
                typer.echo(f"{accepted.unknown_users} unknown user id(s) skipped", err=True)
        if not wait:
            say(accepted.job_id, accepted, as_json)
            return
        if not as_json:
            typer.echo(accepted.job_id)
        job = _follow(notee, accepted.job_id, timeout)
    if as_json:
        print_json(job)
    if job.state != "done":
        fail(f"job {job.job_id} {job.state}" + (f": {job.error}" if job.error else ""))


def _one(targets: dict[str, Any]) -> bool:
    return len([v for v in targets.values() if v]) == 1


def _print_preview(preview: Any, as_json: bool) -> None:
    """A preview as prose (or, with --json, the API's answer): the reach, each variant's text and
    each platform's provider and size against its limit, then the warnings (stderr)."""
    if as_json:
        print_json(preview)
        return
    reach = preview.reach
    devices = "unknown" if reach.devices is None else f"{reach.devices:,}"
    users = "unknown" if reach.users is None else f"{reach.users:,}"
    typer.echo(f"dry run: nothing sent · reach: {users} user(s), {devices} device(s) ({reach.method})")
    for v in preview.variants:
        typer.echo(f"[{v.locale or 'default'}] {v.title!r} · {v.body!r}" + (f" · data {v.data}" if v.data else ""))
        subtitle = ((v.payload or {}).get("ios") or {}).get("subtitle")
        if subtitle:  # the variant's own, else the payload's: what an iOS device shows under the title
            typer.echo(f"  iOS subtitle: {subtitle!r}")
        for os, p in v.platforms.items():
            flag = "  OVER THE LIMIT" if p.over_limit else ""
            typer.echo(f"  {os} via {p.provider}: {p.bytes:,}/{p.limit:,} bytes{flag}")
    for warning in preview.warnings:
        typer.echo(f"warning: {warning}", err=True)


def _targets(
    topic: str | None, condition: str | None, filter_json: str | None, segment: list[str], users: str | None
) -> dict[str, Any]:
    """The publish's target options as the SDK's ``publish`` takes them (None: not given)."""
    return {
        "topic": topic,
        "condition": condition,
        "filter": json_option(filter_json, "--filter") if filter_json is not None else None,
        "segments": segment or None,
        "users": _user_ids(users) if users is not None else None,
    }


def _user_ids(value: str) -> list[str]:
    """--users: a file of ids (one a line, or a JSON list), else a comma-separated list."""
    path = Path(value)
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("["):
            ids = json_option(text, "--users")
            return [str(i) for i in ids]
        return [line.strip() for line in text.splitlines() if line.strip()]
    return [v.strip() for v in value.split(",") if v.strip()]


def _follow(notee: Any, job_id: str, timeout: float | None) -> Any:
    """The job once its counts are final, with a progress line on stderr meanwhile; exit 1 after
    ``timeout`` seconds (the job goes on)."""
    # deferred: the SDK is its own distribution, loaded only by these commands (see remote_client.sdk_client).
    from notee_sdk import JobTimeout

    bar = _ProgressLine()
    try:
        return notee.wait(job_id, on_progress=bar.update, poll_interval=0.5, timeout=timeout)
    except JobTimeout as exc:
        fail(str(exc))
    finally:
        bar.close()


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
    with sdk_client() as notee:
        for n, job in enumerate(notee.iter_jobs(state=state, method=method, type=type, page_size=min(limit, 200))):
            if n >= limit:
                break
            print_json(job)


@jobs_app.command("show")
def jobs_show(job_id: str) -> None:
    """One job's state and counts, as JSON."""
    with sdk_client() as notee:
        print_json(notee.get_job(job_id))


@jobs_app.command("cancel")
def jobs_cancel(job_id: str, as_json: AsJson = False) -> None:
    """Cancel a scheduled, queued or running job; prints its final state and counts."""
    with sdk_client() as notee:
        job = notee.cancel_job(job_id)
    say(
        f"job {job.job_id} {job.state}: sent {job.sent:,} of {job.targeted:,} read · failed {job.failed:,}",
        job,
        as_json,
    )


@jobs_app.command("requeue")
def jobs_requeue(job_id: str = typer.Argument(..., help="The failed job's id."), as_json: AsJson = False) -> None:
    """Resume a failed job from its tasks' checkpoints, once its cause is fixed (operators: the admin
    API, NOTEE_ADMIN_TOKEN); what was sent is not sent again."""
    with sdk_client() as notee:
        job = notee.requeue_job(job_id)
    say(
        f"job {job.job_id} requeued: {job.state}, {job.tasks_done} of {job.tasks} tasks done, {job.sent:,} sent so far",
        job,
        as_json,
    )


def send(
    user_id: str = typer.Argument(..., help=USER_HELP),
    type: str = typer.Argument(..., help="The SINGLE template's notification type."),
    var: list[str] = typer.Option([], "--var", help="NAME=VALUE for a {{NAME}} placeholder (repeatable)."),
    data: list[str] = typer.Option([], help="KEY=VALUE merged over the template's data (repeatable)."),
    send_at: str | None = typer.Option(None, "--send-at", help=SEND_AT_HELP),
    payload: str | None = PayloadOpt,
    badge: int | None = BadgeOpt,
    sound: str | None = SoundOpt,
    image: str | None = ImageOpt,
    background: bool = BackgroundOpt,
    ttl: int | None = TtlOpt,
    priority: str | None = PriorityOpt,
    as_json: AsJson = False,
) -> None:
    """Send a SINGLE template to every device of one user, now (prints the counts; exit 1 when one
    failed), or at --send-at (prints the scheduled job's id)."""
    when = instant(send_at)
    asked: dict[str, Any] = {
        "variables": pairs(var, "--var") or None,
        "data": pairs(data, "--data") or None,
        "payload": payload_of(payload, badge, sound, image, background),
        "ttl_seconds": ttl,
        "priority": priority,
    }
    with sdk_client() as notee:
        if when is not None:
            accepted = notee.send_to_user(user_id, type, send_at=when, **asked)
            say(accepted.job_id, accepted, as_json)
            return
        result = notee.send_to_user(user_id, type, **asked)
    counts = (
        f"devices {result.devices} · delivered {result.delivered} · failed {result.failed} · pruned {result.pruned}"
    )
    say(counts, result, as_json)
    if result.failed:
        raise typer.Exit(1)
