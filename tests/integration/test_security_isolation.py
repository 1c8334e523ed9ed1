"""Tenant isolation (issue 9, item 6): for EVERY service endpoint of the app (iterated from its
routes, so a new endpoint cannot be forgotten), service A's key addressing service B's objects gets
exactly the answer a truly missing object gets (same status, same body), and B's data is unchanged
afterwards.

How: B gets a user with a device, TOPIC/CYCLE/SINGLE templates, subscriptions and a publish job.
Each route is called twice with A's key: once with B's identifiers, once with fresh identifiers
that exist nowhere; the two answers must be identical once the identifiers themselves are masked.
Routes that create in the caller's own tenant (``OWN``) are checked to never return B's objects.
"""

from __future__ import annotations

import collections
import json
import re
import secrets
import uuid
from datetime import UTC, datetime

import pytest
from fastapi.routing import APIRoute

from notee.core import notification_id
from notee.store import webhooks_sql
from tests.support.registry import admin_headers, new_template, new_user, random_token
from tests.support.stores import snapshot

# Routes that act on the caller's own tenant only; each gets its own check below.
OWN = {
    "PUT /v1/users/{service_user_id}",
    "PUT /v1/templates/{method}/{type}",
    "GET /v1/templates",
    "GET /v1/jobs",
    # dead letters: the caller's own only; tests/integration/test_operators.py checks another tenant's ids are not found
    "GET /v1/dead-letters",
    "POST /v1/dead-letters/replay",
    # insight: counts, calendar and summary of the caller's own service (tests/integration/test_insight_api.py too)
    "GET /v1/subscriber-counts",
    "GET /v1/topics",
    "GET /v1/calendar",
    "GET /v1/delivery-summary",
    # webhook endpoints: created in and listed from the caller's own tenant (checked below)
    "POST /v1/webhooks",
    "GET /v1/webhooks",
    # quiet hours: the caller's own service's (tests/integration/test_quiet_hours.py checks another tenant's stay unchanged)
    "GET /v1/service/quiet-hours",
    "PUT /v1/service/quiet-hours",
    # the VAPID public key: the caller's own service's (checked below)
    "GET /v1/service/webpush",
    # segments: created in (PUT creates when absent) and listed from the caller's own tenant (checked below)
    "POST /v1/segments",
    "GET /v1/segments",
    "PUT /v1/segments/{name}",
    # bulk import and export: into and out of the caller's own service (checked below; another tenant's
    # import id is a lookup, tests/integration/test_imports.py too)
    "POST /v1/imports",
    "GET /v1/imports",
    "GET /v1/exports/users",
    # engagement figures of the caller's own service (another tenant's job ids: the stats/jobs lookups)
    "GET /v1/stats",
}

# A valid body per route with one (a 422 would hide the lookup); {token} etc. are filled in.
BODIES: dict[str, dict] = {
    "POST /v1/topics/{type}/{topic}/publish": {"variables": {"name": "x"}},
    "POST /v1/publish/{type}": {"users": ["{service_user_id}"], "variables": {"name": "x"}},
    # previews write nothing; another tenant's type, topic and users are as unknown as in a publish
    "POST /v1/topics/{type}/{topic}/publish/preview": {"variables": {"name": "x"}},
    "POST /v1/publish/{type}/preview": {"users": ["{service_user_id}"], "variables": {"name": "x"}},
    "POST /v1/users/{user_id}/devices": {"token": "{new_token}", "os": "AOS", "region": "KR"},
    "POST /v1/devices/rotate": {"old_token": "{token}", "new_token": "{new_token}"},
    "PUT /v1/users/{user_id}/subscriptions/cycle/{type}": {"days": ["MON"], "hour": 9, "minute": 30},
    "POST /v1/topics/{type}/{topic}/subscribers": {"user_ids": ["{user_id}"]},
    "POST /v1/users/{user_id}/send": {"type": "{single_type}", "variables": {"name": "x"}},
    "PUT /v1/users/{service_user_id}": {"name": "x"},
    "PUT /v1/templates/{method}/{type}": {"title": "t", "body": "b"},
    "POST /v1/webhooks": {"url": "https://hooks.example.com/notee"},
    "PUT /v1/service/quiet-hours": {"quiet_hours": None},
    "PATCH /v1/users/{user_id}/tags": {"plan": "a-value", "gone": None},
    "PUT /v1/users/{user_id}/tags": {"plan": "a-value"},
    "POST /v1/segments": {"name": "{name}", "filter": [[{"tag": "plan", "op": "exists"}]]},
    "PUT /v1/segments/{name}": {"filter": [[{"tag": "plan", "op": "exists"}]]},
    # another tenant's segment is no segment of the caller's: the same 422 as a name nobody has
    "POST /v1/audience/estimate": {"segments": {"include": ["{name}"]}},
    # another tenant's notification id is refused per item exactly like one nobody has
    "POST /v1/receipts": {"events": [{"notification_id": "{nid}", "event": "opened", "at": "{now}"}]},
}


