"""Secrets and input hygiene (issue 15 item 6): where a service account may send its signed
assertion, bound values kept out of exception text, credentials-key rotation, owner-only dev secret
files, the admin token's minimum length, and idempotency keys that cannot be reused for another
request nor collide with the scheduler's.

The rules of this topic that need no server are in tests/unit/test_secrets_hygiene.py."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from notee.core.crypto import SecretsBox
from notee.core.errors import ProviderConfigError
from notee.core.settings import Settings
from notee.domain import credentials, vapid, webhooks
from notee.providers.webpush_crypto import public_key_b64
from notee.store.mysql import make_engine
from notee.usecases import migrate
from tests.support.fanout import count_rows, topic_job
from tests.support.logscan import remember_secret
from tests.support.registry import fcm_service_account

ROOT = Path(__file__).resolve().parents[2]


def _failing_lookup(engine, token: str) -> str:
    with engine.connect() as conn:
        try:
            conn.execute(text("SELECT * FROM no_such_table_for_hygiene WHERE token = :token"), {"token": token})
        except DBAPIError as exc:
            logging.getLogger("notee.test").exception("lookup failed")
            return str(exc)
    raise AssertionError("the statement did not fail")


def test_a_database_error_never_carries_a_device_token_into_the_logs(settings: Settings, runtime, caplog) -> None:
    token = "devtok-" + os.urandom(12).hex()
    engine = make_engine(settings, pool_size=1)
    try:
        with caplog.at_level(logging.ERROR, logger="notee.test"):
            message = _failing_lookup(engine, token)
    finally:
        engine.dispose()
    assert "no_such_table_for_hygiene" in message  # the statement is still there to debug with
    assert "hide_parameters=True" in message
    assert token not in message and token not in caplog.text

    # The same failure on an engine without the setting does carry it: the check above can fail.
    plain = create_engine(settings.mysql_url.get_secret_value())
    try:
        assert token in _failing_lookup(plain, token)
    finally:
        plain.dispose()


@pytest.fixture()
def rotation_db(settings: Settings) -> Iterator[str]:
    """A database of its own: rotation re-encrypts every service's credentials, and the shared test
    database holds rows encrypted under earlier sessions' keys."""
    url = make_url(settings.mysql_url.get_secret_value())
    url = url.set(database=f"{url.database}_rotate_{os.getpid()}")
    server = create_engine(url._replace(database=None))  # URL.set(database=None) keeps the name (SQLAlchemy 2.1)
    with server.begin() as conn:  # a run killed before its teardown may have left this pid's
        conn.execute(text(f"DROP DATABASE IF EXISTS `{url.database}`"))
        conn.execute(text(f"CREATE DATABASE `{url.database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        engine = create_engine(url)
        migrate.migrate_mysql(engine)
        engine.dispose()
        yield url.render_as_string(hide_password=False)
    finally:
        with server.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{url.database}`"))
        server.dispose()


def _rotate(db_url: str, key: str, old_keys: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOTEE_")}
    env.update(
        {"NOTEE_MYSQL_URL": db_url, "NOTEE_CREDENTIALS_KEY": key, "NOTEE_CREDENTIALS_OLD_KEYS": ",".join(old_keys)}
    )
    return subprocess.run(
        [sys.executable, "-m", "notee", "credentials", "rotate-key"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _blobs(db_url: str) -> dict[str, tuple[bytes | None, bytes | None]]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT service, fcm_encrypted, apns_encrypted FROM provider_credentials"))
            return {r.service: (r.fcm_encrypted, r.apns_encrypted) for r in rows}
    finally:
        engine.dispose()


def _store_credentials(db_url: str, box: SecretsBox, services: list[str]) -> dict[str, dict]:
    engine = create_engine(db_url)
    accounts = {}
    try:
        with engine.connect() as conn:
            for service in services:
                conn.execute(
                    text(
                        "INSERT INTO service (service, display_name, timezone, created_at)"
                        " VALUES (:s, 'rotation', 'UTC', UTC_TIMESTAMP(6))"
                    ),
                    {"s": service},
                )
            conn.commit()
        from sqlalchemy.orm import Session

        with Session(engine) as session:
            for service in services:
                accounts[service] = fcm_service_account()
                credentials.set_fcm_credentials(session, box, service, accounts[service])
            session.commit()  # the caller owns the transaction
    finally:
        engine.dispose()
    return accounts


def _store_vapid_key(db_url: str, box: SecretsBox, service: str) -> str:
    """A generated VAPID key of ``service`` encrypted by ``box``: its public key."""
    from sqlalchemy.orm import Session

    engine = create_engine(db_url)
    try:
        with Session(engine) as session:
            key = vapid.set_vapid_key(session, box, service, subject="mailto:ops@example.com")
            session.commit()
    finally:
        engine.dispose()
    return key.public_key


def _store_webhook_secret(db_url: str, box: SecretsBox, service: str) -> tuple[str, bytes]:
    """A webhook endpoint of ``service`` whose signing secret ``box`` encrypts: (secret, stored blob)."""
    from sqlalchemy.orm import Session

    engine = create_engine(db_url)
    try:
        with Session(engine) as session:
            created = webhooks.create_endpoint(
                session, box, Settings(), service, url="https://hooks.example.com/r", events=None, description=None
            )
            session.commit()
    finally:
        engine.dispose()
    remember_secret(created.secret)
    return created.secret, _webhook_secret_blob(db_url)


def _webhook_secret_blob(db_url: str) -> bytes:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return bytes(conn.execute(text("SELECT secret FROM webhook_endpoint")).scalar_one())
    finally:
        engine.dispose()


def _load(db_url: str, box: SecretsBox, service: str):
    from sqlalchemy.orm import Session

    engine = create_engine(db_url)
    try:
        with Session(engine) as session:
            return credentials.load_credentials(session, box, service)
    finally:
        engine.dispose()


def test_rotate_key_re_encrypts_every_credential_and_both_keys_read_meanwhile(rotation_db: str) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    accounts = _store_credentials(rotation_db, SecretsBox(old), ["ROTA", "ROTB"])
    vapid_public = _store_vapid_key(rotation_db, SecretsBox(old), "ROTB")
    before = _blobs(rotation_db)

    # Meanwhile: the new key with the old one as an old key reads what the old key wrote.
    both = SecretsBox(new, [old])
    assert _load(rotation_db, both, "ROTA").fcm.service_account == accounts["ROTA"]

    hook_secret, sealed_before = _store_webhook_secret(rotation_db, SecretsBox(old), "ROTA")

    done = _rotate(rotation_db, new, [old])
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.strip()
        == "re-encrypted 3 credential(s) of 2 service(s) and 1 webhook secret(s) under NOTEE_CREDENTIALS_KEY"
    )
    sealed_after = _webhook_secret_blob(rotation_db)
    assert sealed_after != sealed_before and SecretsBox(new).decrypt(sealed_after).decode() == hook_secret
    assert hook_secret not in done.stdout + done.stderr
    after = _blobs(rotation_db)
    assert all(after[s][0] != before[s][0] for s in before)
    rotated_vapid = _load(rotation_db, SecretsBox(new), "ROTB").webpush  # the VAPID key is re-encrypted too
    assert rotated_vapid is not None and public_key_b64(rotated_vapid.private_key) == vapid_public
    for service, account in accounts.items():
        assert _load(rotation_db, SecretsBox(new), service).fcm.service_account == account  # new key alone
        with pytest.raises(ProviderConfigError):
            _load(rotation_db, SecretsBox(old), service)  # the old key no longer opens anything
    assert old not in done.stdout + done.stderr and new not in done.stdout + done.stderr


def test_rotate_key_changes_nothing_when_a_row_opens_with_no_key(rotation_db: str) -> None:
    old, new, lost = (Fernet.generate_key().decode() for _ in range(3))
    _store_credentials(rotation_db, SecretsBox(old), ["ROTA"])
    _store_credentials(rotation_db, SecretsBox(lost), ["ROTZ"])
    before = _blobs(rotation_db)
    done = _rotate(rotation_db, new, [old])
    assert done.returncode == 1
    assert "ROTZ" in done.stderr and "nothing was re-encrypted" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert _blobs(rotation_db) == before


def test_a_short_admin_token_stops_start_up_with_one_clear_line() -> None:
    short = "s3cret-but-only-31-characters!!"
    assert len(short) == 31
    env = {k: v for k, v in os.environ.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_ADMIN_TOKEN": short}
    done = subprocess.run(
        [sys.executable, "-m", "notee", "api", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "notee: invalid configuration: NOTEE_ADMIN_TOKEN: Value error, must be at least 32 characters "
        "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    ], done.stderr
    assert short not in done.stderr + done.stdout
    assert Settings(admin_token="x" * 32).admin_token is not None


def test_dev_secret_files_are_owner_only(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    (run / "admin-token").write_text("an-older-run-left-this-readable-by-everyone\n")
    (run / "admin-token").chmod(0o644)
    env = os.environ | {"NOTEE_RUN_DIR": str(run), "NOTEE_PYTHON": sys.executable}
    subprocess.run([str(ROOT / "workers" / "dev-secrets.sh")], env=env, check=True, timeout=60)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    for name in ("admin-token", "credentials.key"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o600, name
    assert (run / "admin-token").read_text().startswith("an-older-run")  # kept, only its mode changed
    Fernet((run / "credentials.key").read_text().strip().encode())
    assert Settings(admin_token=(run / "admin-token").read_text().strip()).admin_token


@pytest.fixture()
def tenant(tenant):
    """The family's tenant with a TOPIC template: (service, headers, its key)."""
    template = tenant.template("TOPIC", "news", title="Hello {{name}}", body="Body")
    return tenant.service, tenant.headers, template["notification_key"]


def _publish(client, headers, key: str, body: dict, topic: str = "sports"):
    return client.post(f"/v1/topics/news/{topic}/publish", json=body, headers=headers | {"Idempotency-Key": key})


def test_an_idempotency_key_reused_with_another_request_is_422_and_writes_nothing(client, tenant) -> None:
    service, headers, _ = tenant
    first = _publish(client, headers, "k-1", {"variables": {"name": "A"}})
    assert first.status_code == 202
    same = _publish(client, headers, "k-1", {"variables": {"name": "A"}})
    assert same.status_code == 202 and same.json()["job_id"] == first.json()["job_id"]
    rows = count_rows(client.app.state.runtime, service)
    for body, topic in (
        ({"variables": {"name": "B"}}, "sports"),
        ({"variables": {"name": "A"}, "title": "x"}, "sports"),
        ({"variables": {"name": "A"}}, "music"),
    ):
        r = _publish(client, headers, "k-1", body, topic)
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_input" and "different request" in error["message"]
        assert error["details"][0]["loc"] == ["header", "Idempotency-Key"]
    assert count_rows(client.app.state.runtime, service) == rows


def test_client_keys_never_reach_the_schedulers_jobs(client, tenant, runtime) -> None:
    service, headers, notification_key = tenant
    scheduler_key = "cycle:" + notification_key + ":UTC:MON0900:2026-03-09T09:00Z"
    scheduled = topic_job(
        runtime, service, notification_key, "sports", idempotency_key=scheduler_key, variables={"name": "A"}
    )
    r = _publish(client, headers, scheduler_key, {"variables": {"name": "A"}})
    assert r.status_code == 202 and r.json()["job_id"] != scheduled.job_id
    with runtime.engine.connect() as conn:
        keys = dict(
            conn.execute(
                text("SELECT job_id, idempotency_key FROM fanout_job WHERE service = :s"), {"s": service}
            ).all()
        )
    assert keys == {scheduled.job_id: scheduler_key, r.json()["job_id"]: "client:" + scheduler_key}
