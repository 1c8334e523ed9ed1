"""Fuzzed input (issue 9, item 5): schemathesis drives every operation of the app's OpenAPI document
(``create_app(settings).openapi()``) with generated valid input and with malformed input (wrong
types, out-of-range values, missing fields, unicode, control characters), each case sent with valid
credentials, with none, or with a wrong key. No answer may be a 5xx, and every answer must conform
to the document: a declared status code, the declared content type and the response schema.
Malformed input must be rejected with a 4xx, and a rejected case (any 4xx) must leave the stores as
they were: the fuzz tenant's MySQL rows and Cassandra rows (``tests.support.stores.snapshot``) and
the row counts of the admin tables (``totals``) are compared after every rejected case.

The number of cases is bounded (``MAX_EXAMPLES`` per operation and generation mode) so the test
stays inside ``make test``; the count is printed at the end.

``test_fuzz_over_http`` sends fewer cases (the schemas' examples and ``MAX_EXAMPLES_HTTP`` generated
ones per operation and mode, about 500 in 20-50 s) to a real ``notee api`` process (``api_process``)
over a socket: what the in-process calls skip (uvicorn's parsing, the URL as it travels, the
process's own middleware stack) answers below 500 and in the error format too.
"""

from __future__ import annotations

import sys
import zlib
from collections import Counter

import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from notee.store.runtime import Runtime
from tests.support.registry import admin_headers, new_template, new_user, random_token
from tests.support.stores import Snapshot, changes, snapshot, totals

MAX_EXAMPLES = 20
MAX_EXAMPLES_HTTP = 8
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
_TALLY: Counter = Counter()


@pytest.fixture(scope="module")
def fuzz_auth(client, settings, make_module_tenant):
    """A tenant with an API key, a user with a device and a template: real objects some cases hit."""
    service, headers = make_module_tenant()
    new_user(client, headers, "fuzz-user", devices=[(random_token("fuzz"), "AOS")])
    new_template(client, headers, "TOPIC", "news")
    return {"service": headers, "admin": admin_headers(settings), "tenant": service}


class StoreWatch:
    """The stores as the last case left them, for one tenant. ``after(status)`` is called once per
    case: when the case was rejected (4xx) the stores must not have changed; either way the new
    state becomes the reference for the next case (an accepted case may write)."""

    def __init__(self, runtime: Runtime, service: str) -> None:
        self.runtime, self.service = runtime, service
        self.state = self._take()

    def _take(self) -> tuple[Snapshot, dict[str, int]]:
        return snapshot(self.runtime, self.service), totals(self.runtime)

    def after(self, status: int, what: str) -> None:
        before, self.state = self.state, self._take()
        if 400 <= status < 500:
            (rows_before, totals_before), (rows_after, totals_after) = before, self.state
            assert rows_after == rows_before, (
                f"rejected {what} ({status}) changed rows: {changes(rows_before, rows_after)}"
            )
            assert totals_after == totals_before, f"rejected {what} ({status}) added or removed admin rows"


@pytest.fixture(scope="module")
def store_watch(runtime, fuzz_auth):
    return StoreWatch(runtime, fuzz_auth["tenant"])


def _schema(max_examples: int = MAX_EXAMPLES, phases: list[str] | None = None):
    from notee.api.app import create_app
    from notee.core.settings import Settings

    loaded = schemathesis.openapi.from_dict(create_app(Settings()).openapi())  # connects nothing
    loaded.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        max_examples=max_examples,
        deterministic=True,
        database="none",
        with_security_parameters=False,
    )
    if phases is not None:
        loaded.config.phases.update(phases=phases)
    # A body the schema allows can still be over NOTEE_API_MAX_BODY_BYTES (the general publish's 20,000
    # user ids of up to 191 characters): the edge refuses it, 413, before any parsing; a refusal too.
    loaded.config.checks.negative_data_rejection.expected_statuses.append("413")
    return loaded


schema = _schema()
# Over HTTP: the schemas' examples and the generated cases, not the coverage phase's boundary values
# (the in-process run sends those), so that the run stays under a minute.
http_schema = _schema(MAX_EXAMPLES_HTTP, phases=["examples", "fuzzing"])


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    total = sum(_TALLY.values())
    by_status = ", ".join(f"{k}: {v}" for k, v in sorted(_TALLY.items(), key=lambda kv: str(kv[0])))
    print(
        f"\nfuzz: {total} schemathesis cases over {len(list(schema.get_all_operations()))} operations "
        f"(statuses {by_status})",
        file=sys.__stderr__,
    )


def _auth_for(case, fuzz_auth) -> tuple[str, dict[str, str]]:
    """Most cases carry the right credentials, a fifth none, a fifth wrong ones (a service key on
    admin routes, a well-formed unknown key elsewhere). Chosen from the case itself, so that
    hypothesis replays a case with the same credentials."""
    n = zlib.crc32(repr((case.method, case.path_parameters, case.query, case.body)).encode())
    admin = case.path.startswith("/v1/admin")
    right = fuzz_auth["admin"] if admin else fuzz_auth["service"]
    if n % 5 == 3:
        return "none", {}
    if n % 5 == 4:
        return "wrong", fuzz_auth["service"] if admin else {"Authorization": "Bearer nk_0000000000000000_" + "x" * 43}
    return "valid", right


