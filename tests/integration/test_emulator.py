"""The emulator itself: wire formats of PROVIDERS.md, control API, TLS with the generated CA."""

from __future__ import annotations

import json
import ssl
import time
import uuid

import httpx
import pytest

FCM_PATH = "/v1/projects/demo/messages:send"


BEARER = {"value": ""}  # an access token from the emulator's OAuth endpoint (realistic FCM wants one)


def _fcm(client: httpx.Client, token: str, *, auth: str | None = None):
    return client.post(
        FCM_PATH,
        json={"message": {"token": token, "notification": {"title": "a"}}},
        headers={"authorization": BEARER["value"] if auth is None else auth},
    )


@pytest.fixture()
def h2(emulator):
    """An HTTP/2 client, as FCM and APNs are spoken (ALPN h2 over TLS)."""
    BEARER["value"] = "Bearer " + emulator.access_token()
    with httpx.Client(
        base_url=emulator.url, verify=ssl.create_default_context(cafile=emulator.ca_file), http2=True
    ) as c:
        yield c


def test_the_h2_fixture_speaks_http2_and_http1_still_works(emulator, h2):
    assert _fcm(h2, "via-h2").http_version == "HTTP/2"
    # the same port also serves HTTP/1.1 (requests-based SDKs)
    with httpx.Client(base_url=emulator.url, verify=ssl.create_default_context(cafile=emulator.ca_file)) as h1:
        r = _fcm(h1, "via-h1")
    assert (r.status_code, r.http_version) == (200, "HTTP/1.1")
    assert emulator.deliveries_of(["via-h2", "via-h1"]) == {
        "via-h2": {"fcm": 1, "apns": 0, "attempts": 1},
        "via-h1": {"fcm": 1, "apns": 0, "attempts": 1},
    }


def test_tls_is_verified_against_the_generated_ca(emulator, tmp_path):
    from notee.emulator.tls import ensure_tls

    other_ca = ensure_tls(tmp_path).ca_cert  # a different test CA must not be trusted
    with pytest.raises(httpx.ConnectError):
        httpx.Client(base_url=emulator.url, verify=ssl.create_default_context(cafile=str(other_ca))).get("/_emu/stats")


def test_fcm_success_body_and_delivery_count(emulator, h2):
    r = _fcm(h2, "tok-ok")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json; charset=UTF-8"
    assert r.json()["name"].startswith("projects/demo/messages/0:")
    assert emulator.deliveries("tok-ok") == {"token": "tok-ok", "fcm": 1, "apns": 0, "attempts": 1}


@pytest.mark.parametrize(
    "code,status,rpc",
    [
        ("UNREGISTERED", 404, "NOT_FOUND"),
        ("INVALID_ARGUMENT", 400, "INVALID_ARGUMENT"),
        ("SENDER_ID_MISMATCH", 403, "PERMISSION_DENIED"),
        ("QUOTA_EXCEEDED", 429, "RESOURCE_EXHAUSTED"),
        ("UNAVAILABLE", 503, "UNAVAILABLE"),
        ("INTERNAL", 500, "INTERNAL"),
        ("THIRD_PARTY_AUTH_ERROR", 401, "UNAUTHENTICATED"),
    ],
)
def test_fcm_error_bodies(emulator, h2, code, status, rpc):
    emulator.fcm_tokens(**{code: ["bad"]})
    r = _fcm(h2, "bad")
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == status and err["status"] == rpc
    assert err["details"] == [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]
    assert emulator.deliveries("bad")["fcm"] == 0


def test_fault_injection_n_times_then_success_with_retry_after(emulator, h2):
    emulator.fault("fcm", 503, match="flaky", times=2, retry_after=1)
    assert [(_r := _fcm(h2, "flaky")).status_code for _ in range(2)] == [503, 503]
    assert _r.headers["retry-after"] == "1"
    assert _fcm(h2, "flaky").status_code == 200
    assert _fcm(h2, "other").status_code == 200  # the fault matched one token only
    assert emulator.deliveries("flaky") == {"token": "flaky", "fcm": 1, "apns": 0, "attempts": 3}


def test_fcm_requires_a_bearer_and_a_single_target(emulator, h2):
    assert _fcm(h2, "x", auth="").status_code == 401
    r = h2.post(FCM_PATH, json={"message": {"token": "a", "topic": "b"}}, headers={"authorization": BEARER["value"]})
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    r = h2.post(FCM_PATH, content=b"{not json", headers={"authorization": BEARER["value"]})
    assert r.status_code == 400


def test_reset_and_stats(emulator, h2):
    emulator.fcm_tokens(UNREGISTERED=["gone"])
    _fcm(h2, "gone")
    _fcm(h2, "ok")
    stats = emulator.stats()
    assert stats["counts"]["fcm.recv"] == 2 and stats["counts"]["fcm.ok"] == 1
    emulator.reset()
    assert emulator.stats()["counts"] == {}
    assert _fcm(h2, "gone").status_code == 200