# Which of B's templates a route's {type}/{method} addresses (by path).
def _template_of(path: str) -> str:
    if "/cycle/" in path:
        return "cycle"
    if path.endswith("/send"):
        return "single"
    return "topic"


def all_routes(routes, prefix: str = "") -> list[tuple[APIRoute, str]]:
    """Every APIRoute with its full path. FastAPI >= 0.16x keeps included routers nested
    (``_IncludedRouter``) instead of copying their routes into ``app.routes``: walk them."""
    out = []
    for route in routes:
        if isinstance(route, APIRoute):
            out.append((route, re.sub(r"\{(\w+):\w+\}", r"{\1}", prefix + route.path)))  # {token:path}
        elif hasattr(route, "original_router"):
            context = getattr(route, "include_context", None)
            out += all_routes(route.original_router.routes, prefix + getattr(context, "prefix", ""))
        elif hasattr(route, "routes"):  # a mounted router
            out += all_routes(route.routes, prefix + getattr(route, "path", ""))
    return out


def service_routes(app) -> list[tuple[str, str]]:
    return sorted(
        {
            (m, path)
            for route, path in all_routes(app.routes)
            for m in route.methods
            if path.startswith("/v1/") and not path.startswith("/v1/admin")
        }
    )


def admin_routes(app) -> list[tuple[str, str]]:
    return sorted(
        {(m, path) for route, path in all_routes(app.routes) for m in route.methods if path.startswith("/v1/admin")}
    )


def test_route_walk_matches_the_openapi_document(app):
    documented = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    walked = {(m, p) for route, p in all_routes(app.routes) for m in route.methods if route.include_in_schema}
    assert walked == documented


@pytest.fixture(scope="module")
def tenants(client, runtime, make_module_tenant):
    a, a_auth = make_module_tenant()
    b, b_auth = make_module_tenant()
    token = random_token("iso")
    b_suid = "b-user-" + secrets.token_hex(4)
    user_id = new_user(client, b_auth, b_suid, devices=[(token, "AOS")])
    topic_t = new_template(client, b_auth, "TOPIC", "news")
    cycle_t = new_template(client, b_auth, "CYCLE", "daily")
    single_t = new_template(client, b_auth, "SINGLE", "ping")
    assert client.put(f"/v1/users/{user_id}/subscriptions/topic/news/all", headers=b_auth).status_code == 201
    r = client.put(
        f"/v1/users/{user_id}/subscriptions/cycle/daily", json={"days": ["MON"], "hour": 9, "minute": 0}, headers=b_auth
    )
    assert r.status_code == 201, r.text
    hook = client.post("/v1/webhooks", json={"url": "https://hooks.example.com/b"}, headers=b_auth)
    assert hook.status_code == 201, hook.text
    r = client.post("/v1/topics/news/all/publish", json={"variables": {"name": "b"}}, headers=b_auth)
    assert r.status_code == 202, r.text
    tag_key = "iso-" + secrets.token_hex(4)
    r_tags = client.patch(f"/v1/users/{user_id}/tags", json={tag_key: "b-secret"}, headers=b_auth)
    assert r_tags.status_code == 200, r_tags.text
    with runtime.sessions.begin() as s:  # one event in B's outbox, as a finished job would write it
        webhooks_sql.emit(s, b, "job.finished", {"job_id": r.json()["job_id"]})
    delivery = client.get(f"/v1/webhooks/{hook.json()['endpoint_id']}/deliveries", headers=b_auth).json()["items"][0]
    segment = "b-seg-" + secrets.token_hex(4)
    made = client.post(
        "/v1/segments", json={"name": segment, "filter": [[{"tag": "plan", "op": "exists"}]]}, headers=b_auth
    )
    assert made.status_code == 201, made.text
    imported = client.post(
        "/v1/imports",
        content=json.dumps({"user": b_suid, "name": "imported"}) + "\n{bad\n",
        headers=b_auth | {"Content-Type": "application/x-ndjson"},
    )
    assert imported.status_code == 202, imported.text
    b_ids = {
        "user_id": user_id,
        "service_user_id": b_suid,
        "token": token,
        "topic": "all",
        "job_id": r.json()["job_id"],
        "keys": [topic_t["notification_key"], cycle_t["notification_key"], single_t["notification_key"]],
        "types": {"topic": "news", "cycle": "daily", "single": "ping"},
        "endpoint_id": hook.json()["endpoint_id"],
        "delivery_id": str(delivery["delivery_id"]),
        "import_id": imported.json()["import_id"],
        "key": tag_key,
        "name": segment,
    }
    return {"a": a, "b": b, "a_auth": a_auth, "b_auth": b_auth, "b_ids": b_ids}


