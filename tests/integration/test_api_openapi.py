"""The OpenAPI document as a client generator sees it: a stable, listed operationId for every
operation, a description for every operation and tag, and no two operations with one id."""

from __future__ import annotations

import re

from notee.api import openapi, openapi_examples


def _operations(app):
    return [(method.upper(), path, op) for path, item in app.openapi()["paths"].items() for method, op in item.items()]


def test_every_route_has_a_listed_camel_case_operation_id(app):
    routes = {(method, path) for method, path, _ in _operations(app)}
    assert routes - set(openapi.OPERATION_IDS) == set(), "add these routes to notee/api/openapi.py OPERATION_IDS"
    ids = [op["operationId"] for _, _, op in _operations(app)]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z0-9]*)*", i) for i in ids), ids
    for method, path, op in _operations(app):
        assert op["operationId"] == openapi.OPERATION_IDS[(method, path)]


def test_every_operation_and_tag_is_described(app):
    doc = app.openapi()
    described = {t["name"] for t in doc.get("tags", []) if t.get("description")}
    for method, path, op in _operations(app):
        assert op.get("description") or op.get("summary"), f"{method} {path} has no description"
        assert set(op.get("tags", [])) <= described, f"{method} {path}: tag without a description"


def test_listed_ids_that_no_route_has_are_not_kept(app):
    routes = {(method, path) for method, path, _ in _operations(app)}
    assert set(openapi.OPERATION_IDS) - routes == set(), "remove these stale entries from OPERATION_IDS"


def test_docs_api_reference_is_current(app):
    """docs/API-REFERENCE.md covers every endpoint because it is generated; regenerate it with
    `notee openapi --markdown > docs/API-REFERENCE.md` after changing the API."""
    from pathlib import Path

    current = (Path(__file__).resolve().parents[2] / "docs" / "API-REFERENCE.md").read_text()
    assert current == openapi.markdown(app.openapi()), "docs/API-REFERENCE.md is stale: regenerate it"


def test_every_timestamp_is_rfc_3339_with_its_offset(client, settings, service_id):
    """Every time the API answers (services, keys, users, devices, templates, subscriptions, jobs)
    carries its offset, so a client never has to guess that Notee means UTC."""
    import re as _re

    from tests.support.registry import admin_headers, new_service, new_template, new_user, random_token

    headers = new_service(client, settings, service_id)
    user = new_user(client, headers, devices=[(random_token("ts"), "AOS")])
    new_template(client, headers, "TOPIC", "news")
    assert client.put(f"/v1/users/{user}/subscriptions/topic/news/all", headers=headers).status_code == 201
    job = client.post("/v1/topics/news/all/publish", json={"variables": {"name": "x"}}, headers=headers).json()
    answers = [
        client.get(f"/v1/admin/services/{service_id}", headers=admin_headers(settings)),
        client.get(f"/v1/admin/services/{service_id}/api-keys", headers=admin_headers(settings)),
        client.get(f"/v1/users/{user}", headers=headers),
        client.get(f"/v1/users/{user}/devices", headers=headers),
        client.get("/v1/templates", headers=headers),
        client.get(f"/v1/users/{user}/subscriptions", headers=headers),
        client.get(f"/v1/jobs/{job['job_id']}", headers=headers),
        client.get("/v1/jobs", headers=headers),
    ]
    times = []
    for answer in answers:
        assert answer.status_code == 200, answer.text
        times += _re.findall(r'"(\d{4}-\d\d-\d\dT[^"]+)"', answer.text)
    assert len(times) >= 11
    offsetless = [t for t in times if not _re.search(r"(Z|[+-]\d\d:\d\d)$", t)]
    assert offsetless == []


def test_validation_and_domain_errors_share_one_details_shape(client, settings, service_id):
    from tests.support.registry import new_service, new_template, new_user

    headers = new_service(client, settings, service_id)
    user = new_user(client, headers)
    new_template(client, headers, "TOPIC", "news")
    domain = client.put(
        f"/v1/users/{user}/subscriptions/topic/news/{'x' * 51}", headers=headers
    )  # checked by the domain
    validation = client.put(
        f"/v1/users/{user}/subscriptions/cycle/news", json={"days": ["MON"], "hour": "9", "minute": 0}, headers=headers
    )
    for answer in (domain, validation):
        assert answer.status_code == 422, answer.text
        for detail in answer.json()["error"]["details"]:
            assert set(detail) <= {"loc", "type", "msg", "ctx"} and {"loc", "type", "msg"} <= set(detail), detail
            assert all(isinstance(p, str) for p in detail["loc"])
    assert domain.json()["error"]["details"] == [
        {"loc": ["topic"], "type": "too_long", "msg": domain.json()["error"]["message"], "ctx": {"max": 50}}
    ]


def test_every_schema_has_an_example_valid_for_it(app):
    """Client generators and the docs pages show the examples; each one must be valid input or output
    for its own schema (checked with a JSON Schema validator against the document itself)."""
    import jsonschema_rs

    doc = app.openapi()
    schemas = doc["components"]["schemas"]
    assert sorted(name for name, s in schemas.items() if not s.get("examples")) == []
    assert set(openapi_examples.EXAMPLES) - set(schemas) == set(), "examples of schemas that no longer exist"
    for name, schema in schemas.items():
        validator = jsonschema_rs.validator_for(
            {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
        )
        for example in schema["examples"]:
            errors = [e.message for e in validator.iter_errors(example)]
            assert errors == [], (name, errors)