@schema.parametrize()
def test_fuzz_every_operation(case, app, fuzz_auth, store_watch):
    kind, headers = _auth_for(case, fuzz_auth)
    if case.headers:
        case.headers.pop("Authorization", None)
    response = case.call(app=app, headers=headers)
    _TALLY[response.status_code] += 1
    store_watch.after(response.status_code, f"{case.method} {case.formatted_path} with {kind} credentials")
    case.validate_response(response, checks=CHECKS)
    declared = case.method.upper() == case.operation.method.upper()
    if kind != "valid" and declared and case.path not in ("/healthz", "/livez", "/readyz"):  # the probes are public
        # Without valid credentials nothing about the objects addressed is revealed: refused (401/403),
        # or the input's shape rejected (422) before anything is looked up; never 2xx, 404 or 409.
        # A path the router cannot match at all (e.g. an empty {token}) is the router's bare 404.
        routed_404 = response.status_code == 404 and response.json()["error"]["message"] == "Not Found"
        assert response.status_code in (400, 401, 403, 422) or routed_404, (
            kind,
            case.method,
            case.formatted_path,
            response.text,
        )


def _is_error_format(response) -> bool:
    content_type = response.headers.get("content-type") or [""]  # schemathesis: each header's values
    if not content_type[0].startswith("application/json"):
        return False
    body = response.json()
    return isinstance(body, dict) and set(body) == {"error"} and {"code", "message"} <= set(body["error"])


@http_schema.parametrize()
def test_fuzz_over_http(case, api_process, fuzz_auth, store_watch):
    """The same generated cases, fewer of them, over HTTP to ``notee api``: every answer below 500,
    each error in the error format, a rejected case writes nothing, the document's checks hold."""
    kind, headers = _auth_for(case, fuzz_auth)
    if case.headers:
        case.headers.pop("Authorization", None)
    response = case.call(base_url=api_process.url, headers=headers, timeout=30)
    _TALLY[f"http {response.status_code}"] += 1
    what = f"{case.method} {case.formatted_path} with {kind} credentials over HTTP"
    store_watch.after(response.status_code, what)
    assert response.status_code < 500, (what, response.text)
    if response.status_code >= 400:
        assert _is_error_format(response), (what, response.status_code, response.headers, response.text)
    case.validate_response(response, checks=CHECKS)


# --- oversized and deeply nested bodies (issue 15, item 8) -------------------------------------------
# Every operation that takes a body gets one over NOTEE_API_MAX_BODY_BYTES (declared, and chunked) and
# one nested far deeper than NOTEE_API_MAX_JSON_DEPTH, with valid credentials, on real objects: the
# answer is 413 / 422 in the error format and the stores hold exactly what they held before.


def _body_operations() -> list[tuple[str, str]]:
    doc = schema.raw_schema
    return [
        (method.upper(), path)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if isinstance(op, dict) and "requestBody" in op
    ]


# Bodies the edge treats otherwise: a bulk import's file has its own limit (NOTEE_IMPORT_MAX_BODY_BYTES,
# 64 MiB) and is NDJSON or CSV, each line parsed (and refused when too deep) on its own:
# tests/integration/test_imports.py covers its 413 before credentials and its bad lines.
OWN_BODY_RULES = {("POST", "/v1/imports")}


def _json_body_operations() -> list[tuple[str, str]]:
    return [op for op in _body_operations() if op not in OWN_BODY_RULES]


@pytest.fixture(scope="module")
def edge_target(client, settings, make_module_tenant):
    """A service with a user, a device and one template of each method, and the path values naming them."""
    service, headers = make_module_tenant()
    token = random_token("edge")
    user = new_user(client, headers, "edge-user", devices=[(token, "AOS")])
    for method in ("TOPIC", "CYCLE", "SINGLE"):
        new_template(client, headers, method, "news")
    values = {
        "service": service,
        "user_id": user,
        "service_user_id": "edge-user",
        "type": "news",
        "topic": "t",
        "method": "TOPIC",
        "token": token,
        "key_id": "0123456789abcdef",
        "provider": "fcm",
        "rate_class": "read",
        "name": "edge-segment",
    }
    return service, headers, admin_headers(settings), values


def _call(client, method: str, path: str, target, content):
    _service, headers, admin, values = target
    url = path.format(**values)
    auth = admin if path.startswith("/v1/admin") else headers
    return client.request(method, url, content=content, headers=auth | {"Content-Type": "application/json"})


@pytest.mark.parametrize("operation", _json_body_operations(), ids=" ".join)
def test_oversized_bodies_are_413_and_write_nothing(client, runtime, settings, edge_target, operation):
    method, path = operation
    limit = settings.api_max_body_bytes
    declared = b'{"pad": "' + b"x" * limit + b'"}'

    def chunked():
        yield b'{"pad": "'
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    for content in (declared, chunked()):
        before = snapshot(runtime, edge_target[0])
        r = _call(client, method, path, edge_target, content)
        assert r.status_code == 413, (method, path, r.text)
        assert r.json()["error"]["code"] == "request_too_large"
        assert snapshot(runtime, edge_target[0]) == before, (method, path)


@pytest.mark.parametrize("operation", _json_body_operations(), ids=" ".join)
def test_deeply_nested_bodies_are_422_and_write_nothing(client, runtime, settings, edge_target, operation):
    method, path = operation
    depth = 50_000  # far past the limit, and past Python's recursion limit
    for deep in (
        b'{"x": ' + b"[" * depth + b"]" * depth + b"}",
        b'{"x": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}",
    ):
        before = snapshot(runtime, edge_target[0])
        r = _call(client, method, path, edge_target, deep)
        assert r.status_code == 422, (method, path, r.text)
        assert r.json()["error"]["details"][0]["type"] == "json_depth"
        assert snapshot(runtime, edge_target[0]) == before, (method, path)
