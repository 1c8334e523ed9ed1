"""Single sends (``POST /v1/users/{user_id}/send``): one SINGLE template rendered once per variant
its devices need (never once per device), to every device of one user, delivered at once and
answered with the counts. A send that opts in to quiet hours is checked against the user's window
first (the database's clock): inside it nothing is sent (``QuietDropped`` or ``QuietHoursNow``).
The API sends through its process's ``DeliverySender`` (``sender.send_single``)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from notee.core import clock, notification_id, tracing
from notee.core.errors import QuietDropped, QuietHoursNow
from notee.domain import payload_variants, payloads, services, templates, users, web_payloads
from notee.domain.liquid import Scope
from notee.domain.render import Rendered, TemplateContent, choose_variant, recipient_fields, render
from notee.domain.rules import check_data, check_send_inputs
from notee.providers.base import Message
from notee.providers.payload import Rich
from notee.providers.routing import ProviderSet
from notee.store.cql.engagement import ScopeKeys
from notee.store.mysql import db_now
from notee.store.outage import is_store_outage
from notee.store.recipient_sql import recipient_tags
from notee.store.runtime import Runtime
from notee.usecases.deliver import DeliveryOptions, DeliveryResult, deliver
from notee.usecases.receipts import scope_keys

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SingleSend:
    """One single send: the SINGLE template ``type_`` of ``service`` to every device of ``user_id``,
    with ``variables`` for its placeholders and ``data`` merged over its data. ``quiet_hours``: the
    send opted in to the user's quiet hours (QuietDropped / QuietHoursNow inside them); ``payload``:
    rich fields merged over the template's."""

    service: str
    user_id: str
    type_: str
    variables: dict[str, Any] | None = None
    data: dict[str, str] | None = None
    quiet_hours: bool = False
    payload: dict[str, Any] | None = None  # the rich fields, over the template's (docs/PAYLOADS.md)
    ttl_seconds: int | None = None  # over the template's
    priority: str | None = None  # over the template's
    # The notification id's source of this send's pushes (docs/ENGAGEMENT.md): its stats' id.
    send_id: str = field(default_factory=notification_id.new_single_source)


def prepare_single(runtime: Runtime, send: SingleSend) -> tuple[list[Message], bool, ScopeKeys]:
    """Render the SINGLE template once for every device of the user: (messages, dry_run, the keys
    its receipts are counted under).
    Raises NotFound (user or template), InvalidInput (missing variables, bad data) or
    PayloadTooLarge, before anything is sent."""
    service, variables = send.service, send.variables
    extra = check_data(send.data)
    asked = {"data": extra, "ttl_seconds": send.ttl_seconds, "priority": send.priority}
    overrides = {k: v for k, v in asked.items() if v is not None and v != {}} or None
    check_send_inputs(variables, overrides)
    with runtime.sessions() as session:
        service_row = services.get_service(session, service)
        dry_run = service_row.delivery_mode == "dry_run"
        user = users.get_user(session, service, send.user_id)
        template = templates.get_template(session, runtime.statements, service, "SINGLE", send.type_)
        devices = users.list_devices(session, service, send.user_id)
        now = db_now(session) if send.quiet_hours else None
        reads = recipient_fields(template.content())
        user_tags = recipient_tags(session, service, [send.user_id]).get(send.user_id, {}) if "tags" in reads else None
    window = user.quiet_hours or service_row.quiet_hours
    if now is not None and window is not None:
        _check_quiet(now, user.timezone or service_row.timezone, window, template.quiet_hours, len(devices))
    content = template.content()
    spec = payloads.merge(template.payload, send.payload)
    pushes, riches = _render_pushes(
        _Renderable(content, variables, overrides, spec),
        _recipient(user, service_row.timezone, user_tags) if reads else None,
        [d.locale or user.locale for d in devices],
    )
    if any(d.os == "WEB" for d in devices):  # refused before anything is sent, never per device
        first = next(iter(riches.values()), None)
        web_payloads.check_web_size(first.spec if first is not None else None, pushes)
    messages = []
    for d in devices:
        which = _which(content, d.locale or user.locale, bool(reads))
        push, rich = pushes[which], riches[which[0]]
        messages.append(
            Message(
                device_token=d.token,
                device_os=d.os,
                title=push.title,
                body=push.body,
                data=push.data,
                ttl_seconds=push.ttl_seconds,
                priority=push.priority,
                collapse_key=rich.collapse_key if rich is not None else None,
                rich=rich,
                notification_id=notification_id.make(send.send_id, d.token),
            )
        )
    return messages, dry_run, scope_keys(send.type_, None, clock.now_utc(), service_row.timezone)


@dataclass(frozen=True, slots=True)
class _Renderable:
    """What a single send renders: the template's content, the request's variables and data
    overrides, and the rich fields (the template's with the request's merged over them)."""

    content: TemplateContent
    variables: dict[str, Any] | None
    overrides: dict[str, Any] | None
    spec: dict[str, Any] | None


