"""FastAPI and Starlette are pinned exactly because of a performance detour: ``TopicSubscribeShortcut``
(notee/api/routes/subscriptions.py) answers a topic subscribe inside the edge as the route would,
without FastAPI's routing, dependency resolution and exception middleware (docs/BENCHMARKS.md,
"Performance detours"). It is only right while what it reproduces of theirs stays as it is:

* the answer's headers, which the route gets from Starlette's ``Response(media_type="application/json")``
  and the shortcut writes itself;
* the route's path matching (Starlette's ``str`` convertor for ``{topic}``: one segment);
* the request state: the edge leaves the service in ``scope["state"]``, where Starlette's
  ``request.state`` (the route's ``require_service``) reads it.

These tests fail, naming the detour and both versions, when the installed versions differ from the
pins or one of those changes. tests/integration/test_subscriptions_api.py::test_the_topic_subscribe_shortcut_answers_as_the_route
holds the shortcut and the route to the same answers end to end, through the stores.
"""

from __future__ import annotations

from starlette.convertors import CONVERTOR_TYPES
from starlette.requests import Request
from starlette.responses import Response

from notee.api.routes import subscriptions
from tests.support.pins import SHORTCUT


def test_fastapi_and_starlette_are_pinned_exactly_to_the_installed_versions() -> None:
    SHORTCUT.assert_pinned_to_installed()


def test_the_shortcuts_headers_are_the_ones_starlettes_response_writes() -> None:
    for status, body in ((201, b'{"status":"subscribed","devices":1,"schedule":null}'), (200, b"{}")):
        route = Response(body, status_code=status, media_type="application/json")  # what the route returns
        shortcut = [(b"content-length", b"%d" % len(body)), subscriptions._JSON_HEADERS]
        assert route.raw_headers == shortcut, SHORTCUT.loud(f"Starlette's Response now writes {route.raw_headers}")


def test_a_topic_is_one_path_segment_as_the_routes_str_convertor_matches() -> None:
    regex = CONVERTOR_TYPES["str"].regex
    assert regex == "[^/]+", SHORTCUT.loud(
        f"Starlette's str convertor is now {regex!r}; the shortcut's topic group is [^/]+"
    )
    path = "/v1/users/0b8f5e36-5b0e-4a7a-9d43-6f1b0c1d2e3f/subscriptions/topic/news/a%20b"
    assert subscriptions._SUBSCRIBE_PATH.fullmatch(path) is not None
    assert subscriptions._SUBSCRIBE_PATH.fullmatch(path + "/more") is None


def test_request_state_is_the_scopes_state_where_the_edge_leaves_the_service() -> None:
    scope = {"type": "http", "method": "PUT", "path": "/", "headers": [], "state": {"service": "S1"}}
    assert getattr(Request(scope).state, "service", None) == "S1", SHORTCUT.loud(
        "request.state no longer reads scope['state']: the route would authenticate again, and the "
        "shortcut (which reads scope['state']) would see no service"
    )
