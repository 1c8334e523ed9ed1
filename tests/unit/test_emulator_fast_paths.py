"""The emulator's per-request shortcuts (issue 35) decide what the long way decides: an FCM body's
verdict kept per body with its token and notification id cut out (notee/emulator/fcm_bodies.py), an
APNs body's per body and the headers that rule it, a request header block decoded once while the
HPACK table stays the same (notee/emulator/h2blocks.py), and the front's HTTP/1.1 relay pausing
one side while the other cannot take more (notee/emulator/front.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from notee.emulator import apns as apns_persona
from notee.emulator import fcm_bodies
from notee.emulator.fcm import fcm
from notee.emulator.fcm_bodies import FCM_PAYLOAD_LIMIT, BadBody, BodyVerdicts, _fcm_payload_size
from notee.emulator.front import FrontConnection, FrontServer, _Relay
from notee.emulator.h2blocks import HeadCache
from notee.emulator.state import State
from notee.providers.http2_wire import HeaderDecoder, HeaderEncoder

NID = "0" * 32 + "." + "A" * 11


def _body(token: str, nid: str = NID, *, compact: bool = True, **data: str) -> bytes:
    message = {
        "token": token,
        "notification": {"title": "Hi", "body": "there"},
        "data": {**data, "notee_id": nid},
        "android": {"priority": "high", "ttl": "60s"},
    }
    seps = (",", ":") if compact else (", ", ": ")
    return json.dumps({"message": message}, separators=seps).encode()


def _counting_decode(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    seen: list[bytes] = []
    real = fcm_bodies._decode

    def counted(body: bytes) -> Any:
        seen.append(body)
        return real(body)

    monkeypatch.setattr(fcm_bodies, "_decode", counted)
    return seen


@pytest.mark.parametrize("compact", [True, False])
def test_bodies_differing_in_token_and_id_are_decoded_once(monkeypatch: pytest.MonkeyPatch, compact: bool) -> None:
    decoded = _counting_decode(monkeypatch)
    bodies = BodyVerdicts()
    for i in range(50):
        body = _body(f"tok-{i}:APA91b_x-{i}", f"{i:032x}.BBBBBBBBBBB", compact=compact, k="v")
        token, nid, verdict = bodies.read(body)
        assert (token, nid) == (f"tok-{i}:APA91b_x-{i}", f"{i:032x}.BBBBBBBBBBB")
        assert verdict.refusal is None and not verdict.validate_only
        assert verdict.message_for(token, nid) == json.loads(body)["message"]  # its own token and id
    assert len(decoded) == 1


def test_a_refused_body_is_refused_for_every_token() -> None:
    bodies = BodyVerdicts()
    for i in range(3):
        raw = json.loads(_body(f"t{i}"))
        raw["message"]["android"]["notification"] = {"color": "red"}
        token, _, verdict = bodies.read(json.dumps(raw, separators=(",", ":")).encode())
        assert token == f"t{i}" and verdict.refusal is not None
        count, (status, _, out) = verdict.refusal
        assert count == "fcm.invalid" and status == 400 and b"message.android.notification.color" in out


def test_a_token_key_in_the_data_is_not_taken_for_the_target() -> None:
    """The first "token": of these bodies is a data key: the cut is checked against the decoded
    message, found wrong, and each body is read alone."""
    bodies = BodyVerdicts()
    for data_token, target in (("X", "T1"), ("Y", "T2"), ("Z", "T3")):
        body = json.dumps({"message": {"data": {"token": data_token}, "token": target}}, separators=(",", ":"))
        token, _, verdict = bodies.read(body.encode())
        assert token == target and verdict.message["data"] == {"token": data_token}


def test_a_token_json_escapes_is_read_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = BodyVerdicts()
    bodies.read(_body("plain-1"))
    decoded = _counting_decode(monkeypatch)
    token, _, verdict = bodies.read(_body('quote"and\\slash'))
    assert token == 'quote"and\\slash' and verdict.message["token"] == token
    assert len(decoded) == 1  # not taken from the kept cut


def test_the_size_limit_counts_the_notification_ids_length() -> None:
    """Two bodies cut alike but with ids of different lengths: one fits FCM's 4,096 bytes, the other
    is one byte over; each gets its own verdict."""
    base = json.loads(_body("t", "x", pad=""))["message"]
    pad = FCM_PAYLOAD_LIMIT - _fcm_payload_size(base) - 1  # with an id of 2 characters: exactly the limit
    bodies = BodyVerdicts()
    _, _, fits = bodies.read(_body("t1", "ab", pad="p" * pad))
    _, _, over = bodies.read(_body("t2", "abc", pad="p" * pad))
    _, _, fits_again = bodies.read(_body("t3", "cd", pad="p" * pad))
    assert fits.refusal is None and fits_again.refusal is None
    assert over.refusal is not None and b"Message is too big" in over.refusal[1][2]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "Invalid JSON payload received."),
        (b'{"message":{"token":"a","topic":"b"}}', "Request contains an invalid argument."),
    ],
)
def test_a_body_fcm_cannot_read_is_refused_before_its_target(body: bytes, message: str) -> None:
    with pytest.raises(BadBody) as refused:
        BodyVerdicts().read(body)
    status, _, out = refused.value.response
    assert status == 400 and json.loads(out)["error"]["message"] == message


def _apns_scope(**headers: str) -> dict[str, Any]:
    base = {"authorization": "bearer x", "apns-topic": "com.example", "apns-push-type": "alert", **headers}
    return {"path": "/3/device/t", "headers": [(k.encode(), v.encode()) for k, v in base.items()], "client": None}


def test_an_apns_verdict_is_kept_per_body_and_the_headers_that_rule_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies that differ only in their notification id are decoded once per headers that rule them;
    each request's own id is what GET /_emu/requests/last shows."""
    state = State()
    state.jwt_iat[b"x"] = 2**40  # a provider token issued in the future: never expired here
    parsed: list[bytes] = []
    real = apns_persona._parse

    def counted(body: bytes) -> Any:
        parsed.append(body)
        return real(body)

    monkeypatch.setattr(apns_persona, "_parse", counted)

    def body(i: int) -> bytes:
        return b'{"aps":{"content-available":1},"k":"v","notee_id":"%032x.AAAAAAAAAAA"}' % i

    for i in range(5):
        assert apns_persona.apns(state, _apns_scope(), f"t{i}", body(i))[0] == 200
    assert [state.last[f"t{i}"]["body"] for i in range(5)] == [json.loads(body(i)) for i in range(5)]
    background = _apns_scope(**{"apns-push-type": "background", "apns-priority": "10"})
    status, _, out = apns_persona.apns(state, background, "t9", body(9))
    assert (status, json.loads(out)["reason"]) == (400, "BadPriority")
    assert len(parsed) == 4  # each kind: the body, then the body with another id spliced in
    assert state.delivered_total["apns"] == 5


