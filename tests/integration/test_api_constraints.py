"""The OpenAPI document states the rules the domain checks (issue 37; notee/api/documented.py): for
each, a value the document refuses is refused by the server too (422 in the error format, nothing
written), and a value it accepts is not refused for that reason. "The document refuses" is decided by
a JSON Schema validator (jsonschema-rs, 2020-12: OpenAPI 3.1's dialect) over the served document itself, so a rule
that loses its keyword fails here. The topic subscribe is tried on both of its ways: the shortcut
(``TopicSubscribeShortcut``, a lowercase user id) and the route (an uppercase one)."""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import quote

import jsonschema_rs
import pytest

from notee.api import cursors
from tests.support.registry import admin_headers, apns_credentials, fcm_service_account
from tests.support.stores import snapshot


@pytest.fixture(scope="module")
def document(client) -> dict[str, Any]:
    r = client.get("/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


@pytest.fixture(scope="module")
def tenant(module_tenant):
    user = module_tenant.user("constraints-user")
    module_tenant.template("TOPIC", "news")
    module_tenant.template("CYCLE", "remind")
    module_tenant.template("SINGLE", "hello")
    return module_tenant.service, module_tenant.headers, user


def _schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}", "components": document["components"]}


def _parameter(document: dict[str, Any], method: str, path: str, name: str) -> dict[str, Any]:
    (schema,) = [p["schema"] for p in document["paths"][path][method]["parameters"] if p["name"] == name]
    return dict(schema)


def _refuses(schema: dict[str, Any], value: Any) -> bool:
    return not jsonschema_rs.Draft202012Validator(schema).is_valid(value)


def _is_422(r) -> None:
    assert r.status_code == 422, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "invalid_input"


def _template(**fields: Any) -> dict[str, Any]:
    return {"title": "Hello", "body": "Something happened"} | fields


def _placeholders(defaults: dict[str, str]) -> dict[str, Any]:
    """A template with a placeholder for each default (and d0..d32), so that no default is unused."""
    names = sorted(set(defaults) | {f"d{i}" for i in range(33)})
    return _template(body=" ".join("{{" + n + "}}" for n in names), defaults=defaults)


_LOCALES = [a + b for a in "abcdefgh" for b in "abcdefgh"]  # 64 distinct two-letter tags

# (what, body schema, body, accepted): each refused body differs from a template the server takes
# only by the rule named.
TEMPLATE_CASES = [
    ("title control character", _template(title="Hi\x07"), _template(title="Hi ☃")),
    ("title C1 control character", _template(title="Hi\u0085"), _template(title="Hi\u00a0there")),
    ("body control but newline", _template(body="a\x0bb"), _template(body="a\nb")),
    (
        "data too many keys",
        _template(data={f"k{i}": "v" for i in range(33)}),
        _template(data={f"k{i}": "v" for i in range(32)}),
    ),
    ("data key too long", _template(data={"k" * 65: "v"}), _template(data={"k" * 64: "v"})),
    ("data key empty", _template(data={"": "v"}), _template(data={"k": "v"})),
    ("data key control character", _template(data={"a\tb": "v"}), _template(data={"a b": "v"})),
    ("data value too long", _template(data={"k": "v" * 1025}), _template(data={"k": "v" * 1024})),
    ("data value control character", _template(data={"k": "a\x00"}), _template(data={"k": "a\nb"})),
    (
        "defaults name",
        _template(title="Hi {{user.name}}", defaults={"bad-name": "x"}),
        _placeholders({"user.name": "x"}),
    ),
    (
        "defaults too many",
        _placeholders({f"d{i}": "x" for i in range(33)}),
        _placeholders({f"d{i}": "x" for i in range(32)}),
    ),
    ("defaults value too long", _placeholders({"d0": "x" * 1025}), _placeholders({"d0": "x" * 1024})),
    (
        "variants too many",
        _template(variants={tag: {"title": "t", "body": "b"} for tag in _LOCALES[:51]}),
        _template(variants={tag: {"title": "t", "body": "b"} for tag in _LOCALES[:50]}),
    ),
    (
        "variant title control character",
        _template(variants={"de": {"title": "t\x1b", "body": "b"}}),
        _template(variants={"de": {"title": "t", "body": "b"}}),
    ),
    (
        "variant data value control character",
        _template(variants={"de": {"title": "t", "body": "b", "data": {"k": "\x7f"}}}),
        _template(variants={"de": {"title": "t", "body": "b", "data": {"k": "v"}}}),
    ),
]


