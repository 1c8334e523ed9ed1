"""The emulator's APNs persona on a body that is not JSON: 400 PayloadEmpty (the payload reason of
Apple's table), whether or not the request is one the emulator still records for
``GET /_emu/requests/last`` (it recorded the first 10,000 tokens: there a body that was not JSON
failed the handler, a 500, and past them it was accepted, a 200)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from notee.emulator.apns import apns
from notee.emulator.state import LAST_REQUESTS_MAX, State


def _b64(obj: dict[str, Any]) -> bytes:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=")


JWT = b".".join([_b64({"alg": "ES256", "kid": "K"}), _b64({"iss": "TEAM", "iat": int(time.time())}), b"sig"])
HEADERS = [(b"authorization", b"bearer " + JWT), (b"apns-topic", b"com.example"), (b"apns-id", b"id-1")]


def _send(state: State, token: str, body: bytes) -> tuple[int, dict[bytes, bytes], Any]:
    status, headers, out = apns(state, {"path": f"/3/device/{token}", "headers": HEADERS}, token, body)
    return status, dict(headers), json.loads(out) if out else None


@pytest.mark.parametrize("body", [b"{not json", b'{"aps": {"alert": "x"}', b"\xff\xfe{}"])
@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "past-the-record-limit"])
def test_a_body_that_is_not_json_is_400_payload_empty(body: bytes, recorded: bool) -> None:
    state = State()
    if not recorded:
        state.last.update({f"other-{i}": {} for i in range(LAST_REQUESTS_MAX)})
    status, headers, out = _send(state, "tok", body)
    assert (status, out) == (400, {"reason": "PayloadEmpty"})
    assert headers[b"apns-id"] == b"id-1"
    assert state.delivered["apns"]["tok"] == 0 and state.counts["apns.invalid"] == 1
    assert state.attempts["tok"] == 1
    if recorded:  # what was refused stays readable, as text
        assert state.last["tok"]["body"] == body.decode(errors="replace")
    else:
        assert "tok" not in state.last


def test_a_json_body_is_still_recorded_parsed_and_delivered() -> None:
    state = State()
    status, _headers, out = _send(state, "tok", b'{"aps": {"alert": "hi"}, "k": "v"}')
    assert (status, out) == (200, None)
    view = state.last_view("tok")
    assert view is not None and view["body"] == {"aps": {"alert": "hi"}, "k": "v"}
    assert view["headers"] == {"apns-topic": "com.example", "apns-id": "id-1"}  # never the bearer
    assert state.delivered["apns"]["tok"] == 1