def test_control_api_rejects_bad_requests(emulator, h2):
    assert h2.post("/_emu/fcm/tokens", json={"NOPE": ["x"]}).status_code == 400
    assert h2.post("/_emu/apns/tokens", json={"nope": ["x"]}).status_code == 400
    assert h2.post("/_emu/faults", json={"api": "smtp", "status": 500}).status_code == 400
    assert h2.post("/_emu/faults", json={"api": "fcm"}).status_code == 400
    assert h2.get("/_emu/unknown").status_code == 404


def test_latency_is_added(emulator, h2):
    # A lower bound only: the emulator must hold the answer at least this long (a sleep is never
    # shorter); how much longer a loaded machine takes is not asserted.
    emulator.latency(400)
    assert emulator.stats()["latency_ms"] == 400
    started = time.monotonic()
    assert _fcm(h2, "slow").status_code == 200
    held = time.monotonic() - started
    r = h2.post("/3/device/slow", content=b"{}", headers={"apns-topic": "t"})  # APNs is held too
    assert r.status_code == 403
    held_apns = time.monotonic() - started - held
    assert held >= 0.4 and held_apns >= 0.4, (held, held_apns)


def test_apns_missing_and_malformed_provider_token(emulator, h2):
    r = h2.post("/3/device/abcd", content=b"{}", headers={"apns-topic": "t", "apns-id": "id-1"})
    assert r.status_code == 403 and r.json() == {"reason": "MissingProviderToken"}
    assert r.headers["apns-id"] == "id-1"
    r = h2.post("/3/device/abcd", content=b"{}", headers={"apns-topic": "t", "authorization": "bearer junk"})
    assert r.status_code == 403 and r.json() == {"reason": "InvalidProviderToken"}
    assert json.loads(r.content)  # one JSON document (aioapns parses each DATA frame)


def test_fcm_rules_are_judged_per_body_whatever_the_token(emulator, h2):
    """The emulator decides a body's field rules once per body with its token cut out (what a
    fan-out page repeats): bodies that differ in anything but the token are each judged, and the
    answer is the one a fresh judgement gives."""
    emulator.reset()
    tag = uuid.uuid4().hex[:8]

    def send(token: str, color: str, data: dict[str, str] | None = None) -> httpx.Response:
        message = {"token": token, "notification": {"title": "a"}, "android": {"notification": {"color": color}}}
        if data is not None:
            message["data"] = data
        return h2.post(FCM_PATH, json={"message": message}, headers={"authorization": BEARER["value"]})

    assert send(f"{tag}-1", "#112233").status_code == 200
    bad = send(f"{tag}-2", "#11223")  # one character less: a different body, judged on its own
    assert bad.status_code == 400 and "color" in bad.json()["error"]["message"]
    assert send(f"{tag}-3", "#11223").status_code == 400  # the same body again, another token
    assert send(f"{tag}-4", "#112233").status_code == 200
    # the token also appears as a data value: judged alone, still by the same rules
    assert send(f"{tag}-5", "#11223", {"k": f"{tag}-5"}).status_code == 400
    ok = send(f"{tag}-6", "#445566", {"k": f"{tag}-6"})
    assert ok.status_code == 200
    # the answer is written as json.dumps(..., indent=2) writes it
    assert ok.content == json.dumps({"name": ok.json()["name"]}, indent=2).encode()
    stats = emulator.stats()
    assert stats["counts"]["fcm.invalid"] == 3 and stats["counts"]["fcm.ok"] == 3, stats


def test_the_public_port_answers_http2_without_alpn_and_gives_the_latency(emulator):
    """The public port's front (notee/emulator/front.py) takes a TLS connection without ALPN as
    HTTP/2 when its first bytes are the HTTP/2 preface (aioapns offers no ALPN), answers it with
    the same handlers, and holds answers POST /_emu/latency long, as granian's app did."""
    import socket
    from urllib.parse import urlsplit

    import h2.config
    import h2.connection
    import h2.events

    ctx = ssl.create_default_context(cafile=emulator.ca_file)  # no ALPN offered
    port = urlsplit(emulator.url).port
    body = json.dumps({"message": {"token": "no-alpn", "notification": {"title": "a"}}}).encode()

    def post(sock: ssl.SSLSocket, conn: h2.connection.H2Connection) -> tuple[int, bytes]:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(
            sid,
            [
                (b":method", b"POST"),
                (b":scheme", b"https"),
                (b":path", FCM_PATH.encode()),
                (b":authority", f"localhost:{port}".encode()),
                (b"authorization", BEARER["value"].encode()),
            ],
        )
        conn.send_data(sid, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        status, data = 0, b""
        while True:
            chunk = sock.recv(65536)
            assert chunk, "connection closed before the answer"
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    data += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                    sock.sendall(conn.data_to_send())
                    return status, data
            sock.sendall(conn.data_to_send())

    BEARER["value"] = "Bearer " + emulator.access_token()
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as sock,
    ):
        assert sock.selected_alpn_protocol() is None
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        status, data = post(sock, conn)
        assert status == 200 and json.loads(data)["name"].startswith("projects/demo/messages/")
        emulator.latency(400)
        started = time.monotonic()
        status, _ = post(sock, conn)
        assert status == 200 and time.monotonic() - started >= 0.4
    assert emulator.deliveries("no-alpn")["fcm"] == 2