def _fill(value, ids: dict[str, str]):
    if isinstance(value, str):
        return re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], value)
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    return value


def _request(client, method: str, path: str, ids: dict[str, str], headers):
    url = _fill(path, ids)
    body = BODIES.get(f"{method} {path}")
    return client.request(method, url, json=_fill(body, ids) if body is not None else None, headers=headers)


def _masked(text: str, ids: dict[str, str]) -> str:
    for name, value in sorted(ids.items(), key=lambda kv: -len(kv[1])):
        text = text.replace(value, f"<{name}>")
    return text


def _ids_for(path: str, which: dict) -> dict[str, str]:
    kind = _template_of(path)
    method = {"topic": "TOPIC", "cycle": "CYCLE", "single": "SINGLE"}[kind]
    return {
        "user_id": which["user_id"],
        "service_user_id": which["service_user_id"],
        "token": which["token"],
        "topic": which["topic"],
        "job_id": which["job_id"],
        "type": which["types"][kind],
        "method": method,
        "single_type": which["types"]["single"],
        "new_token": which["new_token"],
        "endpoint_id": which["endpoint_id"],
        "delivery_id": which["delivery_id"],
        "import_id": which["import_id"],
        "key": which["key"],
        "name": which["name"],
        "nid": notification_id.make(notification_id.source_of_job(which["job_id"]), which["token"]),
        "now": datetime.now(UTC).isoformat(),
    }


def _missing() -> dict:
    return {
        "user_id": str(uuid.uuid4()),
        "service_user_id": "nobody-" + secrets.token_hex(4),
        "token": random_token("none"),
        "topic": "t" + secrets.token_hex(3),
        "job_id": str(uuid.uuid4()),
        "types": {k: "missing" + secrets.token_hex(3) for k in ("topic", "cycle", "single")},
        "endpoint_id": str(uuid.uuid4()),
        "delivery_id": str(secrets.randbelow(10**9) + 10**9),
        "import_id": str(uuid.uuid4()),
        "key": "iso-" + secrets.token_hex(4),
        "name": "nobody-seg-" + secrets.token_hex(4),
    }


def test_every_service_route_is_covered(app):
    """A new route must be classified: a body in BODIES when it takes one."""
    for route, path in all_routes(app.routes):
        method = sorted(route.methods)[0]
        if not path.startswith("/v1/") or path.startswith("/v1/admin"):
            continue
        if route.body_field is not None and route.body_field.field_info.is_required():
            assert f"{method} {path}" in BODIES, f"{method} {path} takes a body: add a valid one to BODIES"