@pytest.mark.parametrize(("what", "bad", "good"), TEMPLATE_CASES, ids=[c[0] for c in TEMPLATE_CASES])
def test_template_rules(client, runtime, document, tenant, what, bad, good):
    service, headers, _ = tenant
    schema = _schema(document, "TemplateIn")
    assert _refuses(schema, bad) and not _refuses(schema, good), what
    type_ = "c" + secrets.token_hex(4)
    before = snapshot(runtime, service)
    _is_422(client.put(f"/v1/templates/TOPIC/{type_}", json=bad, headers=headers))
    assert snapshot(runtime, service) == before
    r = client.put(f"/v1/templates/TOPIC/{type_}", json=good, headers=headers)
    assert r.status_code == 201, r.text


SEND_CASES = [
    ("data key control character", {"a\x01": "v"}, {"a": "v"}),
    ("data too many keys", {f"k{i}": "v" for i in range(33)}, {f"k{i}": "v" for i in range(32)}),
    ("data value too long", {"k": "v" * 1025}, {"k": "v" * 1024}),
]


@pytest.mark.parametrize(("what", "bad", "good"), SEND_CASES, ids=[c[0] for c in SEND_CASES])
def test_send_data_rules(client, runtime, document, tenant, what, bad, good):
    """A single send's data: the user has no device, so an accepted send is a 2xx with no push."""
    service, headers, user = tenant
    schema = _schema(document, "SendIn")
    assert _refuses(schema, {"type": "hello", "variables": {"name": "x"}, "data": bad}) and not _refuses(
        schema, {"type": "hello", "variables": {"name": "x"}, "data": good}
    )
    before = snapshot(runtime, service)
    _is_422(
        client.post(
            f"/v1/users/{user}/send", json={"type": "hello", "variables": {"name": "x"}, "data": bad}, headers=headers
        )
    )
    assert snapshot(runtime, service) == before
    r = client.post(
        f"/v1/users/{user}/send", json={"type": "hello", "variables": {"name": "x"}, "data": good}, headers=headers
    )
    assert r.status_code != 422, r.text


def _fcm(**changed: Any) -> dict[str, Any]:
    return fcm_service_account() | changed


FCM_CASES = [
    ("type", _fcm(type="user"), _fcm()),
    ("project_id pattern", _fcm(project_id="Bad_Project"), _fcm(project_id="good-project-1")),
    ("token_uri", _fcm(token_uri="https://evil.example/token"), _fcm()),
    ("client_email control character", _fcm(client_email="a\n@b.example"), _fcm(client_email="a@b.example")),
    ("private_key missing", {k: v for k, v in _fcm().items() if k != "private_key"}, _fcm()),
]


@pytest.mark.parametrize(("what", "bad", "good"), FCM_CASES, ids=[c[0] for c in FCM_CASES])
def test_fcm_service_account_rules(client, settings, document, make_tenant, what, bad, good):
    service = make_tenant().service
    schema = _schema(document, "FcmCredentialsIn")
    assert _refuses(schema, {"service_account": bad}) and not _refuses(schema, {"service_account": good})
    path = f"/v1/admin/services/{service}/credentials"
    _is_422(client.put(f"{path}/fcm", json={"service_account": bad}, headers=admin_headers(settings)))
    assert client.get(path, headers=admin_headers(settings)).json()["fcm"] is False
    r = client.put(f"{path}/fcm", json={"service_account": good}, headers=admin_headers(settings))
    assert r.status_code == 200, r.text


def test_apns_private_key_rule(client, settings, document, make_tenant):
    service = make_tenant().service
    good = apns_credentials()
    bad = good | {"private_key": good["private_key"] + "\x00"}
    schema = _schema(document, "ApnsCredentialsIn")
    assert _refuses(schema, bad) and not _refuses(schema, good)
    path = f"/v1/admin/services/{service}/credentials"
    _is_422(client.put(f"{path}/apns", json=bad, headers=admin_headers(settings)))
    assert client.get(path, headers=admin_headers(settings)).json()["apns"] is False
    assert client.put(f"{path}/apns", json=good, headers=admin_headers(settings)).status_code == 200


