"""The cryptography of a Web Push message, all of it from well-kept libraries (no hand-written crypto):

- RFC 8291 message encryption (``aes128gcm``): ``http_ece`` (the reference implementation by the
  RFC's author) with a fresh P-256 key pair and salt per message, as RFC 8291 section 3.1 asks;
  the ECDH agreement is with the subscription's ``p256dh`` key and ``auth`` secret.
- RFC 8292 VAPID: an ES256 JWT (PyJWT) ``{"aud": <push service origin>, "exp", "sub"}`` in an
  ``Authorization: vapid t=<jwt>, k=<public key>`` header, signed once per audience and reused
  until it nears its expiry (``VapidSigner``).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notee.core.errors import ProviderConfigError

# One aes128gcm record holds the whole message: the header (salt 16, record size 4, key id length 1,
# key id 65: RFC 8188 section 2.1 with the sender's public key as key id, RFC 8291 section 4), the
# plaintext, its one-byte delimiter and the 16-byte tag.
ENCRYPTION_OVERHEAD = 16 + 4 + 1 + 65 + 1 + 16
RECORD_SIZE = 4096
JWT_LIFETIME_S = 12 * 3600  # push services refuse an exp more than 24 h ahead (RFC 8292 section 2)
JWT_REFRESH_BEFORE_S = 3600  # re-sign an audience's JWT when less than this is left of it


def encrypted_size(plaintext_bytes: int) -> int:
    """Bytes of the encrypted body of a plaintext of this size (one record)."""
    return plaintext_bytes + ENCRYPTION_OVERHEAD


def encrypt(plaintext: bytes, p256dh: bytes | ec.EllipticCurvePublicKey, auth: bytes) -> bytes:
    """The aes128gcm body of one message for one subscription (its own keys: per device)."""
    sender = ec.generate_private_key(ec.SECP256R1())
    body: bytes = http_ece.encrypt(
        plaintext, private_key=sender, dh=p256dh, auth_secret=auth, version="aes128gcm", rs=RECORD_SIZE
    )
    return body


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def public_key_b64(private_key_pem: str) -> str:
    """The VAPID application server key a web page passes to ``pushManager.subscribe``: the
    uncompressed P-256 point, base64url."""
    key = load_vapid_key(private_key_pem)
    return b64url(
        key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )


def load_vapid_key(private_key_pem: str) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ProviderConfigError("the VAPID private key is not a usable PEM key") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ProviderConfigError("the VAPID private key must be a P-256 (prime256v1) EC key")
    return key


def generate_vapid_key() -> str:
    """A new VAPID private key, PKCS#8 PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem.decode()


@dataclass
class _Signed:
    header: bytes
    expires: float


class VapidSigner:
    """The ``Authorization`` header of one VAPID key per push-service origin (the JWT's ``aud``),
    cached until ``JWT_REFRESH_BEFORE_S`` before its ``exp``."""

    def __init__(self, private_key_pem: str, subject: str, *, clock: Callable[[], float] = time.time) -> None:
        self._key = load_vapid_key(private_key_pem)
        self._subject = subject
        self._clock = clock
        self.public_key = public_key_b64(private_key_pem)
        self._cache: dict[str, _Signed] = {}
        self.signed = 0  # JWTs signed so far (the cache's effect, read by tests and the bench)

    def header(self, audience: str) -> bytes:
        now = self._clock()
        cached = self._cache.get(audience)
        if cached is not None and cached.expires - now > JWT_REFRESH_BEFORE_S:
            return cached.header
        expires = int(now) + JWT_LIFETIME_S
        token = jwt.encode({"aud": audience, "exp": expires, "sub": self._subject}, self._key, algorithm="ES256")
        self.signed += 1
        signed = _Signed(f"vapid t={token}, k={self.public_key}".encode(), expires)
        self._cache[audience] = signed
        return signed.header