def test_the_vapid_public_key_is_the_callers_own(client, settings, tenants):
    """A's key reads A's VAPID key (none: 404), never B's; B reads its own (the check can fail)."""
    r = client.post(
        f"/v1/admin/services/{tenants['b']}/credentials/webpush/generate",
        json={"subject": "mailto:b@example.com"},
        headers=admin_headers(settings),
    )
    assert r.status_code == 200, r.text
    mine = client.get("/v1/service/webpush", headers=tenants["a_auth"])
    assert mine.status_code == 404 and r.json()["public_key"] not in mine.text
    theirs = client.get("/v1/service/webpush", headers=tenants["b_auth"])
    assert theirs.json()["public_key"] == r.json()["public_key"]


def test_other_tenants_objects_answer_like_missing_ones(app, client, runtime, tenants):
    b_ids = dict(tenants["b_ids"])
    before = snapshot(runtime, tenants["b"])
    b_subs = client.get(f"/v1/users/{b_ids['user_id']}/subscriptions", headers=tenants["b_auth"]).json()
    checked = []
    routes = service_routes(app)
    lookups = [r for r in routes if f"{r[0]} {r[1]}" not in OWN]
    for method, path in lookups:
        new_token = random_token("new")
        theirs = _ids_for(path, b_ids | {"new_token": new_token})
        missing = _ids_for(path, _missing() | {"new_token": new_token})
        r_theirs = _request(client, method, path, theirs, tenants["a_auth"])
        r_missing = _request(client, method, path, missing, tenants["a_auth"])
        assert r_theirs.status_code == r_missing.status_code, (method, path, r_theirs.text, r_missing.text)
        assert _masked(r_theirs.text, theirs) == _masked(r_missing.text, missing), (method, path)
        assert r_theirs.status_code != 500
        for key in b_ids["keys"] + [b_ids["user_id"], b_ids["job_id"]]:
            assert key not in r_theirs.text or key in _fill(path, theirs), (method, path, "revealed", key)
        checked.append((method, path, r_theirs.status_code))
    # Own-tenant routes never hand back B's objects.
    a_auth = tenants["a_auth"]
    r = client.put(f"/v1/users/{b_ids['service_user_id']}", json={"name": "x"}, headers=a_auth)
    assert r.status_code in (200, 201) and r.json()["user_id"] != b_ids["user_id"]
    r = client.get("/v1/templates", headers=a_auth)
    assert r.status_code == 200 and not any(k in r.text for k in b_ids["keys"])
    r = client.get("/v1/webhooks", headers=a_auth)
    assert r.status_code == 200 and b_ids["endpoint_id"] not in r.text
    assert b_ids["endpoint_id"] in client.get("/v1/webhooks", headers=tenants["b_auth"]).text  # the check can fail
    r = client.get("/v1/jobs", headers=a_auth)
    assert r.status_code == 200 and b_ids["job_id"] not in r.text
    assert b_ids["job_id"] in client.get("/v1/jobs", headers=tenants["b_auth"]).text  # the check can fail
    for path in ("/v1/subscriber-counts", "/v1/topics", "/v1/calendar?hours=168", "/v1/delivery-summary"):
        mine, theirs = client.get(path, headers=a_auth), client.get(path, headers=tenants["b_auth"])
        assert mine.status_code == theirs.status_code == 200, (path, mine.text)
        assert tenants["b"] not in mine.text and not any(k in mine.text for k in b_ids["keys"]), path
        assert '"all"' not in mine.text, path  # B's topic
    assert '"all"' in client.get("/v1/topics", headers=tenants["b_auth"]).text  # the checks can fail
    assert b_ids["keys"][1] in client.get("/v1/calendar?hours=168", headers=tenants["b_auth"]).text
    assert tenants["b"] in client.get("/v1/delivery-summary", headers=tenants["b_auth"]).text
    r = client.get("/v1/segments", headers=a_auth)
    assert r.status_code == 200 and b_ids["name"] not in r.text
    assert b_ids["name"] in client.get("/v1/segments", headers=tenants["b_auth"]).text  # the check can fail
    b_segment = client.get(f"/v1/segments/{b_ids['name']}", headers=tenants["b_auth"]).json()
    r = client.put(f"/v1/segments/{b_ids['name']}", json={"filter": [[{"tag": "x", "op": "exists"}]]}, headers=a_auth)
    assert r.status_code == 201, r.text  # A's own segment of that name, not B's replaced
    assert client.get(f"/v1/segments/{b_ids['name']}", headers=tenants["b_auth"]).json() == b_segment
    r = client.put("/v1/templates/TOPIC/news", json={"title": "t", "body": "b"}, headers=a_auth)
    assert r.status_code in (200, 201) and r.json()["notification_key"] not in b_ids["keys"]
    r = client.get("/v1/imports", headers=a_auth)
    assert r.status_code == 200 and b_ids["import_id"] not in r.text
    assert b_ids["import_id"] in client.get("/v1/imports", headers=tenants["b_auth"]).text  # the check can fail
    r = client.get("/v1/exports/users", headers=a_auth)
    assert r.status_code == 200 and b_ids["token"] not in r.text  # (A has a user of B's service_user_id: PUT above)
    assert b_ids["token"] in client.get("/v1/exports/users", headers=tenants["b_auth"]).text
    assert {f"{m} {p}" for m, p in routes} - {f"{m} {p}" for m, p, _ in checked} == OWN & {
        f"{m} {p}" for m, p in routes
    }

    # B is untouched: MySQL rows, counters, and its subscriptions in Cassandra.
    assert snapshot(runtime, tenants["b"]) == before
    assert client.get(f"/v1/users/{b_ids['user_id']}/subscriptions", headers=tenants["b_auth"]).json() == b_subs
    assert len(checked) >= 15, checked
    print(
        f"\nisolation: {len(checked)} lookup routes answered A like a missing object: "
        f"{sorted({s for _, _, s in checked})} statuses; {len(OWN)} own-tenant routes checked"
    )


