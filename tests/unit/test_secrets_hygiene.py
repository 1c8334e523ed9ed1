"""Secrets and input hygiene (issue 15 item 6): where a service account may send its signed
assertion, bound values kept out of exception text, credentials-key rotation, owner-only dev secret
files, the admin token's minimum length, and idempotency keys that cannot be reused for another
request nor collide with the scheduler's.

Here, the rules that need no server; tests/integration/test_secrets_hygiene.py has the rest."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from notee.core.errors import InvalidInput, ProviderConfigError
from notee.core.settings import Settings
from notee.core.vocabulary import GOOGLE_TOKEN_URI
from notee.domain import rules
from notee.providers.fcm import ServiceAccountTokens
from tests.support.registry import fcm_service_account


def test_emulator_token_endpoint_is_accepted_only_when_the_emulator_is_configured() -> None:
    account = fcm_service_account() | {"token_uri": "https://127.0.0.1:8443/token"}
    with pytest.raises(InvalidInput, match="token_uri"):
        rules.check_fcm_service_account(account)
    with pytest.raises(InvalidInput, match="token_uri"):
        rules.check_fcm_service_account(account, emulator_url="https://127.0.0.1:9999")
    assert rules.check_fcm_service_account(account, emulator_url="https://127.0.0.1:8443/") is account
    assert rules.check_fcm_service_account(fcm_service_account(), emulator_url="https://127.0.0.1:8443")


def test_a_stored_account_with_a_foreign_token_uri_is_never_used() -> None:
    """Credentials saved before the check existed: the sender refuses them instead of signing an
    assertion for another server."""
    with pytest.raises(ProviderConfigError, match="token_uri"):
        ServiceAccountTokens(fcm_service_account() | {"token_uri": "https://attacker.example/token"})
    assert ServiceAccountTokens(fcm_service_account() | {"token_uri": GOOGLE_TOKEN_URI})


def test_old_keys_must_be_fernet_keys() -> None:
    with pytest.raises(ValueError, match="Fernet key"):
        Settings(credentials_old_keys="not-a-key")
    assert len(Settings(credentials_old_keys=f"{Fernet.generate_key().decode()}, ").credentials_old_keys) == 1
