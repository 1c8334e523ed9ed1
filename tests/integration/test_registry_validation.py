"""Bad input on the registry endpoints: a 4xx in the one error format, and nothing written (every row
of the tenant, and its Cassandra counters, compared before and after)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.registry import (
    admin_headers,
    apns_credentials,
    fcm_service_account,
    new_service,
    new_template,
    new_user,
    random_token,
)
from tests.support.stores import snapshot

U = "{user_id}"
GOOD_TEMPLATE = {"title": "t", "body": "b"}

# (id, method, path, body) against a tenant that already has user U with one device and TOPIC/news
SERVICE_CASES = [
    ("user name wrong type", "PUT", "/v1/users/new-user", {"name": 5}),
    ("user name too long", "PUT", "/v1/users/new-user", {"name": "a" * 192}),
    ("user name control char", "PUT", "/v1/users/new-user", {"name": "a\x00b"}),
    ("user name newline", "PUT", "/v1/users/new-user", {"name": "a\nb"}),
    ("user unknown field", "PUT", "/v1/users/new-user", {"name": "a", "admin": True}),
    ("user body not object", "PUT", "/v1/users/new-user", ["a"]),
    ("service_user_id too long", "PUT", "/v1/users/" + "u" * 192, {"name": "a"}),
    ("service_user_id control char", "PUT", "/v1/users/a%01b", {"name": "a"}),
    ("user id not uuid", "GET", "/v1/users/not-a-uuid", None),
    ("delete user id not uuid", "DELETE", "/v1/users/not-a-uuid", None),
    ("device token too short", "POST", f"/v1/users/{U}/devices", {"token": "short", "os": "AOS"}),
    ("device token too long", "POST", f"/v1/users/{U}/devices", {"token": "a" * 513, "os": "AOS"}),
    ("device token with space", "POST", f"/v1/users/{U}/devices", {"token": "abcd efgh ijkl", "os": "AOS"}),
    ("device token non-ascii", "POST", f"/v1/users/{U}/devices", {"token": "토큰토큰토큰토큰토큰", "os": "AOS"}),
    ("device token wrong type", "POST", f"/v1/users/{U}/devices", {"token": 1234567890, "os": "AOS"}),
    ("device unknown os", "POST", f"/v1/users/{U}/devices", {"token": "abcdefgh1234", "os": "WIN"}),
    ("device lower-case os", "POST", f"/v1/users/{U}/devices", {"token": "abcdefgh1234", "os": "ios"}),
    ("device missing os", "POST", f"/v1/users/{U}/devices", {"token": "abcdefgh1234"}),
    (
        "device region too long",
        "POST",
        f"/v1/users/{U}/devices",
        {"token": "abcdefgh1234", "os": "IOS", "region": "KOREA-SOUTH"},
    ),
    ("device user not uuid", "POST", "/v1/users/nope/devices", {"token": "abcdefgh1234", "os": "IOS"}),
    ("rotate same token", "POST", "/v1/devices/rotate", {"old_token": "{token}", "new_token": "{token}"}),
    ("rotate bad new token", "POST", "/v1/devices/rotate", {"old_token": "{token}", "new_token": "bad token"}),
    ("rotate missing new", "POST", "/v1/devices/rotate", {"old_token": "{token}"}),
    ("template unknown method", "PUT", "/v1/templates/WEEKLY/news", GOOD_TEMPLATE),
    ("template lower-case method", "PUT", "/v1/templates/topic/news", GOOD_TEMPLATE),
    ("template bad type", "PUT", "/v1/templates/TOPIC/a%20b", GOOD_TEMPLATE),
    ("template type too long", "PUT", "/v1/templates/TOPIC/" + "t" * 65, GOOD_TEMPLATE),
    ("template title too long", "PUT", "/v1/templates/TOPIC/news", {"title": "t" * 201, "body": "b"}),
    ("template empty title", "PUT", "/v1/templates/TOPIC/news", {"title": "", "body": "b"}),
    ("template body too long", "PUT", "/v1/templates/TOPIC/news", {"title": "t", "body": "b" * 2001}),
    ("template title control char", "PUT", "/v1/templates/TOPIC/news", {"title": "t\x07", "body": "b"}),
    ("template body carriage return", "PUT", "/v1/templates/TOPIC/news", {"title": "t", "body": "a\rb"}),
    ("template missing body", "PUT", "/v1/templates/TOPIC/news", {"title": "t"}),
    ("template nested data", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"data": {"a": {"b": "c"}}}),
    ("template non-string data", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"data": {"a": 1}}),
    ("template data list", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"data": ["a"]}),
    (
        "template too many data keys",
        "PUT",
        "/v1/templates/TOPIC/news",
        GOOD_TEMPLATE | {"data": {f"k{i}": "v" for i in range(33)}},
    ),
    ("template negative ttl", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"ttl_seconds": -1}),
    ("template ttl too big", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"ttl_seconds": 2_419_201}),
    ("template ttl string", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"ttl_seconds": "60"}),
    ("template ttl bool", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"ttl_seconds": True}),
    ("template unknown priority", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"priority": "urgent"}),
    ("template over payload budget", "PUT", "/v1/templates/TOPIC/news", {"title": "가" * 200, "body": "나" * 2000}),
    ("template unknown field", "PUT", "/v1/templates/TOPIC/news", GOOD_TEMPLATE | {"sound": "ding"}),
    ("get template unknown method", "GET", "/v1/templates/DAILY/news", None),
    ("delete template unknown method", "DELETE", "/v1/templates/DAILY/news", None),
]


@pytest.mark.parametrize("method, path, body", [c[1:] for c in SERVICE_CASES], ids=[c[0] for c in SERVICE_CASES])
def test_bad_service_input_writes_nothing(client, settings, runtime, service_id, method, path, body):
    h = new_service(client, settings, service_id)
    token = random_token()
    user_id = new_user(client, h, devices=[(token, "AOS")])
    new_template(client, h, "TOPIC", "news")
    if isinstance(body, dict):
        body = {k: (token if v == "{token}" else v) for k, v in body.items()}
    before = snapshot(runtime, service_id)
    r = client.request(method, path.replace(U, user_id), json=body, headers=h)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] in ("invalid_input", "payload_too_large") and error["message"]
    assert isinstance(error["details"], list)
    assert snapshot(runtime, service_id) == before


def _rsa_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


ADMIN_CASES = [
    ("service lower-case", "POST", "/v1/admin/services", {"service": "smeem", "display_name": "x"}),
    ("service one char", "POST", "/v1/admin/services", {"service": "S", "display_name": "x"}),
    ("service leading digit", "POST", "/v1/admin/services", {"service": "1ABC", "display_name": "x"}),
    ("service too long", "POST", "/v1/admin/services", {"service": "S" * 33, "display_name": "x"}),
    ("service wrong type", "POST", "/v1/admin/services", {"service": 7, "display_name": "x"}),
    (
        "service unknown timezone",
        "POST",
        "/v1/admin/services",
        {"service": "{service}", "display_name": "x", "timezone": "Mars/Olympus"},
    ),
    (
        "service path timezone",
        "POST",
        "/v1/admin/services",
        {"service": "{service}", "display_name": "x", "timezone": "../../etc/passwd"},
    ),
    ("service empty display name", "POST", "/v1/admin/services", {"service": "{service}", "display_name": ""}),
    (
        "service display name too long",
        "POST",
        "/v1/admin/services",
        {"service": "{service}", "display_name": "d" * 201},
    ),
    ("service display name control", "POST", "/v1/admin/services", {"service": "{service}", "display_name": "a\x1b"}),
    ("service unknown field", "POST", "/v1/admin/services", {"service": "{service}", "display_name": "x", "x": 1}),
    ("api key label too long", "POST", "/v1/admin/services/{service}/api-keys", {"label": "l" * 101}),
    ("api key label control", "POST", "/v1/admin/services/{service}/api-keys", {"label": "a\x00"}),
    ("fcm not an object", "PUT", "/v1/admin/services/{service}/credentials/fcm", {"service_account": "json"}),
    (
        "fcm wrong type",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": fcm_service_account() | {"type": "authorized_user"}},
    ),
    (
        "fcm missing key",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": {k: v for k, v in fcm_service_account().items() if k != "private_key"}},
    ),
    (
        "fcm bad pem",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": fcm_service_account() | {"private_key": "-----BEGIN PRIVATE KEY-----\nxx\n"}},
    ),
    # token_uri is where Notee would post a JWT signed with the key: only Google's endpoint.
    (
        "fcm token_uri elsewhere",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": fcm_service_account() | {"token_uri": "https://attacker.example/token"}},
    ),
    (
        "fcm token_uri plain http",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": fcm_service_account() | {"token_uri": "http://oauth2.googleapis.com/token"}},
    ),
    (
        "fcm token_uri lookalike",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": fcm_service_account() | {"token_uri": "https://oauth2.googleapis.com.evil.example/token"}},
    ),
    (
        "fcm token_uri missing",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": {k: v for k, v in fcm_service_account().items() if k != "token_uri"}},
    ),
    (
        "fcm project_id path",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": fcm_service_account() | {"project_id": "demo/../../v1/x"}},
    ),
    (
        "fcm project_id upper case",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": fcm_service_account() | {"project_id": "Notee-Test"}},
    ),
    (
        "fcm project_id too short",
        "PUT",
        "/v1/admin/services/{service}/credentials/fcm",
        {"service_account": fcm_service_account() | {"project_id": "ab"}},
    ),
    ("apns bad key id", "PUT", "/v1/admin/services/{service}/credentials/apns", apns_credentials() | {"key_id": "x"}),
    (
        "apns bad team id",
        "PUT",
        "/v1/admin/services/{service}/credentials/apns",
        apns_credentials() | {"team_id": "team"},
    ),
    (
        "apns bad bundle",
        "PUT",
        "/v1/admin/services/{service}/credentials/apns",
        apns_credentials() | {"bundle_id": "com example"},
    ),
    (
        "apns rsa key",
        "PUT",
        "/v1/admin/services/{service}/credentials/apns",
        apns_credentials() | {"private_key": _rsa_pem()},
    ),
    (
        "apns not pem",
        "PUT",
        "/v1/admin/services/{service}/credentials/apns",
        apns_credentials() | {"private_key": "secret"},
    ),
    (
        "apns sandbox string",
        "PUT",
        "/v1/admin/services/{service}/credentials/apns",
        apns_credentials() | {"sandbox": "yes"},
    ),
    (
        "apns missing team",
        "PUT",
        "/v1/admin/services/{service}/credentials/apns",
        {k: v for k, v in apns_credentials().items() if k != "team_id"},
    ),
    ("unknown provider", "DELETE", "/v1/admin/services/{service}/credentials/gcm", None),
    ("bad key id", "DELETE", "/v1/admin/services/{service}/api-keys/XYZ", None),
    ("bad service in path", "GET", "/v1/admin/services/lower", None),
]


@pytest.mark.parametrize("method, path, body", [c[1:] for c in ADMIN_CASES], ids=[c[0] for c in ADMIN_CASES])
def test_bad_admin_input_writes_nothing(client, settings, runtime, service_id, method, path, body):
    existing = service_id + "E"
    new_service(client, settings, existing)
    if isinstance(body, dict):
        body = {k: (service_id if v == "{service}" else v) for k, v in body.items()}
    before = snapshot(runtime, existing), snapshot(runtime, service_id)
    r = client.request(method, path.replace("{service}", existing), json=body, headers=admin_headers(settings))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_input"
    for secret in ("PRIVATE KEY", "secret"):
        assert secret not in r.text
    assert (snapshot(runtime, existing), snapshot(runtime, service_id)) == before


def test_malformed_json_is_422(client, settings, service_id):
    h = new_service(client, settings, service_id)
    r = client.put("/v1/users/x", content=b"{not json", headers=h | {"Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "invalid_input"