def test_admin_routes_refuse_service_keys(app, client, tenants):
    routes = admin_routes(app)
    assert routes, "no admin routes found"
    for method, path in routes:
        url = re.sub(r"\{service\}", tenants["a"], path)
        url = re.sub(r"\{\w+\}", "x", url)
        for headers in (tenants["a_auth"], {}, {"Authorization": "Bearer not-the-admin-token"}):
            r = client.request(method, url, headers=headers, json={} if method in ("POST", "PUT") else None)
            assert r.status_code == 401, (method, path, headers.keys(), r.status_code, r.text)
            assert r.json()["error"]["code"] == "unauthorized"


def test_service_routes_refuse_the_admin_token(app, client, settings, tenants):
    admin = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
    for method, path in service_routes(app):
        ids = _ids_for(path, tenants["b_ids"] | {"new_token": random_token("x")})
        r = _request(client, method, path, ids, admin)
        assert r.status_code == 401, (method, path, r.status_code)


def test_a_client_key_is_refused_by_every_route_but_receipts(app, client, settings, tenants):
    """A client key ships inside apps: every route but ``POST /v1/receipts`` answers 403 (a tenant
    route) or 401 (the admin API), whatever the ids; the receipts route takes it."""
    r = client.post(
        f"/v1/admin/services/{tenants['a']}/api-keys", json={"kind": "client"}, headers=admin_headers(settings)
    )
    assert r.status_code == 201, r.text
    key = {"Authorization": f"Bearer {r.json()['api_key']}"}
    ids = _ids_for("/v1/x", dict(tenants["b_ids"]) | {"new_token": random_token("ck")})
    ids |= {"service": tenants["a"]}  # the admin routes' other parameters: their own names (refused before routing)
    ids = collections.defaultdict(lambda: "x", ids)
    walked = []
    for method, path in service_routes(app) + admin_routes(app):
        if (method, path) == ("POST", "/v1/receipts"):
            continue
        status = _request(client, method, path, ids, key).status_code
        assert status == (401 if path.startswith("/v1/admin") else 403), (method, path, status)
        walked.append(path)
    assert "/v1/stats" in walked and "/v1/admin/services" in walked
    r = _request(client, "POST", "/v1/receipts", ids, key)
    assert r.status_code == 200 and r.json()["rejected"][0]["reason"] == "not_found", r.text
