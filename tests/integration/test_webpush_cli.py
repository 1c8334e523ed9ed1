"""`notee admin credentials webpush` as an operator runs it (a subprocess against a real `notee api`):
a VAPID key generated, then one uploaded from a PEM file; the public key printed is the one the
service reads, and the private key is never printed (docs/WEB-PUSH.md)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import httpx

from notee.providers.webpush_crypto import generate_vapid_key, public_key_b64
from tests.support.cli import notee, tenant_env


def test_the_cli_generates_and_uploads_a_vapid_key(admin_env, cli_api, tmp_path: Path):
    service = "WP" + secrets.token_hex(5).upper()
    env = tenant_env(admin_env, service)
    made = notee("admin", "credentials", "webpush", service, "--subject", "mailto:ops@example.com", env=admin_env)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"VAPID key of {service} generated; public key: B")
    printed = made.stdout.strip().rsplit(" ", 1)[-1]
    served = httpx.get(f"{cli_api.url}/v1/service/webpush", headers={"Authorization": f"Bearer {env['NOTEE_API_KEY']}"})
    assert served.json()["public_key"] == printed

    pem = generate_vapid_key()
    (tmp_path / "vapid.pem").write_text(pem)
    args = ("admin", "credentials", "webpush", service, "--subject", "https://example.com/ops")
    uploaded = notee(*args, "--key-file", str(tmp_path / "vapid.pem"), "--json", env=admin_env)
    assert uploaded.returncode == 0, uploaded.stderr
    answer = json.loads(uploaded.stdout)
    assert answer["public_key"] == public_key_b64(pem) and answer["generated"] is False
    assert "PRIVATE KEY" not in uploaded.stdout + uploaded.stderr + made.stdout + made.stderr
    bad = notee(*args[:-1], "not-a-uri", env=admin_env)
    assert bad.returncode != 0 and "subject" in bad.stderr
