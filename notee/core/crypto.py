"""Secret material: API keys (generated, hashed, compared in constant time) and the Fernet box that
encrypts provider credentials at rest.

An API key is ``nk_<key_id>_<secret>``: ``key_id`` (16 hex chars) names the row, only
``sha256(secret)`` is stored. The secret has 256 bits of entropy, so a fast hash is enough (a slow
password hash protects low-entropy secrets; this one cannot be brute-forced).

Nothing here logs; nothing here keeps a secret in a module global.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets as _random
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.fernet import Fernet, MultiFernet

from notee.core.settings import Settings

API_KEY_PREFIX = "nk_"
CLIENT_KEY_PREFIX = "nck_"  # a client key: safe inside an app, may only post receipts (docs/ENGAGEMENT.md)
KEY_KINDS = ("server", "client")
_KEY_ID_LEN = 16
# nk_ (nck_) + 16 hex + _ + token_urlsafe(32) (43 chars of [A-Za-z0-9_-])
_API_KEY_RE = re.compile(r"^(nc?k)_([0-9a-f]{16})_([A-Za-z0-9_-]{20,128})$")


@dataclass(frozen=True)
class NewApiKey:
    key_id: str
    secret: str = ""  # never printed by repr
    key_hash: bytes = b""
    kind: str = "server"

    @property
    def api_key(self) -> str:
        prefix = CLIENT_KEY_PREFIX if self.kind == "client" else API_KEY_PREFIX
        return f"{prefix}{self.key_id}_{self.secret}"

    def __repr__(self) -> str:
        return f"NewApiKey(key_id={self.key_id!r})"


def generate_api_key(kind: str = "server") -> NewApiKey:
    key_id = _random.token_hex(_KEY_ID_LEN // 2)
    secret = _random.token_urlsafe(32)
    return NewApiKey(key_id=key_id, secret=secret, key_hash=hash_secret(secret), kind=kind)


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()


def parse_api_key(raw: str) -> tuple[str, str] | None:
    """``(key_id, secret)`` of a well-formed key (server or client), else None."""
    m = _API_KEY_RE.match(raw or "")
    return (m.group(2), m.group(3)) if m else None


def key_kind(raw: str) -> str:
    """``client`` for a token with the client keys' prefix, else ``server`` (whether or not it is a key)."""
    return "client" if (raw or "").startswith(CLIENT_KEY_PREFIX) else "server"


def secret_matches(secret: str, stored_hash: bytes | None) -> bool:
    """Constant-time comparison of sha256(secret) with the stored hash (a missing row compares too,
    against a dummy, so timing does not tell unknown key ids from wrong secrets)."""
    candidate = hash_secret(secret)
    expected = stored_hash if stored_hash is not None else b"\x00" * 32
    return hmac.compare_digest(candidate, expected) and stored_hash is not None


def tokens_equal(given: str, expected: str) -> bool:
    """Constant-time string comparison (the admin token)."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class SecretsBox:
    """Fernet (AES-128-CBC + HMAC-SHA256) encryption of provider credentials under
    ``NOTEE_CREDENTIALS_KEY``. Earlier keys (``NOTEE_CREDENTIALS_OLD_KEYS``) still decrypt, so a key
    can be rotated without downtime: every process gets the new key first and the old one as an old
    key, then ``notee credentials rotate-key`` re-encrypts every row, then the old key is dropped.
    Build one from settings; it keeps only the key objects."""

    def __init__(self, key: str, old_keys: Sequence[str] = ()) -> None:
        self._fernet = MultiFernet([Fernet(k.encode("ascii")) for k in (key, *old_keys)])

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretsBox | None:
        """The box of NOTEE_CREDENTIALS_KEY (+ old keys), or None when no key is configured."""
        if settings.credentials_key is None:
            return None
        return cls(
            settings.credentials_key.get_secret_value(), [k.get_secret_value() for k in settings.credentials_old_keys]
        )

    def __repr__(self) -> str:
        return "SecretsBox(<keys hidden>)"

    def encrypt(self, plaintext: bytes) -> bytes:
        """Always under the current key."""
        return self._fernet.encrypt(plaintext)

    def decrypt(self, token: bytes) -> bytes:
        """Under the current or any old key. Raises ``cryptography.fernet.InvalidToken`` when none matches."""
        return self._fernet.decrypt(bytes(token))

    def rotate(self, token: bytes) -> bytes:
        """The same plaintext re-encrypted under the current key (InvalidToken when no key opens it)."""
        return self._fernet.rotate(bytes(token))
