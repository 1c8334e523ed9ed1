"""Limits at the edge (issue 15, item 1): body size, credentials before the body, JSON depth, URL and
header size, concurrency. In-process cases drive the ASGI app directly (so a test can see whether
the body was read at all); the memory test runs a real `notee api` process and measures its RSS.

Here, the rules that need no server; tests/integration/test_api_edge.py has the rest."""

from __future__ import annotations

import pytest

from notee.api.edge import json_too_deep, path_is_utf8


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


@pytest.mark.parametrize(
    ("raw_path", "query", "ok"),
    [
        (b"/v1/users/abc/subscriptions/topic/news/t", b"", True),  # the common case: nothing to decode
        (b"/v1/topics/news/caf%C3%A9", b"a=%C3%A9", True),
        (b"/v1/topics/news/%FF", b"", False),
        (b"/v1/topics/news/t", b"q=%FF", False),
        (b"/v1/topics/news/\xff", b"", False),  # a raw byte over 0x7f, not percent-encoded
        (b"/v1/topics/news/t", b"q=\xff", False),
    ],
)
def test_only_a_url_that_percent_decodes_to_utf8_passes(raw_path, query, ok):
    scope = {"raw_path": raw_path, "path": raw_path.decode("latin-1"), "query_string": query}
    assert path_is_utf8(scope) is ok