WEBHOOK_CASES = [
    ("not https", "http://hooks.example.com/notee", "https://hooks.example.com/notee"),
    ("space", "https://hooks.example.com/a b", "https://hooks.example.com/a%20b"),
    ("tab", "https://hooks.example.com/\tx", "HTTPS://hooks.example.com/x"),
    ("C1 control", "https://hooks.example.com/\u0085", "https://hooks.example.com/\u00e9"),
]


@pytest.mark.parametrize(("what", "bad", "good"), WEBHOOK_CASES, ids=[c[0] for c in WEBHOOK_CASES])
def test_webhook_url_rule(client, runtime, document, make_tenant, what, bad, good):
    service, headers = make_tenant()
    url = document["components"]["schemas"]["WebhookIn"]["properties"]["url"]
    assert url["format"] == "uri" and url["pattern"].startswith("^[Hh][Tt][Tt][Pp][Ss]://")
    schema = _schema(document, "WebhookIn")
    assert _refuses(schema, {"url": bad}) and not _refuses(schema, {"url": good})
    before = snapshot(runtime, service)
    _is_422(client.post("/v1/webhooks", json={"url": bad}, headers=headers))
    assert snapshot(runtime, service) == before
    assert client.post("/v1/webhooks", json={"url": good}, headers=headers).status_code == 201


def test_service_display_name_rule(client, settings, document):
    schema = _schema(document, "ServiceIn")
    bad, good = "C" + secrets.token_hex(4).upper(), "C" + secrets.token_hex(4).upper()
    bad_body = {"service": bad, "display_name": "Shop\x1b"}
    good_body = {"service": good, "display_name": "Shop ☃"}
    assert _refuses(schema, bad_body) and not _refuses(schema, good_body)
    _is_422(client.post("/v1/admin/services", json=bad_body, headers=admin_headers(settings)))
    assert client.get(f"/v1/admin/services/{bad}", headers=admin_headers(settings)).status_code == 404
    assert client.post("/v1/admin/services", json=good_body, headers=admin_headers(settings)).status_code == 201


def test_user_name_and_service_user_id_rules(client, runtime, document, tenant):
    service, headers, _ = tenant
    schema = _schema(document, "UserIn")
    assert _refuses(schema, {"name": "a\u0085"}) and not _refuses(schema, {"name": "Ann Lee"})
    path_id = _parameter(document, "put", "/v1/users/{service_user_id}", "service_user_id")
    assert _refuses(path_id, "a\x7fb") and not _refuses(path_id, "a.b@c")
    before = snapshot(runtime, service)
    _is_422(client.put("/v1/users/name-rule", json={"name": "a\u0085"}, headers=headers))
    _is_422(client.put("/v1/users/" + quote("a\x7fb"), json={}, headers=headers))
    assert snapshot(runtime, service) == before
    assert client.put("/v1/users/name-rule", json={"name": "Ann Lee"}, headers=headers).status_code == 201
    assert client.put("/v1/users/" + quote("a.b@c"), json={}, headers=headers).status_code == 201


def test_cycle_hour_and_minute_ranges(client, runtime, document, tenant):
    service, headers, user = tenant
    schema = _schema(document, "CycleIn")
    for bad in ({"hour": 24}, {"hour": -1}, {"minute": 60}):
        body = {"days": ["MON"], "hour": 9, "minute": 0} | bad
        assert _refuses(schema, body)
        before = snapshot(runtime, service)
        _is_422(client.put(f"/v1/users/{user}/subscriptions/cycle/remind", json=body, headers=headers))
        assert snapshot(runtime, service) == before
    good = {"days": ["MON"], "hour": 23, "minute": 59}
    assert not _refuses(schema, good)
    assert client.put(f"/v1/users/{user}/subscriptions/cycle/remind", json=good, headers=headers).status_code == 201


BAD_TOPICS = ["a\u200bb", "a\x01b", " ", "\u3000", "x" * 51, "a\ufeff"]
GOOD_TOPICS = ["스포츠 news", " padded ", "x" * 50, "emoji 🎉"]
TOPIC_PATHS = [
    ("put", "/v1/users/{user_id}/subscriptions/topic/{type}/{topic}"),
    ("delete", "/v1/users/{user_id}/subscriptions/topic/{type}/{topic}"),
    ("post", "/v1/topics/{type}/{topic}/subscribers"),
    ("post", "/v1/topics/{type}/{topic}/publish"),
]


