"""The web console's security over plain HTTP (docs/CONSOLE.md): no session → the sign-in page;
a wrong, malformed or revoked key cannot sign in; the session cookie's flags; CSRF on every form
(missing or wrong → 403 and nothing written); sign-out, expiry and key revocation end a session;
failed sign-ins are throttled; one tenant's session never reaches another's data; the key that
signed in is never in a page, a cookie or the logs."""

from __future__ import annotations

import logging
import re
import secrets

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import text

from notee.api.app import create_app
from notee.core.settings import Settings
from notee.store.runtime import Runtime
from tests.support.fanout import topic_job
from tests.support.registry import new_service, new_template

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
SERVICE_PAGES = ["jobs", "publish", "templates", "topics", "dead-letters", "calendar"]


def _browser(app) -> TestClient:
    """A fresh cookie jar on the shared app (the session-scoped ``client`` must not keep cookies;
    the test requests ``client`` too, whose lifespan gave the app its runtime)."""
    return TestClient(app, follow_redirects=False)


def _csrf(page_html: str) -> str:
    match = CSRF.search(page_html)
    assert match, "no csrf field on the page"
    return match.group(1)


def sign_in(c: TestClient, secret: str, next_path: str | None = None) -> TestClient:
    form_page = c.get("/console/sign-in")
    assert form_page.status_code == 200
    r = c.post(
        "/console/sign-in",
        data={"csrf": _csrf(form_page.text), "secret": secret, "next": next_path or "/console/"},
    )
    assert r.status_code == 303, r.text
    return c


def new_template_key(client, key: str) -> str:
    return client.get("/v1/templates/TOPIC/news", headers={"Authorization": f"Bearer {key}"}).json()["notification_key"]


