"""Authentication and secrets (issue 9, item 6): a revoked key is refused at once, API keys and the
admin token are compared in constant time, and no credential reaches the logs.

The whole-session log scan lives in tests/support/logscan.py; the test here drives every path that
handles credential material (key creation, FCM and APNs credentials, wrong and revoked keys) and
scans what was logged right away, so a leak fails this test by name, not only the session.
The rules of this topic that need no server are in tests/unit/test_security_auth.py.
"""

from __future__ import annotations

import hmac
import json
import logging

import pytest
from sqlalchemy import event

from notee.domain import services
from tests.support import logscan as logscan
from tests.support.registry import (
    admin_headers,
    apns_credentials,
    bearer,
    fcm_service_account,
    new_api_key,
    new_service,
    new_user,
    random_token,
)


def test_revoked_key_is_refused_at_once(client, settings, service_id):
    new_service(client, settings, service_id)
    key = new_api_key(client, settings, service_id, label="to-revoke")
    auth = bearer(key["api_key"])
    assert client.get("/v1/templates", headers=auth).status_code == 200
    r = client.delete(f"/v1/admin/services/{service_id}/api-keys/{key['key_id']}", headers=admin_headers(settings))
    assert r.status_code == 204, r.text
    r = client.get("/v1/templates", headers=auth)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"
    # The same answer as a key that never existed: nothing tells revoked from unknown.
    unknown = client.get("/v1/templates", headers=bearer(key["api_key"][:-4] + "AAAA"))
    assert (unknown.status_code, unknown.json()) == (r.status_code, r.json())


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_revoked_by_another_process_is_refused_within_the_cache_time(
    app, client, runtime, settings, service_id, monkeypatch
):
    """A revocation this process did not serve (another `notee api`, a change in the database) is
    effective once the key's cache entry is NOTEE_API_KEY_CACHE_S old (docs/API.md): the bound holds."""
    clock = _Clock()
    monkeypatch.setattr(app.state.key_cache, "clock", clock)
    new_service(client, settings, service_id)
    key = new_api_key(client, settings, service_id, label="elsewhere")
    auth = bearer(key["api_key"])
    assert client.get("/v1/templates", headers=auth).status_code == 200  # now cached
    with runtime.sessions() as db:  # what another process's revocation leaves in MySQL
        services.revoke_api_key(db, service_id, key["key_id"])
        db.commit()
    ttl = settings.api_key_cache_s
    assert ttl > 0
    clock.now += ttl - 0.001
    assert client.get("/v1/templates", headers=auth).status_code == 200  # the documented window
    clock.now += 0.001
    r = client.get("/v1/templates", headers=auth)
    assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")
    clock.now += 3600
    assert client.get("/v1/templates", headers=auth).status_code == 401  # never cached again


def test_a_cached_key_costs_no_lookup_and_a_wrong_secret_is_still_refused(app, client, runtime, settings, service_id):
    headers = new_service(client, settings, service_id)
    key = headers["Authorization"].removeprefix("Bearer ")
    assert client.get("/v1/templates", headers=headers).status_code == 200
    statements: list[str] = []

    def seen(conn, cursor, statement, params, context, executemany):
        statements.append(statement)

    event.listen(runtime.engine, "before_cursor_execute", seen)
    try:
        assert client.get("/v1/templates", headers=headers).status_code == 200
        looked_up = [s for s in statements if "api_key" in s]
        assert looked_up == [], "a key that authenticated a moment ago was looked up again"
        wrong = client.get("/v1/templates", headers=bearer(key[:-6] + "AAAAAA"))
        assert wrong.status_code == 401
        assert [s for s in statements if "api_key" in s], "a wrong secret must go to MySQL, never the cache"
    finally:
        event.remove(runtime.engine, "before_cursor_execute", seen)


