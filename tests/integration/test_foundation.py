"""The stores are real and the data layer works on them.

The rules of this topic that need no server are in tests/unit/test_foundation.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from cassandra.policies import TokenAwarePolicy
from sqlalchemy import text

from notee.core.version import VERSION
from notee.store import cassandra as cstore
from notee.store import users_sql
from notee.usecases import migrate


def test_mysql_is_a_real_mariadb_or_mysql(runtime):
    with runtime.engine.connect() as conn:
        version = conn.execute(text("SELECT VERSION()")).scalar_one()
        tz = conn.execute(text("SELECT @@session.time_zone")).scalar_one()
    assert "MariaDB" in version or version.split(".")[0] >= "8"
    assert tz == "+00:00"


def test_mysql_round_trip_through_seed_tables(runtime, service_id):
    now = datetime.now(UTC).replace(tzinfo=None)
    user_id = str(uuid.uuid4())
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "INSERT INTO service (service, display_name, timezone, created_at) VALUES (:s, 'Test', 'Asia/Seoul', :now)"
            ),
            {"s": service_id, "now": now},
        )
        s.execute(
            text(
                "INSERT INTO `user` (service, service_user_id, service_user_name, user_id, created_at, updated_at)"
                " VALUES (:s, 'svc-user-1', 'daehwan', :u, :now, :now)"
            ),
            {"s": service_id, "u": user_id, "now": now},
        )
        s.execute(
            text(
                "INSERT INTO device (service, user_id, device_token, device_os, region, created_at, updated_at)"
                " VALUES (:s, :u, 'tok-1', 'IOS', 'KR', :now, :now)"
            ),
            {"s": service_id, "u": user_id, "now": now},
        )
    with runtime.sessions() as s:
        row = s.execute(
            text("SELECT d.device_os FROM `user` u JOIN device d USING (service, user_id) WHERE u.service = :s"),
            {"s": service_id},
        ).one()
    assert row.device_os == "IOS"
    # the store itself checks the platform, not only the API (the table's CHECK went in 0031: a wider
    # one would have copied the table)
    with pytest.raises(ValueError, match="unknown device platform 'WIN'"), runtime.sessions.begin() as s:
        users_sql.upsert_device(s, service=service_id, user_id=user_id, token="tok-2", os="WIN", region="KR", now=now)
    with runtime.sessions() as s:
        assert users_sql.get_device(s, service_id, user_id, "tok-2") is None
    # deleting the user cascades to its devices
    with runtime.sessions.begin() as s:
        s.execute(text("DELETE FROM `user` WHERE service = :s"), {"s": service_id})
        left = s.execute(text("SELECT COUNT(*) FROM device WHERE service = :s"), {"s": service_id}).scalar_one()
    assert left == 0


def test_cassandra_is_real_and_round_trips(runtime, service_id):
    ks = runtime.keyspaces
    version = runtime.cql.execute("SELECT release_version FROM system.local").one().release_version
    assert version.startswith("5.")
    key = str(uuid.uuid4())
    runtime.cql.execute(
        f"INSERT INTO {ks.notification}.topic_notification (slot, notification_key, topic, no, device_token,"
        " device_os, user_id, registered_at) VALUES (0, %s, 'news', 7, 'tok', 'AOS', 'u', 1)",
        (key,),
    )
    row = runtime.cql.execute(
        f"SELECT device_os FROM {ks.notification}.topic_notification WHERE slot = 0 AND notification_key = %s"
        " AND topic = 'news'",
        (key,),
    ).one()
    assert row.device_os == "AOS"


def test_cassandra_counter_increment(runtime, service_id):
    ks = runtime.keyspaces
    stmt = runtime.cql.prepare(
        f"UPDATE {ks.numbering}.notification SET no = no + 1 WHERE service = ? AND notification_method = ?"
        " AND notification_type = ?"
    )
    for _ in range(3):
        runtime.cql.execute(stmt, (service_id, "TOPIC", "news"), execution_profile=cstore.COUNTER_PROFILE)
    row = runtime.cql.execute(f"SELECT no FROM {ks.numbering}.notification WHERE service = %s", (service_id,)).one()
    assert row.no == 3


def test_migrations_applied_twice_change_nothing(runtime, settings):
    assert migrate.migrate_mysql(runtime.engine) == []
    assert migrate.migrate_cassandra(runtime.cql, settings) == []
    with runtime.engine.connect() as conn:
        versions = conn.execute(text("SELECT name FROM schema_version ORDER BY version")).scalars().all()
    assert versions == [m.name for m in migrate.load(migrate.schema_dir() / "mysql")]


def test_changed_migration_is_refused(tmp_path, runtime):
    folder = tmp_path / "mysql"
    folder.mkdir()
    first, *others = migrate.load(migrate.schema_dir() / "mysql")
    (folder / first.name).write_text(first.text + "\n-- edited after landing\n")
    for m in others:
        (folder / m.name).write_text(m.text)
    with pytest.raises(migrate.HistoryMismatch, match="changed after it was applied"):
        migrate.migrate_mysql(runtime.engine, folder)


def test_a_recorded_version_without_its_file_is_refused(tmp_path, runtime):
    """A database migrated by a newer Notee or a development branch (here: the last file is missing,
    as after a renumbering) is not migrated further on a history this checkout cannot reproduce."""
    folder = tmp_path / "mysql"
    folder.mkdir()
    *kept, last = migrate.load(migrate.schema_dir() / "mysql")
    for m in kept:
        (folder / m.name).write_text(m.text)
    with pytest.raises(migrate.HistoryMismatch, match=f"version\\(s\\) {last.version:04d} are recorded as applied"):
        migrate.migrate_mysql(runtime.engine, folder)


def test_cassandra_session_is_token_aware(runtime):
    cstore.assert_token_aware(runtime.cql)  # raises if the murmur3 extension or policy is missing
    policy = runtime.cql.cluster.profile_manager.default.load_balancing_policy
    assert isinstance(policy, TokenAwarePolicy)
    # and a routed statement really resolves to a replica by token
    ks = runtime.keyspaces
    stmt = runtime.cql.prepare(
        f"SELECT no FROM {ks.notification}.topic_notification WHERE slot = ? AND notification_key = ? AND topic = ?"
    )
    bound = stmt.bind((0, "k", "t"))
    assert bound.routing_key is not None
    replicas = runtime.cql.cluster.metadata.get_replicas(ks.notification, bound.routing_key)
    assert replicas, "no replica resolved for a routing key"


def test_token_awareness_check_fails_without_token_routing(runtime):
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    cluster = Cluster(
        contact_points=runtime.settings.cassandra_hosts,
        port=runtime.settings.cassandra_port,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=RoundRobinPolicy())},
    )
    try:
        with pytest.raises(cstore.NotTokenAware):
            cstore.assert_token_aware(cluster.connect())
    finally:
        cluster.shutdown()


def test_health_endpoint_reports_both_stores(client):
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {
        "status": "ok",
        "mysql": "ok",
        "cassandra": "ok",
        "emulator_url": client.app.state.settings.emulator_url,
        "version": VERSION,
    }
