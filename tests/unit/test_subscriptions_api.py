"""Subscriptions through the HTTP API: happy paths, bad input writing nothing, tenant isolation,
bulk, and real concurrent requests.

Here, the rules that need no server; tests/integration/test_subscriptions_api.py has the rest."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("status", ["subscribed", "already_subscribed"])
@pytest.mark.parametrize("devices", [0, 1, 12])
def test_the_topic_subscribe_answer_is_its_response_model(status, devices):
    """The route writes SubscribeOut's JSON itself (no per-request model validation): byte for byte
    what the model gives."""
    from notee.api.routes.subscriptions import SubscribeOut, subscribe_out_json

    result = {"status": status, "devices": devices}
    assert subscribe_out_json(result) == SubscribeOut.model_validate(result).model_dump_json().encode()


def test_the_shortcuts_route_label_is_the_routes_own_template():
    """The topic subscribe shortcut labels its answers (access log, ``notee_http_*`` metrics) without
    the route table; the label must be the template the table gives the route FastAPI would serve."""
    from notee.api.access import ROUTE_LABEL, route_template
    from notee.api.app import create_app
    from notee.api.route_table import route_table
    from notee.api.routes.subscriptions import SUBSCRIBE_TEMPLATE
    from notee.core.settings import Settings

    app = create_app(Settings())
    path = "/v1/users/2dbef98a-c9fd-4118-a0bf-b64a0c885ccb/subscriptions/topic/news/sports"
    served = [t for regex, methods, t in route_table(app) if regex.match(path) and "PUT" in methods]
    assert served == [SUBSCRIBE_TEMPLATE]
    assert route_template({"app": app, "path": path, "method": "PUT", ROUTE_LABEL: SUBSCRIBE_TEMPLATE}) == served[0]
