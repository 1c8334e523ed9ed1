"""Limits at the edge (issue 15, item 1): body size, credentials before the body, JSON depth, URL and
header size, concurrency. In-process cases drive the ASGI app directly (so a test can see whether
the body was read at all); the memory test runs a real `notee api` process and measures its RSS.

Here, the rules that need no server; tests/integration/test_api_edge.py has the rest."""

from __future__ import annotations

import pytest

from notee.api.edge import json_too_deep


@pytest.mark.parametrize(
    "body,limit,deep",
    [
        (b'{"a": [1, {"b": [2]}]}', 4, False),
        (b'{"a": [1, {"b": [2]}]}', 3, True),
        (b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[["}', 2, False),  # brackets inside a string do not nest
        (b'{"a": "\\"[[[[[[[[[[[[[[[[[[[[[["}', 2, False),  # nor after an escaped quote
        (b"[" * 33 + b"]" * 33, 32, True),
        (b"[" * 32 + b"]" * 32, 32, False),
    ],
)
def test_json_depth_rule(body, limit, deep):
    assert json_too_deep(body, limit) is deep
