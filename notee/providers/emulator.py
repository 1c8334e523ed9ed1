"""Client-side wiring to Notee's emulator (``settings.emulator_url``): every FCM and APNs send of
every service goes there, over the same senders and wire protocol as production, verified against
``settings.emulator_ca_file``."""

from __future__ import annotations

from typing import Any

from notee.providers.apns import ApnsJwt, ApnsProvider
from notee.providers.fcm import FcmProvider, ServiceAccountTokens, emulator_service_account
from notee.providers.http2_pool import Pool


def emulator_fcm(
    service: str, fcm_credentials: Any, pool: Pool, emulator_url: str, ca_file: str | None = None
) -> FcmProvider:
    """FCM through the emulator. Access tokens come from the emulator's OAuth endpoint: with the
    service's own service account when it has one (only its token_uri changes), else with a
    throwaway account, so the token path (expiry, refresh on 401) is the production one."""
    token_uri = emulator_url.rstrip("/") + "/token"
    if fcm_credentials is not None:
        tokens = ServiceAccountTokens(fcm_credentials.service_account, token_uri=token_uri, ca_file=ca_file)
        return FcmProvider(fcm_credentials.project_id, tokens, pool)
    # the project keeps a recognisable name, so staging logs read like production
    project = f"notee-{service.lower()}"
    account = emulator_service_account(project)
    return FcmProvider(project, ServiceAccountTokens(account, token_uri=token_uri, ca_file=ca_file), pool)


def emulator_apns(apns_credentials: Any, token: ApnsJwt, pool: Pool) -> ApnsProvider:
    # The real key signs the JWT, so a broken key fails on staging exactly as it would in production.
    return ApnsProvider(apns_credentials.bundle_id, token, pool)
