"""Client-side wiring to Notee's emulator (``settings.emulator_url``): every FCM and APNs send of
every service goes there, over the same senders and wire protocol as production, verified against
``settings.emulator_ca_file``."""

from __future__ import annotations

from notee.providers.apns import ApnsJwt, ApnsProvider
from notee.providers.fcm import FcmProvider, StaticToken
from notee.providers.http2 import Pool


def emulator_fcm(service: str, project_id: str | None, pool: Pool) -> FcmProvider:
    # The emulator accepts any bearer, so no OAuth round trip; the project keeps its real id when
    # the service has one, so staging logs read like production.
    return FcmProvider(project_id or f"notee-{service.lower()}", StaticToken(), pool)


def emulator_apns(apns_credentials, pool: Pool) -> ApnsProvider:
    # The real key signs the JWT, so a broken key fails on staging exactly as it would in production.
    c = apns_credentials
    return ApnsProvider(c.bundle_id, ApnsJwt(c.private_key, c.key_id, c.team_id), pool)
