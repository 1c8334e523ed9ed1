"""The session log scanner (tests/support/logscan.py) must find credential material, so that its
clean verdict at the end of every run means something."""

from __future__ import annotations

import logging

import pytest

from notee.core import crypto
from tests.support import logscan as scan

_KEY = crypto.NewApiKey(key_id="0123456789abcdef", secret="A" * 43).api_key
_JWT = (
    "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyMzQ1NjcifQ."
    "eyJpc3MiOiJURUFNMTIzNDU2IiwiaWF0IjoxNzAwMDAwMDAwfQ."
    "MEUCIQDx3vTqT5gmWv9YQn3pLZ6v1yQh0hP8a7lN2wWc1M9aXQ"
)


@pytest.mark.parametrize(
    ("line", "kinds"),
    [
        ("GET /v1/users 200", []),
        ("auth failed for key id 0123456789abcdef", []),
        (f"Authorization: Bearer {_KEY}", ["api_key"]),
        (f"apns bearer {_JWT}", ["jwt"]),
        ("-----BEGIN PRIVATE KEY-----", ["pem_private_key"]),
        ("-----BEGIN EC PRIVATE KEY-----", ["pem_private_key"]),
        ("-----BEGIN RSA PRIVATE KEY-----", ["pem_private_key"]),
        (
            '{"type": "service_account", "private_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"}',
            ["service_account_private_key"],
        ),
        ("private_key=None", []),
        ("token abc123…(152)", []),
    ],
)
def test_patterns(line: str, kinds: list[str]) -> None:
    assert [f.kind for f in scan.scan_text(line)] == kinds


def test_known_secret_found_literally() -> None:
    found = scan.scan_text("ok\nadmin said s3cr3t-admin-token here\n", {"s3cr3t-admin-token"}, "x.log")
    assert [(f.path, f.line, f.kind) for f in found] == [("x.log", 2, "known_secret")]


def test_generated_keys_are_remembered() -> None:
    new = crypto.generate_api_key()
    assert new.api_key in scan._KNOWN and new.secret in scan._KNOWN


def test_session_logs_reach_the_file() -> None:
    """The root handler is installed: a record logged now is in the file the final scan reads."""
    marker = "logscan-marker-" + crypto.generate_api_key().key_id
    logging.getLogger("notee.test").info("%s", marker)
    for handler in logging.getLogger().handlers:
        handler.flush()
    assert marker in scan.session_log().read_text()