def _key(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


@pytest.fixture()
def tenant(tenant) -> str:
    """The family's tenant with a TOPIC template; its API key."""
    tenant.template("TOPIC", "news", title="Hi {{name}}", body="b")
    return tenant.api_key


def test_without_a_session_pages_redirect_to_sign_in_and_posts_write_nothing(app, client, settings, service_id, tenant):
    c = _browser(app)
    for page in ["/console/", "/console/services", "/console/health"] + [
        f"/console/s/{service_id}/{p}" for p in SERVICE_PAGES
    ]:
        r = c.get(page)
        assert r.status_code == 303 and r.headers["location"].startswith("/console/sign-in?next="), (page, r.text)
    r = c.get(f"/console/s/{service_id}/jobs.json")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    r = c.post(
        f"/console/s/{service_id}/templates",
        data={"csrf": "x", "method": "TOPIC", "type": "sneaky", "title": "t", "body": "b"},
    )
    assert r.status_code == 303 and r.headers["location"].startswith("/console/sign-in")
    listed = client.get("/v1/templates", headers={"Authorization": f"Bearer {tenant}"}).json()["items"]
    assert [t["type"] for t in listed] == ["news"]  # nothing was written


def test_a_wrong_malformed_or_revoked_key_cannot_sign_in(app, client, settings, service_id, tenant):
    revoked = new_service(client, settings, "R" + service_id[1:])
    key_id = _key(revoked).split("_")[1]
    admin = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
    assert client.delete(f"/v1/admin/services/R{service_id[1:]}/api-keys/{key_id}", headers=admin).status_code == 204
    wrong_secret = tenant[: -len(tenant.split("_", 2)[2])] + secrets.token_urlsafe(32)
    for secret in ["", "nonsense", wrong_secret, _key(revoked), settings.admin_token.get_secret_value() + "x"]:
        c = _browser(app)
        page = c.get("/console/sign-in")
        r = c.post("/console/sign-in", data={"csrf": _csrf(page.text), "secret": secret, "next": "/console/"})
        assert r.status_code == 401 and "Unknown admin token or API key" in r.text, secret
        assert "notee_console=" not in r.headers.get("set-cookie", "")
        assert c.get("/console/").status_code == 303  # still signed out


def test_session_cookie_is_httponly_samesite_strict_opaque_and_secure_over_tls(app, runtime, tenant):
    c = _browser(app)
    page = c.get("/console/sign-in")
    r = c.post("/console/sign-in", data={"csrf": _csrf(page.text), "secret": tenant, "next": "/console/"})
    assert r.status_code == 303
    cookie = next(v for k, v in r.headers.multi_items() if k == "set-cookie" and v.startswith("notee_console="))
    flags = [f.strip().lower() for f in cookie.split(";")]
    assert "httponly" in flags and "samesite=strict" in flags and "path=/console" in flags
    assert any(f.startswith("max-age=") for f in flags) and "secure" not in flags  # plain HTTP here
    session_id = cookie.split(";")[0].split("=", 1)[1]
    assert tenant not in cookie and tenant.split("_", 2)[2] not in cookie and len(session_id) >= 40
    with runtime.engine.connect() as conn:  # only the id's hash is stored
        assert (
            conn.execute(
                text("SELECT COUNT(*) FROM console_session WHERE session_hash = SHA2(:i, 256)"), {"i": session_id}
            ).scalar()
            == 1
        )
        assert (
            conn.execute(
                text("SELECT COUNT(*) FROM console_session WHERE session_hash = :i"), {"i": session_id}
            ).scalar()
            == 0
        )
    tls = TestClient(app, base_url="https://testserver", follow_redirects=False)
    page = tls.get("/console/sign-in")
    r = tls.post("/console/sign-in", data={"csrf": _csrf(page.text), "secret": tenant, "next": "/console/"})
    cookie = next(v for k, v in r.headers.multi_items() if k == "set-cookie" and v.startswith("notee_console="))
    assert "secure" in [f.strip().lower() for f in cookie.split(";")]


def test_csrf_missing_or_wrong_is_403_and_writes_nothing(app, client, service_id, tenant):
    c = sign_in(_browser(app), tenant)
    other = sign_in(_browser(app), tenant)  # another session's token is not this one's
    other_token = _csrf(other.get(f"/console/s/{service_id}/templates").text)
    good = _csrf(c.get(f"/console/s/{service_id}/templates").text)
    assert other_token != good
    form = {"method": "TOPIC", "type": "forged", "title": "t", "body": "b"}
    for bad in [{}, {"csrf": ""}, {"csrf": "x" * 43}, {"csrf": other_token}]:
        r = c.post(f"/console/s/{service_id}/templates", data=form | bad)
        assert r.status_code == 403 and "Nothing was changed" in r.text, bad
    r = c.post(
        f"/console/s/{service_id}/templates",
        content=b'{"csrf": "%s"}' % good.encode(),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 403  # only a form body carries the token
    r = c.post(f"/console/s/{service_id}/publish", data={"type": "news", "topic": "sports"})
    assert r.status_code == 403
    listed = client.get("/v1/templates", headers={"Authorization": f"Bearer {tenant}"}).json()["items"]
    assert [t["type"] for t in listed] == ["news"]
    assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {tenant}"}).json()["items"] == []
    # The sign-in form has its own token (double submit): without it, no session is opened.
    fresh = _browser(app)
    r = fresh.post("/console/sign-in", data={"secret": tenant, "next": "/console/"})
    assert r.status_code == 403 and "notee_console=" not in r.headers.get("set-cookie", "")
    # With the token the same form works, and the posted template is written.
    r = c.post(f"/console/s/{service_id}/templates", data=form | {"csrf": good})
    assert r.status_code == 303
    listed = client.get("/v1/templates", headers={"Authorization": f"Bearer {tenant}"}).json()["items"]
    assert sorted(t["type"] for t in listed) == ["forged", "news"]


def test_sign_out_expiry_and_key_revocation_end_a_session(app, client, settings, runtime, service_id, tenant):
    c = sign_in(_browser(app), tenant)
    assert c.get(f"/console/s/{service_id}/jobs").status_code == 200
    token = _csrf(c.get(f"/console/s/{service_id}/jobs").text)
    cookie = c.cookies.get("notee_console")
    assert c.post("/console/sign-out", data={"csrf": token}).status_code == 303
    replay = _browser(app)
    replay.cookies.set("notee_console", cookie, path="/console")
    assert replay.get(f"/console/s/{service_id}/jobs").status_code == 303  # the old id no longer opens anything

    c = sign_in(_browser(app), tenant)
    with runtime.engine.begin() as conn:  # the session's time is up
        conn.execute(
            text("UPDATE console_session SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE service = :s"),
            {"s": service_id},
        )
    assert c.get(f"/console/s/{service_id}/jobs").status_code == 303

    c = sign_in(_browser(app), tenant)
    assert c.get(f"/console/s/{service_id}/jobs").status_code == 200
    admin = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
    key_id = tenant.split("_")[1]
    assert client.delete(f"/v1/admin/services/{service_id}/api-keys/{key_id}", headers=admin).status_code == 204
    assert c.get(f"/console/s/{service_id}/jobs").status_code == 303  # revoking the key ended it


def test_a_tenant_session_never_reaches_another_tenants_data(app, client, settings, runtime, service_id, tenant):
    other = "O" + service_id[1:]
    other_headers = new_service(client, settings, other, credentials=True)
    other_tpl = new_template(client, other_headers, "TOPIC", "secretnews", title="Other {{name}}", body="b")
    job = topic_job(runtime, other, other_tpl["notification_key"], "othertopic", type_="secretnews")
    c = sign_in(_browser(app), tenant)
    for path in [f"/console/s/{other}/{p}" for p in SERVICE_PAGES] + [
        f"/console/s/{other}/jobs/{job.job_id}",
        f"/console/s/{service_id}/jobs/{job.job_id}",
        "/console/services",
    ]:
        r = c.get(path)
        assert r.status_code == 404 and other not in r.text and "secretnews" not in r.text, path
    for path in [f"/console/s/{other}/jobs.json", f"/console/s/{service_id}/jobs/{job.job_id}.json"]:
        r = c.get(path)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
    own = c.get(f"/console/s/{service_id}/jobs.json").json()["items"]
    assert own == []
    mine = topic_job(runtime, service_id, new_template_key(client, tenant), "mytopic")
    r = c.get(f"/console/s/{service_id}/jobs/{mine.job_id}.json")
    assert r.status_code == 200 and r.json()["job_id"] == mine.job_id and r.json()["state"] == "queued"
    assert [j["job_id"] for j in c.get(f"/console/s/{service_id}/jobs.json").json()["items"]] == [mine.job_id]
    token = _csrf(c.get(f"/console/s/{service_id}/jobs").text)
    r = c.post(f"/console/s/{service_id}/jobs/{job.job_id}/cancel", data={"csrf": token})
    assert r.status_code == 404
    r = c.post(f"/console/s/{other}/publish", data={"csrf": token, "type": "secretnews", "topic": "othertopic"})
    assert r.status_code == 404
    r = c.post(f"/console/services/{other}/keys", data={"csrf": token, "label": "stolen"})
    assert r.status_code == 404
    status = client.get(f"/v1/jobs/{job.job_id}", headers=other_headers).json()
    assert status["state"] == "queued"  # not cancelled
    assert len(client.get("/v1/jobs", headers=other_headers).json()["items"]) == 1  # no second publish
    keys = client.get(
        f"/v1/admin/services/{other}/api-keys",
        headers={"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"},
    )
    assert len(keys.json()["items"]) == 1
    # The health page shows this service's queue only: the other's queued job is not counted there.
    health = c.get("/console/health").text
    assert other not in health and job.job_id not in health
    # The admin sees both.
    admin = sign_in(_browser(app), settings.admin_token.get_secret_value())
    assert admin.get(f"/console/s/{other}/jobs/{job.job_id}").status_code == 200
    assert other in admin.get(f"/console/services?q={other}").text
    assert service_id in admin.get(f"/console/services?q={service_id}").text


def test_the_key_is_never_in_a_page_a_cookie_or_the_logs(app, service_id, tenant, caplog):
    caplog.set_level(logging.DEBUG)
    c = sign_in(_browser(app), tenant)
    secret_part = tenant.split("_", 2)[2]
    seen = []
    for path in ["/console/health"] + [f"/console/s/{service_id}/{p}" for p in SERVICE_PAGES]:
        r = c.get(path)
        assert r.status_code == 200, (path, r.text)
        seen.append(r.text + str(r.headers))
    for value in c.cookies.values():
        seen.append(value)
    assert not any(tenant in s or secret_part in s for s in seen)
    assert tenant not in caplog.text and secret_part not in caplog.text
    assert "console sign-in: service=" in caplog.text  # the sign-in is logged, by key id only


def test_every_console_answer_has_strict_security_headers(app, tenant, service_id):
    c = sign_in(_browser(app), tenant)
    for path in ["/console/sign-in", f"/console/s/{service_id}/jobs", f"/console/s/{service_id}/jobs.json"]:
        r = c.get(path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert r.headers["cache-control"] == "no-store" and r.headers["x-frame-options"] == "DENY"
    assert c.get("/console/static/console.js").status_code == 200
    assert c.get("/console/static/console.css").headers["content-type"].startswith("text/css")


def test_failed_sign_ins_are_throttled_per_address(settings: Settings, runtime: Runtime, tenant):
    throttled = create_app(settings.model_copy(update={"console_signin_failures": 2}), runtime=runtime)
    with TestClient(throttled, follow_redirects=False) as c:  # the lifespan keeps the shared runtime open
        for _ in range(2):
            page = c.get("/console/sign-in")
            r = c.post("/console/sign-in", data={"csrf": _csrf(page.text), "secret": "nk_wrong", "next": "/console/"})
            assert r.status_code == 401
        page = c.get("/console/sign-in")
        r = c.post("/console/sign-in", data={"csrf": _csrf(page.text), "secret": tenant, "next": "/console/"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1  # even the right key waits
        assert "notee_console=" not in r.headers.get("set-cookie", "")


def test_sign_in_goes_back_only_to_a_console_page(app, tenant):
    for target, expected in [
        ("/console/health", "/console/health"),
        ("https://evil.example/", "/console/"),
        ("//evil.example/console/", "/console/"),
        ("/console/../v1/admin", "/console/"),
    ]:
        c = _browser(app)
        page = c.get("/console/sign-in")
        r = c.post("/console/sign-in", data={"csrf": _csrf(page.text), "secret": tenant, "next": target})
        assert r.headers["location"] == expected, target


def test_changing_the_admin_token_ends_every_admin_session(app, client, settings: Settings, runtime: Runtime):
    c = sign_in(_browser(app), settings.admin_token.get_secret_value())
    assert c.get("/console/services").status_code == 200
    rotated = settings.model_copy(update={"admin_token": SecretStr("rotated-" + secrets.token_urlsafe(32))})
    with TestClient(create_app(rotated, runtime=runtime), follow_redirects=False) as after:
        after.cookies.set("notee_console", c.cookies.get("notee_console"), path="/console")
        r = after.get("/console/services")
        assert r.status_code == 303 and r.headers["location"].startswith("/console/sign-in")
    assert c.get("/console/services").status_code == 200  # the deployment that kept its token keeps it


def test_the_services_page_finds_services_by_prefix_a_page_at_a_time(app, client, settings):
    prefix = "P" + secrets.token_hex(5).upper()
    admin_auth = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
    made = [f"{prefix}{i:02d}" for i in range(51)]
    for service in made:
        body = {"service": service, "display_name": "Paged"}
        assert client.post("/v1/admin/services", json=body, headers=admin_auth).status_code == 201
    admin = sign_in(_browser(app), settings.admin_token.get_secret_value())
    first = admin.get(f"/console/services?q={prefix.lower()}")  # ids are upper case: the search is too
    shown = re.findall(r'data-service="([A-Z0-9_]+)"', first.text)
    assert shown == made[:50]
    next_link = re.search(r'id="next-services" href="([^"]+)"', first.text)
    assert next_link, "no link to the next page"
    second = admin.get(next_link.group(1).replace("&amp;", "&"))
    assert re.findall(r'data-service="([A-Z0-9_]+)"', second.text) == made[50:]
    assert 'id="next-services"' not in second.text


def test_a_key_revoked_in_the_console_is_refused_at_once(app, client, settings, service_id, tenant):
    """The API caches keys that authenticated (NOTEE_API_KEY_CACHE_S); a revocation through the
    console forgets the key in this process, so the very next request with it is 401."""
    auth = {"Authorization": f"Bearer {tenant}"}
    assert client.get("/v1/templates", headers=auth).status_code == 200  # cached now
    key_id = tenant.split("_")[1]
    c = sign_in(_browser(app), settings.admin_token.get_secret_value(), "/console/services")
    page = c.get(f"/console/services?q={service_id}")
    action = f"/console/services/{service_id}/keys/{key_id}/revoke"
    assert action in page.text
    r = c.post(action, data={"csrf": _csrf(page.text)})
    assert r.status_code == 303, r.text
    r = client.get("/v1/templates", headers=auth)
    assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")


def test_a_client_key_made_in_the_console_may_only_post_receipts(app, client, settings, service_id, tenant):
    """docs/ENGAGEMENT.md: the services page makes a client key (kind select) and lists it as one."""
    c = sign_in(_browser(app), settings.admin_token.get_secret_value(), "/console/services")
    page = c.get(f"/console/services?q={service_id}")
    r = c.post(
        f"/console/services/{service_id}/keys", data={"csrf": _csrf(page.text), "label": "app", "kind": "client"}
    )
    assert r.status_code == 200, r.text
    key = re.search(r'<code class="secret">(nck_[^<]+)</code>', r.text)
    assert key, "no client key on the page"
    assert 'class="muted">client</span> app' in c.get(f"/console/services?q={service_id}").text
    auth = {"Authorization": f"Bearer {key.group(1)}"}
    assert client.get("/v1/templates", headers=auth).status_code == 403
    assert (
        client.post(
            "/v1/receipts",
            json={"events": [{"notification_id": "x", "event": "opened", "at": "2026-12-05T00:00:00Z"}]},
            headers=auth,
        ).status_code
        == 200
    )


def test_the_template_form_saves_a_payload_and_refuses_a_bad_one(app, client, service_id, tenant):
    """docs/PAYLOADS.md: the form's payload textarea is the API's payload (JSON); a bad field is the
    domain's 422 on the page, nothing written."""
    c = sign_in(_browser(app), tenant)
    good = _csrf(c.get(f"/console/s/{service_id}/templates").text)
    form = {"csrf": good, "method": "SINGLE", "type": "rich", "title": "t", "body": "b"}
    r = c.post(f"/console/s/{service_id}/templates", data=form | {"payload": '{"badge": 2, "ios": {"thread_id": "x"}}'})
    assert r.status_code == 303, r.text
    auth = {"Authorization": f"Bearer {tenant}"}
    assert client.get("/v1/templates/SINGLE/rich", headers=auth).json()["payload"] == {
        "badge": 2,
        "ios": {"thread_id": "x"},
    }
    for bad in ['{"android": {"color": "red"}}', "{not json"]:
        r = c.post(f"/console/s/{service_id}/templates", data=form | {"type": "rich2", "payload": bad})
        assert r.status_code == 422 and "payload" in r.text, r.text
    assert client.get("/v1/templates/SINGLE/rich2", headers=auth).status_code == 404


def test_the_template_form_makes_a_silent_template_without_title_or_body(app, client, service_id, tenant):
    """A background (silent) template has no title or body: the form's kind makes one; an alert with
    none is still the domain's 422 on the page, and a TTL that is not a number is refused, not dropped."""
    c = sign_in(_browser(app), tenant)
    page = c.get(f"/console/s/{service_id}/templates").text
    assert '<option value="background"' in page and 'name="title" required' not in page
    form = {"csrf": _csrf(page), "method": "TOPIC", "type": "sync", "title": "", "body": "", "data": "s=inbox"}
    r = c.post(
        f"/console/s/{service_id}/templates", data=form | {"kind": "background", "payload": '{"collapse_key": "s"}'}
    )
    assert r.status_code == 303, r.text
    auth = {"Authorization": f"Bearer {tenant}"}
    saved = client.get("/v1/templates/TOPIC/sync", headers=auth).json()
    assert (saved["title"], saved["body"], saved["payload"]) == ("", "", {"collapse_key": "s", "kind": "background"})
    r = c.post(f"/console/s/{service_id}/templates", data=form | {"type": "alert", "kind": "alert"})
    assert r.status_code == 422 and "title" in r.text, r.text
    r = c.post(
        f"/console/s/{service_id}/templates",
        data=form | {"type": "ttl", "title": "t", "body": "b", "ttl_seconds": "1h"},
    )
    assert r.status_code == 422 and "ttl_seconds" in r.text, r.text
    for type_ in ("alert", "ttl"):
        assert client.get(f"/v1/templates/TOPIC/{type_}", headers=auth).status_code == 404