def test_every_topic_path_states_the_topic_rule(document):
    for method, path in TOPIC_PATHS:
        schema = _parameter(document, method, path, "topic")
        assert schema["minLength"] == 1 and schema["maxLength"] == 50, path
        assert all(_refuses(schema, t) for t in [*BAD_TOPICS, "a/b", ""]), path
        assert not any(_refuses(schema, t) for t in GOOD_TOPICS), path


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=repr)
def test_a_refused_topic_is_422_on_every_way(client, runtime, tenant, topic):
    """The shortcut answers a lowercase user id, the route an uppercase one: both 422, nothing written."""
    service, headers, user = tenant
    segment = quote(topic, safe="")
    before = snapshot(runtime, service)
    for user_ref in (user.lower(), user.upper()):
        _is_422(client.put(f"/v1/users/{user_ref}/subscriptions/topic/news/{segment}", headers=headers))
        _is_422(client.delete(f"/v1/users/{user_ref}/subscriptions/topic/news/{segment}", headers=headers))
    _is_422(client.post(f"/v1/topics/news/{segment}/subscribers", json={"user_ids": [user]}, headers=headers))
    _is_422(client.post(f"/v1/topics/news/{segment}/publish", json={}, headers=headers))
    assert snapshot(runtime, service) == before


@pytest.mark.parametrize("topic", GOOD_TOPICS, ids=repr)
def test_an_accepted_topic_is_subscribed_on_every_way(client, tenant, topic):
    _, headers, user = tenant
    segment = quote(topic, safe="")
    for user_ref in (user.lower(), user.upper()):
        r = client.put(f"/v1/users/{user_ref}/subscriptions/topic/news/{segment}", headers=headers)
        assert r.status_code in (200, 201), r.text
        assert (
            client.delete(f"/v1/users/{user_ref}/subscriptions/topic/news/{segment}", headers=headers).status_code
            == 204
        )
    r = client.post(f"/v1/topics/news/{segment}/subscribers", json={"user_ids": [user]}, headers=headers)
    assert r.status_code == 200, r.text


CURSOR_LISTINGS = ["/v1/users", "/v1/jobs", "/v1/dead-letters", "/v1/topics"]


@pytest.mark.parametrize("listing", CURSOR_LISTINGS)
def test_a_cursor_outside_its_alphabet_is_refused(client, document, tenant, listing):
    """A cursor the API returned, with a character base64 decoding would have skipped: the document
    refuses it (pattern), and so does the server (it used to decode it as the cursor it was)."""
    _, headers, _ = tenant
    schema = _parameter(document, "get", listing, "cursor")
    assert schema["pattern"] == cursors.PATTERN and schema["anyOf"][0]["maxLength"] in (200, 400)
    good = cursors.encode("2026-01-01T00:00:00+00:00", "00000000-0000-0000-0000-000000000000")
    for bad in (good[:4] + "!" + good[4:], good + " ", good[:4] + "." + good[4:]):
        assert _refuses(schema, bad), bad
        _is_422(client.get(listing, params={"cursor": bad}, headers=headers))
    assert not _refuses(schema, good)


def test_a_cursor_the_api_returned_is_taken(client, tenant):
    _, headers, _ = tenant
    for name in ("page-a", "page-b"):
        assert client.put(f"/v1/users/{name}", json={}, headers=headers).status_code in (200, 201)
    first = client.get("/v1/users", params={"limit": 1}, headers=headers).json()
    assert first["next_cursor"]
    r = client.get("/v1/users", params={"limit": 1, "cursor": first["next_cursor"]}, headers=headers)
    assert r.status_code == 200, r.text


def test_an_ext_user_reference_follows_the_text_rule(client, document, tenant):
    """``ext:`` and a service user id: C1 control characters are refused like the others."""
    _, headers, _ = tenant
    schema = _parameter(document, "get", "/v1/users/{user_id}", "user_id")
    assert _refuses(schema, "ext:a\u0085b") and not _refuses(schema, "ext:constraints-user")
    _is_422(client.get("/v1/users/" + quote("ext:a\u0085b"), headers=headers))
    assert client.get("/v1/users/ext:constraints-user", headers=headers).status_code == 200
