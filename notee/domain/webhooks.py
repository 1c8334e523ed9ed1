"""Delivery webhooks, the service's side: endpoints (register, list, delete), their deliveries (list,
re-send), the signature, and the address rules (docs/WEBHOOKS.md).

The signing secret is generated here, returned once (at creation) and stored encrypted with the
credentials cipher (``notee.core.crypto.SecretsBox``, NOTEE_CREDENTIALS_KEY); nothing here logs it.
Unit of work: every function takes the caller's session and never commits.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from cryptography.fernet import InvalidToken
from sqlalchemy.orm import Session

from notee.core.crypto import SecretsBox
from notee.core.errors import Conflict, InvalidInput, NotFound, ProviderConfigError
from notee.core.settings import Settings
from notee.core.vocabulary import DEFAULT_WEBHOOK_EVENTS, WEBHOOK_EVENTS
from notee.store import webhooks_sql as store
from notee.store.webhooks_sql import Delivery as Delivery  # re-exported: the API names them through this layer
from notee.store.webhooks_sql import Endpoint as Endpoint

log = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
SIGNATURE_HEADER = "Notee-Signature"
MAX_URL_LEN = 2048
# Spaces and control characters (C0, DEL, C1) have no place in a URL; urlsplit would drop some of
# them (tabs, newlines, leading spaces) while checking, and the URL would be stored with them.
_URL_REFUSED = r"\x00-\x20\x7f-\x9f"
_URL_REFUSED_RE = re.compile(f"[{_URL_REFUSED}]")
# ``check_url`` as the OpenAPI document states it for the default settings: https (any case), then
# no space or control character. NOTEE_WEBHOOK_ALLOW_HTTP adds http://, which no document can say.
URL_PATTERN = f"^[Hh][Tt][Tt][Pp][Ss]://[^{_URL_REFUSED}]+$"
# A host of digits, hex and dots only: perhaps an IPv4 address in one of inet_aton's old forms.
_LEGACY_IPV4 = re.compile(r"(0[xX][0-9a-fA-F]*|[0-9]+)(\.(0[xX][0-9a-fA-F]*|[0-9]+)){0,3}")


@dataclass(frozen=True)
class NewEndpoint:
    endpoint: Endpoint
    secret: str = field(repr=False)  # shown to the service once, never again


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``Notee-Signature`` header value: ``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``."""
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode("ascii") + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def _bad_url(message: str, kind: str) -> InvalidInput:
    return InvalidInput(f"url {message}", details=[{"loc": ["body", "url"], "type": kind, "msg": message}])


def address_refused(address: str) -> str | None:
    """Why an endpoint may not be at ``address`` (an IP), or None: loopback, private, link-local
    (cloud metadata at 169.254.169.254), multicast, reserved and unspecified addresses are refused, so
    a tenant cannot make Notee POST into the network it runs in (SSRF). An IPv6 address that carries
    an IPv4 one a router would send the packet on to (IPv4-mapped, 6to4 2002::/16, Teredo 2001::/32;
    NAT64 64:ff9b::/96 is refused whole, as reserved) is judged by that IPv4 address too."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        else:
            for form, embedded in _embedded_ipv4(ip):
                reason = _ip_refused(embedded)
                if reason:
                    return f"{form}-embedded {reason}"
    return _ip_refused(ip)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address routes to: 6to4's relay target, Teredo's server and client."""
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if ip.sixtofour is not None:
        found.append(("6to4", ip.sixtofour))
    if ip.teredo is not None:
        found.extend(("Teredo", v4) for v4 in ip.teredo)
    return found


