"""TLS and the admin listener (issue 15, item 3): `notee api` serves HTTPS with a certificate and key,
and with NOTEE_API_ADMIN_PORT / --admin-port the admin API is served on its own listener only.

The rules of this topic that need no server are in tests/unit/test_api_listeners.py."""

from __future__ import annotations

import secrets
import ssl

import httpx
import pytest

from notee.emulator.tls import ensure_tls
from tests.support.processes import free_port, wait_http
from tests.support.registry import admin_headers


def test_https_with_a_certificate_and_key(tmp_path, settings, processes):
    files = ensure_tls(tmp_path / "tls")  # a test CA and a certificate for 127.0.0.1
    ca = ssl.create_default_context(cafile=str(files.ca_cert))
    api = processes.api(
        "--tls-cert", str(files.server_cert), "--tls-key", str(files.server_key), scheme="https", verify=ca
    )
    assert api.url.startswith("https://")
    assert httpx.get(api.url + "/healthz", verify=ca, timeout=10).status_code == 200
    service = "TLS" + secrets.token_hex(4).upper()
    r = httpx.post(
        api.url + "/v1/admin/services",
        json={"service": service, "display_name": "tls"},
        headers=admin_headers(settings),
        verify=ca,
        timeout=30,
    )
    assert r.status_code == 201, r.text
    with pytest.raises(httpx.HTTPError):  # no plain HTTP on the TLS port
        httpx.get(f"http://127.0.0.1:{api.port}/healthz", timeout=5)
    with pytest.raises(httpx.HTTPError):  # and the certificate is checked, not skipped
        httpx.get(api.url + "/healthz", verify=ssl.create_default_context(), timeout=5)


def test_https_from_settings(tmp_path, processes):
    files = ensure_tls(tmp_path / "tls")
    ca = ssl.create_default_context(cafile=str(files.ca_cert))
    env = {"NOTEE_API_TLS_CERT_FILE": str(files.server_cert), "NOTEE_API_TLS_KEY_FILE": str(files.server_key)}
    api = processes.api(scheme="https", verify=ca, **env)
    assert httpx.get(api.url + "/healthz", verify=ca, timeout=10).status_code == 200


def test_admin_api_on_its_own_listener_is_absent_from_the_tenant_one(settings, processes):
    admin_port = free_port()
    admin = admin_headers(settings)
    api = processes.api(NOTEE_API_ADMIN_PORT=str(admin_port))
    admin_url = f"http://127.0.0.1:{admin_port}"
    wait_http(admin_url + "/healthz", proc=api)
    service = "SPLIT" + secrets.token_hex(4).upper()
    body = {"service": service, "display_name": "split"}
    # Tenant listener: no admin route, even with the right token; not in its OpenAPI document.
    r = httpx.post(api.url + "/v1/admin/services", json=body, headers=admin, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    assert httpx.get(api.url + f"/v1/admin/services/{service}", headers=admin, timeout=30).status_code == 404
    paths = httpx.get(api.url + "/openapi.json", timeout=30).json()["paths"]
    assert paths and not any(p.startswith("/v1/admin") for p in paths)
    assert "/v1/templates" in paths
    # Admin listener: the admin API, and none of the tenant API.
    assert httpx.post(admin_url + "/v1/admin/services", json=body, headers=admin, timeout=30).status_code == 201
    r = httpx.post(admin_url + f"/v1/admin/services/{service}/api-keys", json={}, headers=admin, timeout=30)
    assert r.status_code == 201
    key = {"Authorization": f"Bearer {r.json()['api_key']}"}
    assert httpx.get(admin_url + "/v1/templates", headers=key, timeout=30).status_code == 404
    admin_paths = httpx.get(admin_url + "/openapi.json", timeout=30).json()["paths"]
    assert all(p.startswith("/v1/admin") or p in ("/healthz", "/livez", "/readyz") for p in admin_paths)
    # The key made on the admin listener works on the tenant one (one process, one database).
    assert httpx.get(api.url + "/v1/templates", headers=key, timeout=30).status_code == 200
    assert httpx.get(admin_url + "/healthz", timeout=10).status_code == 200
    assert api.proc.poll() is None
    # SIGTERM stops both listeners gracefully, and the process exits 0 (tests/integration/test_api_sigterm.py).
    assert api.stop(timeout=20) == 0, api.output()[-2000:]
    assert api.output().count("Application shutdown complete") == 2
