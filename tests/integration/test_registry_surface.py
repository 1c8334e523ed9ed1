"""The registry's public surface: the OpenAPI document (built without any database) documents every
endpoint, model and error; a MySQL outage answers 503 in the error format, quickly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from fastapi.testclient import TestClient

from notee.api.app import create_app
from notee.core.settings import Settings
from tests.support.registry import bearer

REGISTRY_PATHS = {
    "/v1/admin/services",
    "/v1/admin/services/{service}",
    "/v1/admin/services/{service}/api-keys",
    "/v1/admin/services/{service}/api-keys/{key_id}",
    "/v1/admin/services/{service}/credentials/fcm",
    "/v1/admin/services/{service}/credentials/apns",
    "/v1/admin/services/{service}/credentials",
    "/v1/admin/services/{service}/credentials/{provider}",
    "/v1/users/{service_user_id}",
    "/v1/users/{user_id}",
    "/v1/users/{user_id}/devices",
    "/v1/users/{user_id}/devices/{token}",
    "/v1/devices/rotate",
    "/v1/templates",
    "/v1/templates/{method}/{type}",
}


def test_notee_openapi_needs_no_database():
    env = os.environ | {
        "NOTEE_MYSQL_URL": "mysql+pymysql://nobody:x@127.0.0.1:1/none",
        "NOTEE_CASSANDRA_HOSTS": "127.0.0.1",
        "NOTEE_CASSANDRA_PORT": "1",
    }
    out = subprocess.run(
        [sys.executable, "-m", "notee", "openapi"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc["paths"]) >= REGISTRY_PATHS
    schemes = doc["components"]["securitySchemes"]
    assert {"AdminToken", "ApiKey"} <= set(schemes)
    for path in REGISTRY_PATHS:
        for method, op in doc["paths"][path].items():
            codes = set(op["responses"])
            ok = codes & {"200", "201", "204"}
            assert ok, (method, path)
            assert {"401", "422", "503"} <= codes, (method, path, codes)
            assert op.get("security"), (method, path)
            for code in codes - {"204"}:
                assert "application/json" in op["responses"][code].get("content", {}), (method, path, code)
            creates = (method, path) in {
                ("put", "/v1/users/{service_user_id}"),
                ("put", "/v1/templates/{method}/{type}"),
            }
            if "{" in path and not creates:
                assert "404" in codes, (method, path)
            if "requestBody" in op:
                assert "$ref" in json.dumps(op["requestBody"]), (method, path)
    assert "ErrorResponse" in doc["components"]["schemas"]


def test_mysql_down_answers_503_in_the_error_format(runtime):
    down = Settings(mysql_url="mysql+pymysql://notee:notee@127.0.0.1:1/notee_test", mysql_connect_timeout_s=1)
    with TestClient(create_app(down)) as c:
        r = c.get("/v1/templates", headers=bearer("nk_0123456789abcdef_" + "A" * 43))
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "store_unavailable"
    assert r.headers.get("Retry-After") == "1"


def test_a_store_error_that_is_no_outage_is_a_500_not_retry_later(client, settings):
    """A keyspace that does not exist is a deployment bug, not a passing outage: 503 "retry later" would
    have a client retry forever. Before, every Cassandra DriverException answered 503."""
    from tests.support.registry import new_service

    key = new_service(client, settings, "TNOKS" + os.urandom(4).hex().upper())
    broken = settings.model_copy(update={"cassandra_keyspace_notification": "notee_no_such_keyspace"})
    with TestClient(create_app(broken), raise_server_exceptions=False) as c:
        r = c.put("/v1/templates/TOPIC/news", json={"title": "t", "body": "b"}, headers=key)
    assert r.status_code == 500, r.text
    assert r.json()["error"]["code"] == "internal_error" and "Retry-After" not in r.headers  # the error format
    assert "notee_no_such_keyspace" not in r.text  # nothing of the failure's detail is returned
