"""Provider credentials of a service: stored Fernet-encrypted (admin), decrypted for delivery.

Secrets are never returned or logged: the admin API sees only which providers are configured, and
the decrypted ``ProviderCredentials`` live in memory only (their repr hides every key). The
delivery side loads them (``load_credentials``) and hands them to the providers, which never read
the registry. Writes happen in the caller's transaction: the caller commits.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from cryptography.fernet import InvalidToken
from sqlalchemy.orm import Session

from notee.core.clock import stored_now
from notee.core.crypto import SecretsBox
from notee.core.errors import NotFound, ProviderConfigError
from notee.core.settings import Settings
from notee.core.vocabulary import ApnsCredentials, FcmCredentials, ProviderCredentials, WebPushCredentials
from notee.domain.rules import (
    APNS_ID_RE,
    BUNDLE_RE,
    bad,
    check_choice,
    check_fcm_service_account,
    check_pattern,
    check_pem,
)
from notee.domain.services import get_service
from notee.store import credentials_sql as store

log = logging.getLogger(__name__)

_COLUMNS = {"fcm": "fcm_encrypted", "apns": "apns_encrypted", "webpush": "webpush_encrypted"}


def credentials_box(settings: Settings) -> SecretsBox | None:
    """The cipher of ``NOTEE_CREDENTIALS_KEY``, or None when it is not set (storing or reading
    credentials then fails with ProviderConfigError). NOTEE_CREDENTIALS_OLD_KEYS still decrypt."""
    return SecretsBox.from_settings(settings)


def require_box(box: SecretsBox | None) -> SecretsBox:
    if box is None:
        raise ProviderConfigError("NOTEE_CREDENTIALS_KEY is not set: credentials cannot be stored or read")
    return box


def set_fcm_credentials(
    session: Session,
    box: SecretsBox | None,
    service: str,
    service_account: dict[str, Any],
    *,
    emulator_url: str | None = None,
) -> None:
    check_fcm_service_account(service_account, emulator_url=emulator_url)
    box = require_box(box)
    get_service(session, service)
    blob = box.encrypt(json.dumps({"service_account": service_account}).encode())
    store.upsert_credential(session, service=service, column="fcm_encrypted", blob=blob, now=stored_now())
    log.info("provider credentials set: service=%s provider=fcm", service)


def set_apns_credentials(
    session: Session,
    box: SecretsBox | None,
    service: str,
    *,
    key_id: str,
    team_id: str,
    bundle_id: str,
    private_key: str,
    sandbox: bool,
) -> None:
    check_pattern("key_id", key_id, APNS_ID_RE, "the 10-character APNs key id")
    check_pattern("team_id", team_id, APNS_ID_RE, "the 10-character Apple team id")
    check_pattern("bundle_id", bundle_id, BUNDLE_RE, "an app bundle id")
    check_pem("private_key", private_key, ec_only=True)
    if not isinstance(sandbox, bool):
        raise bad("sandbox", "must be a boolean", "bool_type")
    box = require_box(box)
    get_service(session, service)
    blob = box.encrypt(
        json.dumps(
            {
                "key_id": key_id,
                "team_id": team_id,
                "bundle_id": bundle_id,
                "private_key": private_key,
                "sandbox": sandbox,
            }
        ).encode()
    )
    store.upsert_credential(session, service=service, column="apns_encrypted", blob=blob, now=stored_now())
    log.info("provider credentials set: service=%s provider=apns", service)


def credentials_status(session: Session, service: str) -> dict[str, bool]:
    """Which providers are configured (``webpush``: a VAPID key); never any secret."""
    get_service(session, service)
    row = store.get_credentials(session, service)
    return {name: bool(row is not None and getattr(row, column)) for name, column in _COLUMNS.items()}


def delete_credentials(session: Session, service: str, provider: str) -> None:
    check_choice("provider", provider, tuple(_COLUMNS))
    if not credentials_status(session, service)[provider]:
        raise NotFound(f"no {provider} credentials configured")
    store.upsert_credential(session, service=service, column=_COLUMNS[provider], blob=None, now=stored_now())
    log.info("provider credentials deleted: service=%s provider=%s", service, provider)


def rotate_credentials_key(session: Session, box: SecretsBox | None) -> dict[str, int]:
    """Re-encrypt every stored credential under the box's current key (``notee credentials
    rotate-key``); rows are locked meanwhile. All or nothing: when a row opens with none of the keys
    it raises ProviderConfigError and the caller rolls back. The caller commits."""
    box = require_box(box)
    services = blobs = 0
    for row in store.lock_all_credentials(session):
        try:
            rotated = {c: box.rotate(getattr(row, c)) if getattr(row, c) else None for c in store.BLOB_COLUMNS}
        except InvalidToken:
            raise ProviderConfigError(
                f"credentials of {row.service} open with none of NOTEE_CREDENTIALS_KEY and "
                "NOTEE_CREDENTIALS_OLD_KEYS: nothing was re-encrypted"
            ) from None
        count = sum(blob is not None for blob in rotated.values())
        if not count:
            continue
        store.replace_credential_blobs(session, service=row.service, blobs=rotated, now=stored_now())
        services += 1
        blobs += count
    log.info("credentials re-encrypted under the current key: services=%d blobs=%d", services, blobs)
    return {"services": services, "credentials": blobs}


def load_credentials(session: Session, secrets_box: SecretsBox | None, service: str) -> ProviderCredentials | None:
    """Decrypted credentials of ``service`` for the delivery side (in memory only), or None when
    none are configured. ProviderConfigError when they cannot be decrypted (wrong key)."""
    row = store.get_credentials(session, service)
    if row is None or not (row.fcm_encrypted or row.apns_encrypted or row.webpush_encrypted):
        return None
    box = require_box(secrets_box)
    try:
        fcm = json.loads(box.decrypt(row.fcm_encrypted)) if row.fcm_encrypted else None
        apns = json.loads(box.decrypt(row.apns_encrypted)) if row.apns_encrypted else None
        web = json.loads(box.decrypt(row.webpush_encrypted)) if row.webpush_encrypted else None
    except InvalidToken:
        raise ProviderConfigError(f"credentials of {service} cannot be decrypted with NOTEE_CREDENTIALS_KEY") from None
    return ProviderCredentials(
        fcm=FcmCredentials(fcm["service_account"]) if fcm else None,
        apns=ApnsCredentials(**apns) if apns else None,
        webpush=WebPushCredentials(web["private_key"], web["subject"]) if web else None,
    )
