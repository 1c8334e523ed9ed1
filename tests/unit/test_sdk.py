"""The Python SDK (clients/python, package ``notee_sdk``) against a real `notee api` process, a
real `notee worker` and the emulator: the calls a service backend makes, typed answers, errors in the
error format, Idempotency-Keys on publishes, ``wait()`` with progress, and the client's own rules
(its dependencies, its generated methods, one operation per API endpoint).

Here, the rules that need no server; tests/integration/test_sdk.py has the rest."""

from __future__ import annotations

import ast
import sys
import threading
import tomllib
from pathlib import Path

import httpx
import notee_sdk
import pytest
from notee_sdk import Client, _ops

SDK = Path(__file__).resolve().parents[2] / "clients" / "python"


def test_retries_honour_retry_after_and_never_repeat_an_unsafe_post():
    """The retry policy, with a transport that answers as a rate-limited or unavailable server would."""
    calls: list[httpx.Request] = []

    def answer(status: int, retry_after: str | None):
        def handler(request: httpx.Request) -> httpx.Response:
            calls.append(request)
            if len(calls) == 1:
                headers = {"Retry-After": retry_after} if retry_after else {}
                return httpx.Response(
                    status, headers=headers, json={"error": {"code": "x", "message": "later", "details": []}}
                )
            return httpx.Response(200, json={"rotated": 1})

        return handler

    slept: list[float] = []
    real_sleep = notee_sdk.client.time.sleep
    this_thread = threading.get_ident()

    def record_sleep(seconds: float) -> None:
        # `time.sleep` is patched process-wide: the stores' driver threads still really sleep.
        if threading.get_ident() == this_thread:
            slept.append(seconds)
        else:
            real_sleep(seconds)

    notee_sdk.client.time.sleep = record_sleep  # type: ignore[assignment]
    try:
        with Client(
            "http://notee.invalid",
            api_key="k",
            http_client=httpx.Client(transport=httpx.MockTransport(answer(429, "7"))),
        ) as c:
            assert c.rotate_token("aaaaaaaa", "bbbbbbbb").rotated == 1
        assert slept == [7.0] and len(calls) == 2
        # A 503 on a POST that is not repeatable (a new API key) is not retried: it may have been done.
        calls.clear()
        with (
            Client(
                "http://notee.invalid",
                admin_token="t",
                http_client=httpx.Client(transport=httpx.MockTransport(answer(503, "1"))),
            ) as c,
            pytest.raises(notee_sdk.Unavailable),
        ):
            c.create_api_key("SVC")
        assert len(calls) == 1
        # A single send carries an Idempotency-Key (issue 30: the server sends it once), so its 503
        # is retried, with the same key.
        calls.clear()
        sent = {"devices": 1, "delivered": 1, "pruned": 0, "retried": 0, "failed": 0, "dry_run": False}

        def unavailable_once(request: httpx.Request) -> httpx.Response:
            calls.append(request)
            if len(calls) == 1:
                return httpx.Response(
                    503, headers={"Retry-After": "1"}, json={"error": {"code": "x", "message": "later"}}
                )
            return httpx.Response(200, json=sent)

        with Client(
            "http://notee.invalid",
            api_key="k",
            http_client=httpx.Client(transport=httpx.MockTransport(unavailable_once)),
        ) as c:
            assert c.send_to_user("00000000-0000-4000-8000-000000000000", "otp").delivered == 1
        keys = {r.headers["Idempotency-Key"] for r in calls}
        assert len(calls) == 2 and len(keys) == 1 and keys.pop().startswith("sdk-")
        assert _ops.send_to_user("u", "otp", idempotency_key="mine").headers["Idempotency-Key"] == "mine"
        # ... while a 429 is retried for any operation, and the wait is capped.
        calls.clear()
        slept.clear()
        with Client(
            "http://notee.invalid",
            api_key="k",
            max_retry_wait=2.0,
            http_client=httpx.Client(transport=httpx.MockTransport(answer(429, "600"))),
        ) as c:
            c.rotate_token("aaaaaaaa", "bbbbbbbb")
        assert slept == [2.0]
    finally:
        notee_sdk.client.time.sleep = real_sleep  # type: ignore[assignment]


def test_the_sdk_depends_on_httpx_and_pydantic_only_and_never_imports_the_server():
    project = tomllib.loads((SDK / "pyproject.toml").read_text())["project"]
    assert sorted(d.split(">")[0].split("=")[0].split("<")[0] for d in project["dependencies"]) == ["httpx", "pydantic"]
    for path in (SDK / "notee_sdk").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                assert top in {"notee_sdk", "httpx", "pydantic"} or top in sys.stdlib_module_names, (
                    f"{path.name} imports {name}"
                )