def _ip_refused(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    # Most specific first: Python counts link-local and unspecified addresses as private too.
    for kind in ("loopback", "link_local", "unspecified", "multicast", "reserved", "private"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    if not ip.is_global:
        return "not public"
    return None


def _literal_address(host: str) -> str | None:
    """``host`` as an IP address when it is one, in any form a resolver accepts: the usual ones, and
    the old IPv4 forms (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``) that getaddrinfo turns
    into an address at delivery although they look like names here. None: a host name."""
    host = host.removesuffix(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if _LEGACY_IPV4.fullmatch(host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            return None
    return None


def check_url(url: str, settings: Settings) -> str:
    """The endpoint URL as stored, or InvalidInput: https (http only with NOTEE_WEBHOOK_ALLOW_HTTP),
    no space or control character, a host, no user:password, no fragment; an IP literal or
    ``localhost`` must be public unless NOTEE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES. (Host names are
    checked again, resolved, at each send.)"""
    if len(url) > MAX_URL_LEN:
        raise _bad_url(f"is longer than {MAX_URL_LEN} characters", "string_too_long")
    if _URL_REFUSED_RE.search(url):
        raise _bad_url("must not contain spaces or control characters", "url_characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _bad_url(f"is not a valid URL ({exc})", "url_parsing") from exc
    allowed = ("https", "http") if settings.webhook_allow_http else ("https",)
    if parts.scheme not in allowed:
        raise _bad_url("must be https://", "url_scheme")
    host = parts.hostname
    if not host:
        raise _bad_url("has no host", "url_parsing")
    if parts.username is not None or parts.password is not None:
        raise _bad_url("must not carry a user or password", "url_userinfo")
    if parts.fragment:
        raise _bad_url("must not have a #fragment", "url_fragment")
    if port == 0:
        raise _bad_url("has port 0", "url_parsing")
    if not settings.webhook_allow_private_addresses:
        reason = (
            "loopback"
            if host.removesuffix(".") == "localhost" or host.endswith((".localhost", ".localhost."))
            else None
        )
        literal = _literal_address(host)  # None: a host name, resolved and checked before each attempt
        reason = reason or (address_refused(literal) if literal else None)
        if reason:
            raise _bad_url(f"points at a {reason} address, which Notee does not call", "url_address")
    return url


def check_events(events: Sequence[str] | None) -> list[str]:
    """The events an endpoint receives, in vocabulary order; default the four job and token events
    (the receipt.* events are opt-in: a busy app posts many)."""
    if events is None:
        return list(DEFAULT_WEBHOOK_EVENTS)
    unknown = [e for e in events if e not in WEBHOOK_EVENTS]
    if unknown or not events:
        raise InvalidInput(
            "events must name at least one of " + ", ".join(WEBHOOK_EVENTS),
            details=[
                {"loc": ["body", "events"], "type": "enum", "msg": f"unknown event(s): {', '.join(unknown) or '-'}"}
            ],
        )
    return sorted(set(events), key=WEBHOOK_EVENTS.index)


def _require_box(box: SecretsBox | None) -> SecretsBox:
    if box is None:
        raise ProviderConfigError("NOTEE_CREDENTIALS_KEY is not set: webhook secrets cannot be stored")
    return box


def create_endpoint(
    session: Session,
    box: SecretsBox | None,
    settings: Settings,
    service: str,
    *,
    url: str,
    events: Sequence[str] | None,
    description: str | None,
) -> NewEndpoint:
    """Register an endpoint; the secret is in the answer only (stored encrypted). Conflict beyond
    NOTEE_WEBHOOK_MAX_ENDPOINTS endpoints."""
    checked_url, checked_events = check_url(url, settings), check_events(events)
    sealed = _require_box(box)
    if store.count_endpoints(session, service) >= settings.webhook_max_endpoints:
        raise Conflict(f"a service may have at most {settings.webhook_max_endpoints} webhook endpoints")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    endpoint = store.insert_endpoint(
        session,
        service=service,
        url=checked_url,
        events=checked_events,
        description=description,
        secret=sealed.encrypt(secret.encode("ascii")),
    )
    log.info("webhook endpoint %s created: service=%s events=%s", endpoint.endpoint_id, service, checked_events)
    return NewEndpoint(endpoint, secret)


def open_secret(box: SecretsBox | None, sealed: bytes) -> str:
    """The signing secret of an endpoint (the dispatcher, to sign)."""
    return _require_box(box).decrypt(sealed).decode("ascii")


def rotate_secrets_key(session: Session, box: SecretsBox | None) -> int:
    """Re-encrypt every endpoint's secret under the box's current key (``notee credentials
    rotate-key``, in its transaction: all or nothing). ProviderConfigError when one opens with no key."""
    sealed = _require_box(box)
    n = 0
    for endpoint_id, secret in store.all_secrets(session):
        try:
            store.set_secret(session, endpoint_id, sealed.rotate(secret))
        except InvalidToken:
            raise ProviderConfigError(
                f"the secret of webhook endpoint {endpoint_id} opens with none of NOTEE_CREDENTIALS_KEY and "
                "NOTEE_CREDENTIALS_OLD_KEYS: nothing was re-encrypted"
            ) from None
        n += 1
    return n


def get_endpoint(session: Session, service: str, endpoint_id: str) -> Endpoint:
    endpoint = store.get_endpoint(session, service, endpoint_id)
    if endpoint is None:
        raise NotFound("no such webhook endpoint")
    return endpoint


def list_endpoints(session: Session, service: str) -> list[Endpoint]:
    return store.list_endpoints(session, service)


def delete_endpoint(session: Session, service: str, endpoint_id: str) -> None:
    if not store.delete_endpoint(session, service, endpoint_id):
        raise NotFound("no such webhook endpoint")
    log.info("webhook endpoint %s of %s deleted", endpoint_id, service)


def list_deliveries(
    session: Session,
    service: str,
    endpoint_id: str,
    *,
    state: str | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[Delivery]:
    get_endpoint(session, service, endpoint_id)
    return store.list_deliveries(session, service, endpoint_id, state=state, before_id=before_id, limit=limit)


def resend(session: Session, service: str, endpoint_id: str, delivery_id: int) -> Delivery:
    """The delivery is due again now (same event id and body, a new retry window)."""
    if not store.resend(session, service, endpoint_id, delivery_id):
        raise NotFound("no such webhook delivery")
    delivery = store.get_delivery(session, service, endpoint_id, delivery_id)
    assert delivery is not None
    log.info("webhook delivery %d (event %s) of %s queued again", delivery_id, delivery.event_id, service)
    return delivery
