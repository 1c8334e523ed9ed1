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
