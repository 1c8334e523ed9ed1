"""Which provider sends which device, per service.

- IOS -> APNs when the service has APNs credentials, otherwise through FCM; AOS -> FCM; WEB -> Web
  Push with the service's VAPID key (docs/WEB-PUSH.md), to the push service of each subscription.
- A device whose platform has no provider (AOS without FCM credentials; IOS with neither) has no
  route: delivery counts it failed with reason ``no_credentials`` (never sent, never pruned).
- ``settings.emulator_url`` changes where the providers connect (the emulator instead of FCM/APNs),
  not which credentials they need. Every process announces it at start (``notee.core.logs.announce_emulator``).
- The ``log`` provider is used only for a send or job in ``dry_run`` delivery mode (an admin's
  choice per service): it records every push and sends nothing.
Providers are built once per (service, credentials) and reused; HTTP/2 connections are pooled per
origin and shared by all services of the process (the bearer token is per request).
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
import ssl
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from notee.core.settings import Settings
from notee.core.vocabulary import ApnsCredentials, ProviderCredentials
from notee.providers.apns import PER_REQUEST_HEADERS, PRODUCTION_URL, SANDBOX_URL, ApnsJwt, ApnsProvider
from notee.providers.base import Message, Provider
from notee.providers.emulator import emulator_apns, emulator_fcm
from notee.providers.fcm import FCM_URL, FcmProvider, ServiceAccountTokens
from notee.providers.http2_pool import Pool, client_ssl_context
from notee.providers.log import LogProvider
from notee.providers.webpush import WebPushProvider
from notee.providers.webpush_crypto import VapidSigner

log = logging.getLogger(__name__)


NO_CREDENTIALS = "no_credentials"  # the reason of a device no provider of the service can reach
_DEVICE_OS = operator.attrgetter("device_os")


def choose(device_os: str, *, has_apns: bool, has_fcm: bool = True, has_web: bool = False) -> str | None:
    """``"apns"``, ``"fcm"``, ``"web"`` or None (no credentials for this platform) for one device (pure)."""
    if device_os == "WEB":
        return "web" if has_web else None
    if device_os == "IOS" and has_apns:
        return "apns"
    return "fcm" if has_fcm else None


@dataclass
class ServiceProviders:
    fcm: Provider | None  # None: the service has no FCM credentials
    apns: Provider | None  # None: no APNs credentials (iOS devices then go through FCM, if any)
    web: Provider | None = None  # None: no VAPID key (WEB devices have no route)

    @property
    def any(self) -> bool:
        return self.fcm is not None or self.apns is not None or self.web is not None

    def split(self, messages: Sequence[Message]) -> tuple[list[tuple[Provider, list[int]]], list[int]]:
        """Group message indexes by the provider that sends them; and the indexes no provider can send.
        The route of each platform is chosen once per call (a page has one or two platforms), not
        once per message."""
        has_apns, has_fcm = self.apns is not None, self.fcm is not None
        platforms = set(map(_DEVICE_OS, messages))  # in C: a fan-out page is usually of one platform
        if len(platforms) == 1:
            kind = choose(platforms.pop(), has_apns=has_apns, has_fcm=has_fcm, has_web=self.web is not None)
            everyone = list(range(len(messages)))
            provider = None if kind is None else {"apns": self.apns, "fcm": self.fcm, "web": self.web}[kind]
            return ([(provider, everyone)], []) if provider is not None else ([], everyone)
        routes: dict[str, list[int]] = {}  # device_os -> the list of indexes its route collects
        groups: dict[str, list[int]] = {}
        unroutable: list[int] = []
        for i, m in enumerate(messages):
            into = routes.get(m.device_os)
            if into is None:
                kind = choose(m.device_os, has_apns=has_apns, has_fcm=has_fcm, has_web=self.web is not None)
                into = routes[m.device_os] = unroutable if kind is None else groups.setdefault(kind, [])
            into.append(i)
        by_kind = {"apns": self.apns, "fcm": self.fcm, "web": self.web}
        routed = [(by_kind[kind], idx) for kind, idx in groups.items()]
        return [(p, idx) for p, idx in routed if p is not None], unroutable


def _fingerprint(credentials: ProviderCredentials | None) -> str:
    if credentials is None:
        return "none"
    return hashlib.sha256(json.dumps(asdict(credentials), sort_keys=True, default=str).encode()).hexdigest()


class ProviderSet:
    """The process's providers. Build inside the event loop that sends; ``close()`` at shutdown.

    FCM: one pool per origin, shared by every service (the bearer is per request). APNs: one pool
    and one provider token per signing key (team_id, key_id): APNs ties a connection to the key of
    its first token and refuses a connection that changes tokens too often
    (TooManyProviderTokenUpdates), so services with different keys never share a connection, and
    services sharing a key share its connections and its JWT."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._pools: dict[tuple[str, ...], Pool] = {}
        self._apns_tokens: dict[tuple[str, str, str], ApnsJwt] = {}
        self._services: dict[str, tuple[str, ServiceProviders]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._dry_run: dict[str, ServiceProviders] = {}

    def dry_run(self, service: str) -> ServiceProviders:
        """The log provider for every platform: a send or job in ``dry_run`` delivery mode."""
        if service not in self._dry_run:
            logger = LogProvider(service)
            self._dry_run[service] = ServiceProviders(fcm=logger, apns=logger, web=logger)
        return self._dry_run[service]

    def _pool(self, provider: str, url: str, *key: str) -> Pool:
        """The pool of ``url`` (FCM), or of ``url`` and one APNs signing key; ``provider`` labels its metrics."""
        pool_key = (url, *key)
        if pool_key not in self._pools:
            if self._ssl is None:
                self._ssl = client_ssl_context(self.settings.emulator_ca_file if self.settings.emulator_url else None)
            # settings.fanout_send_concurrency requests in flight per origin, at most 100 streams per
            # HTTP/2 connection (the common server limit): 200 -> 2 connections of 100. Servers that
            # advertise less are obeyed (providers/http2.py).
            concurrency = self.settings.fanout_send_concurrency
            self._pools[pool_key] = Pool(
                url,
                self._ssl,
                size=-(-concurrency // 100),
                max_streams=min(concurrency, 100),
                provider=provider,
                per_request=PER_REQUEST_HEADERS if provider == "apns" else (),
            )
        return self._pools[pool_key]

    def _apns_key(self, url: str, c: ApnsCredentials) -> tuple[ApnsJwt, Pool]:
        """The provider token and the pool of one APNs signing key."""
        fingerprint = hashlib.sha256(c.private_key.encode()).hexdigest()[:16]
        key = (c.team_id, c.key_id, fingerprint)
        token = self._apns_tokens.get(key)
        if token is None:
            token = self._apns_tokens[key] = ApnsJwt(c.private_key, c.key_id, c.team_id)
        return token, self._pool("apns", url, *key)

    def _webpush_pool(self, origin: str) -> Pool:
        """The pool of one push-service origin, shared by every service (VAPID is per request)."""
        return self._pool("webpush", origin, "webpush")

    def for_service(self, service: str, credentials: ProviderCredentials | None) -> ServiceProviders:
        """Providers of ``service`` given its decrypted credentials, which the caller loaded (the
        providers never read the registry): None means none are configured."""
        fp = _fingerprint(credentials)
        cached = self._services.get(service)
        if cached and cached[0] == fp:
            return cached[1]
        fcm_c = credentials.fcm if credentials is not None else None
        apns_c = credentials.apns if credentials is not None else None
        if self.settings.emulator_url:
            url = self.settings.emulator_url
            # A stand-in FCM route for a service without credentials only when the deployment asks for
            # it (make run's embedded emulator); iOS devices then go through it too, as without APNs keys.
            standin = self.settings.emulator_standin
            apns = None
            if apns_c:
                apns = emulator_apns(apns_c, *self._apns_key(self.settings.emulator_apns_url or url, apns_c))
            built = ServiceProviders(
                fcm=emulator_fcm(service, fcm_c, self._pool("fcm", url), url, self.settings.emulator_ca_file)
                if fcm_c or standin
                else None,
                apns=apns,
            )
        else:
            fcm: Provider | None = None
            if fcm_c:
                fcm = FcmProvider(
                    fcm_c.project_id, ServiceAccountTokens(fcm_c.service_account), self._pool("fcm", FCM_URL)
                )
            apns = None
            if apns_c:
                apns = ApnsProvider(
                    apns_c.bundle_id, *self._apns_key(SANDBOX_URL if apns_c.sandbox else PRODUCTION_URL, apns_c)
                )
            built = ServiceProviders(fcm=fcm, apns=apns)
        web_c = credentials.webpush if credentials is not None else None
        if web_c is not None:
            built.web = WebPushProvider(VapidSigner(web_c.private_key, web_c.subject), self._webpush_pool)
        self._services[service] = (fp, built)
        log.info(
            "providers for service=%s: fcm=%s apns=%s web=%s%s",
            service,
            built.fcm.name if built.fcm else "-",
            built.apns.name if built.apns else "-",
            built.web.name if built.web else "-",
            " (emulator)" if self.settings.emulator_url else "",
        )
        return built

    async def close(self) -> None:
        for pool in self._pools.values():
            await pool.close()
        self._pools.clear()
        self._services.clear()
        self._dry_run.clear()
        self._apns_tokens.clear()