@pytest.mark.parametrize("variant", ["valid", "wrong_secret", "unknown_key_id", "admin_valid", "admin_wrong"])
def test_credentials_are_compared_in_constant_time(client, settings, service_id, monkeypatch, variant):
    """Every credential check goes through hmac.compare_digest, including the unknown-key-id path
    (compared against a dummy so its timing matches a wrong secret)."""
    headers = new_service(client, settings, service_id)
    key = headers["Authorization"].removeprefix("Bearer ")
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    if variant == "valid":
        status = client.get("/v1/templates", headers=headers).status_code
        assert status == 200
    elif variant == "wrong_secret":
        status = client.get("/v1/templates", headers=bearer(key[:-6] + "AAAAAA")).status_code
        assert status == 401
    elif variant == "unknown_key_id":
        status = client.get("/v1/templates", headers=bearer("nk_" + "0" * 16 + key[19:])).status_code
        assert status == 401
    elif variant == "admin_valid":
        assert client.get(f"/v1/admin/services/{service_id}", headers=admin_headers(settings)).status_code == 200
    else:
        wrong = settings.admin_token.get_secret_value()[:-3] + "zzz"
        assert client.get(f"/v1/admin/services/{service_id}", headers=bearer(wrong)).status_code == 401
    assert calls, "credential check did not use hmac.compare_digest"
    if not variant.startswith("admin"):
        assert calls[-1] == (32, 32), "the API key check must compare fixed-size digests"


def test_credential_material_never_logged(client, settings, service_id, caplog):
    """Create keys and provider credentials, use wrong and revoked keys; nothing secret is logged."""
    caplog.set_level(logging.DEBUG)
    headers = new_service(client, settings, service_id)
    key = new_api_key(client, settings, service_id, label="logged?")
    account = fcm_service_account("leak-check")
    apns = apns_credentials()
    admin = admin_headers(settings)
    r = client.put(f"/v1/admin/services/{service_id}/credentials/fcm", json={"service_account": account}, headers=admin)
    assert r.status_code == 200, r.text
    r = client.put(f"/v1/admin/services/{service_id}/credentials/apns", json=apns, headers=admin)
    assert r.status_code == 200, r.text
    shown = client.get(f"/v1/admin/services/{service_id}/credentials", headers=admin).text
    # Bad input carrying a secret must not echo it back either.
    bad = dict(account, private_key=account["private_key"].replace("PRIVATE KEY", "PRIVATE KEX"))
    r = client.put(f"/v1/admin/services/{service_id}/credentials/fcm", json={"service_account": bad}, headers=admin)
    assert r.status_code in (422, 424)
    assert "PRIVATE KEX" not in r.text and bad["private_key"][40:80] not in r.text
    new_user(client, headers, devices=[(random_token("leak"), "AOS")])
    client.get("/v1/templates", headers=bearer(key["api_key"][:-3] + "xyz"))
    client.delete(f"/v1/admin/services/{service_id}/api-keys/{key['key_id']}", headers=admin)
    client.get("/v1/templates", headers=bearer(key["api_key"]))
    client.get(f"/v1/admin/services/{service_id}", headers=bearer(key["api_key"]))

    secrets_used = {
        key["api_key"],
        key["api_key"].split("_", 2)[2],
        headers["Authorization"][7:],
        settings.admin_token.get_secret_value(),
        account["private_key"].splitlines()[1],
        apns["private_key"].splitlines()[1],
    }
    for s in secrets_used:
        logscan.remember_secret(s)
    # Never returned by the API after creation.
    assert not any(s in shown for s in secrets_used) and "PRIVATE KEY" not in shown
    # Not in this test's records (caplog) nor in the session log file so far.
    logged = "\n".join(f"{r.name}: {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert logscan.scan_text(logged, secrets_used) == []
    for handler in logging.getLogger().handlers:
        handler.flush()
    session_log = logscan.session_log().read_text(errors="replace")
    assert logscan.scan_text(session_log, secrets_used, "session.log") == []
    assert json.dumps(account["private_key"])[1:40] not in session_log
