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
from dataclasses import dataclass

from cryptography.fernet import Fernet

API_KEY_PREFIX = "nk_"
_KEY_ID_LEN = 16
# nk_ + 16 hex + _ + token_urlsafe(32) (43 chars of [A-Za-z0-9_-])
_API_KEY_RE = re.compile(r"^nk_([0-9a-f]{16})_([A-Za-z0-9_-]{20,128})$")


@dataclass(frozen=True)
class NewApiKey:
    key_id: str
    secret: str = ""  # never printed by repr
    key_hash: bytes = b""

    @property
    def api_key(self) -> str:
        return f"{API_KEY_PREFIX}{self.key_id}_{self.secret}"

    def __repr__(self) -> str:
        return f"NewApiKey(key_id={self.key_id!r})"


def generate_api_key() -> NewApiKey:
    key_id = _random.token_hex(_KEY_ID_LEN // 2)
    secret = _random.token_urlsafe(32)
    return NewApiKey(key_id=key_id, secret=secret, key_hash=hash_secret(secret))


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()


def parse_api_key(raw: str) -> tuple[str, str] | None:
    """``(key_id, secret)`` of a well-formed key, else None."""
    m = _API_KEY_RE.match(raw or "")
    return (m.group(1), m.group(2)) if m else None


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
    ``NOTEE_CREDENTIALS_KEY``. Build one from settings; it keeps only the key object."""

    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode("ascii"))

    def __repr__(self) -> str:
        return "SecretsBox(<key hidden>)"

    def encrypt(self, plaintext: bytes) -> bytes:
        return self._fernet.encrypt(plaintext)

    def decrypt(self, token: bytes) -> bytes:
        """Raises ``cryptography.fernet.InvalidToken`` when the key does not match."""
        return self._fernet.decrypt(bytes(token))