def test_a_header_block_is_decoded_again_once_the_table_may_have_changed() -> None:
    encoder, reference, cache = HeaderEncoder(), HeaderDecoder(), HeadCache()
    request = [(b":method", b"POST"), (b":path", b"/v1/projects/p/messages:send"), (b"authorization", b"Bearer a")]
    # Notee's encoder: literals, then literals entering the table, then indexed fields only
    blocks = [encoder.encode(request) for _ in range(3)]
    for block in blocks:
        assert cache.decode(block) == request
        reference.decode(block)
    again = blocks[2]
    assert cache.decode(again) is cache.decode(again)  # the same block: decoded once
    # a new header entering the table moves every index: the same bytes now mean other headers
    for block in (encoder.encode([(b"x-new", b"1")]), encoder.encode([(b"x-new", b"1")])):
        cache.decode(block)
        reference.decode(block)
    assert cache.decode(again) == [(h[0], h[1]) for h in reference.decode(again)] != request


class _Transport:
    def __init__(self) -> None:
        self.paused = False
        self.written = bytearray()

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data


def test_the_http11_relay_pauses_the_side_that_sends_while_the_other_is_full() -> None:
    front = FrontConnection(FrontServer(None, 100, "/nowhere.sock", lambda: 0.0))
    client, upstream = _Transport(), _Transport()
    front.connection_made(client)  # type: ignore[arg-type]
    front.mode, front.relay = "http/1.1", _Relay(front)
    front.relay.connection_made(upstream)  # type: ignore[arg-type]
    front.pause_writing()  # the client does not read its answers: granian is not read either
    assert upstream.paused and not client.paused
    front.resume_writing()
    assert not upstream.paused
    front.relay.pause_writing()  # granian does not read: the client is not read either
    assert client.paused and not upstream.paused
    front.relay.resume_writing()
    assert not client.paused


def test_the_journal_and_the_last_request_show_each_pushs_own_token_and_id(tmp_path: Path) -> None:
    """Bodies cut alike share one decoded message; what is recorded of each push is its own."""
    state = State(journal=open(tmp_path / "journal.jsonl", "a", buffering=1, encoding="utf-8"))  # noqa: SIM115
    scope = {"path": "/v1/projects/p/messages:send", "headers": [(b"authorization", b"Bearer x")]}
    bodies = [_body(f"journal-{i}", f"{i:032x}.CCCCCCCCCCC", k="v") for i in range(3)]
    for body in bodies:
        assert fcm(state, scope, "p", body)[0] == 200
    lines = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert [(x["token"], x["data"]) for x in lines] == [
        (json.loads(b)["message"]["token"], json.loads(b)["message"]["data"]) for b in bodies
    ]
    view = state.last_view("journal-2")
    assert view is not None and view["body"] == json.loads(bodies[2])["message"]
    assert view["device"]["android"]["data"]["notee_id"] == f"{2:032x}.CCCCCCCCCCC"