def _recipient(user: Any, service_zone: str, user_tags: dict[str, Any] | None) -> dict[str, Any]:
    """The ``recipient`` a template that reads it sees (docs/TEMPLATES.md); its locale is set per device."""
    zone = user.timezone or service_zone
    return {"id": user.service_user_id, "name": user.name, "timezone": zone, "tags": user_tags}


def _which(content: TemplateContent, locale: str | None, personal: bool) -> tuple[str | None, str | None]:
    """The render a device of ``locale`` gets: its variant, and its locale when the text reads the recipient."""
    key = choose_variant(locale, list((content.variants or {}).keys()))
    return key, locale if personal else None


def _render_pushes(
    what: _Renderable, recipient: dict[str, Any] | None, locales: list[str | None]
) -> tuple[dict[tuple[str | None, str | None], Rendered], dict[str | None, Rich | None]]:
    """Each render the devices (of ``locales``) need, once: per variant, or, when the template reads
    the recipient (``recipient`` given), per (variant, locale); and the rich fields per variant
    (a variant's own subtitle over them), their text rendered with the first (a request that cannot
    render is refused even when the user has no device)."""

    def one(which: tuple[str | None, str | None], locale: str | None) -> Rendered:
        scope = Scope(locale=which[0]) if recipient is None else Scope(recipient | {"locale": locale}, which[0])
        return render(what.content.content_for(which[0]), what.variables, what.overrides, scope)

    wanted = [(_which(what.content, locale, recipient is not None), locale) for locale in locales]
    first = wanted[0] if wanted else (_which(what.content, None, recipient is not None), None)
    pushes: dict[tuple[str | None, str | None], Rendered] = {}
    (pushes[first[0]], subtitles), rich_spec = payloads.render_with(
        what.spec,
        what.content.defaults,
        what.variables,
        lambda: payload_variants.with_missing(
            lambda: one(*first), lambda: payload_variants.render_subtitles(what.content, what.variables)
        ),
    )
    for which, locale in wanted:
        if which not in pushes:
            pushes[which] = one(which, locale)
    specs = {tag: payload_variants.for_variant(rich_spec, subtitles.get(tag) if tag else None) for tag, _ in pushes}
    for which, push in pushes.items():
        payloads.check_rendered(specs[which[0]], {which[0]: push})
    return pushes, {tag: Rich.from_spec(spec) for tag, spec in specs.items()}


def _check_quiet(now: datetime, zone_name: str, window: tuple[int, int], mode: str, devices: int) -> None:
    """An opted-in single send inside the user's quiet hours: QuietDropped (the template drops) or
    QuietHoursNow (it holds: the caller may send again when they end)."""
    moment = now.replace(tzinfo=UTC)
    if not clock.in_window(moment, zone_name, *window):
        return
    if mode == "drop":
        raise QuietDropped(devices)
    until = clock.window_end(moment, zone_name, *window)
    raise QuietHoursNow(f"the user is in quiet hours until {until:%Y-%m-%dT%H:%M}Z", until_at=until)


async def send_single(
    runtime: Runtime, providers: ProviderSet, send: SingleSend, stop: asyncio.Event | None = None
) -> tuple[int, DeliveryResult]:
    """``POST /v1/users/{user_id}/send``: (devices targeted, result). When ``stop`` is set (the API
    is shutting down) a retry wait ends at once: what waited is dead-lettered, prunes and dead
    letters are recorded, and the counts say so."""
    attributes = {"notee.service": send.service, "notee.type": send.type_}
    with tracing.span("notee.send", attributes):  # its provider requests are its children
        messages, dry_run, keys = await asyncio.to_thread(prepare_single, runtime, send)
        ttl_s = runtime.settings.receipts_retention_days * 86_400
        if messages:  # known before anything is sent: a receipt may come back before this call ends
            await asyncio.to_thread(runtime.statements.add_source, send.service, send.send_id, keys, (0, 0), ttl_s)
        options = DeliveryOptions(dry_run=dry_run, stop=stop, dead_letter_on_stop=True)
        result = await deliver(runtime, providers, send.service, messages, options)
    if messages:
        try:
            sent = (len(messages), result.delivered)
            await asyncio.to_thread(runtime.statements.add_source, send.service, send.send_id, keys, sent, ttl_s)
        except Exception as exc:  # the pushes are out: the answer says what was sent; only the stats miss it
            if not is_store_outage(exc):
                raise
            log.warning(
                "single send %s: its sent count was not stored for stats (%s)", send.send_id, type(exc).__name__
            )
    log.info(
        "single send: service=%s type=%s devices=%d delivered=%d pruned=%d failed=%d (no_credentials=%d)%s",
        send.service,
        send.type_,
        len(messages),
        result.delivered,
        result.pruned,
        len(result.failed),
        result.no_credentials,
        " dry run" if dry_run else "",
    )
    return len(messages), result
