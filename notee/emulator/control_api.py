"""The server side of the emulator's ``/_emu`` control API (its Python client is
``notee.emulator.control``): one handler per (method, path) in ``ROUTES``.

Every handler gets the emulator, the request's JSON body (``{}`` when empty) and its raw query
string; a body or field of the wrong shape answers 400, an unknown route 404.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from notee.emulator import webpush
from notee.emulator.apns import APNS_DEFAULT_REASON
from notee.emulator.fcm import FCM_DEFAULT_CODE, FCM_ERRORS
from notee.emulator.peer import PeerRules, PeerServer, PeerStats
from notee.emulator.state import Emulator, Fault, Response

Handler = Callable[[Emulator, Any, bytes], Response]

# POST /_emu/realistic fields that re-rule the APNs port's HTTP/2 server -> its PeerRules field
_PEER_KEYS = {
    "apns_first_streams": "first_streams",
    "apns_max_streams": "max_streams",
    "apns_goaway_after": "goaway_after",
    "apns_answer_delay_ms": "answer_delay_s",
}
# POST /_emu/realistic fields that re-rule the public port's HTTP/2 front (FCM) -> its PeerRules field
_FRONT_KEYS = {"fcm_goaway_after": "goaway_after"}
# POST /_emu/apns/tokens kinds -> the (status, reason) APNs answers for such a token
_APNS_KINDS = {
    "unregistered": (410, "Unregistered"),
    "invalid": (400, "BadDeviceToken"),
    "not_for_topic": (400, "DeviceTokenNotForTopic"),
    "expired": (410, "ExpiredToken"),
}


def control(emu: Emulator, method: str, path: str, query: bytes, body: bytes) -> Response:
    """Answer one control request; ``path`` is what follows ``/_emu/``."""
    try:
        req = json.loads(body) if body else {}
        handler = ROUTES.get((method, path))
        if handler is not None:
            return handler(emu, req, query)
    except (ValueError, KeyError, TypeError) as exc:
        return _ok({"error": f"bad control request: {exc}"}, 400)
    return _ok({"error": "unknown control route"}, 404)


def _ok(payload: Any = None, status: int = 200) -> Response:
    return (
        status,
        [(b"content-type", b"application/json")],
        json.dumps(payload if payload is not None else {"ok": True}).encode(),
    )


def _query(raw: bytes) -> dict[str, str]:
    return dict(parse_qsl(raw.decode()))


def _peer_stats(peer: PeerServer | None) -> dict[str, Any] | None:
    """An HTTP/2 server's own counters: the APNs port's (``apns_peer``) or the public port's front
    (``front``: its HTTP/2 connections; an HTTP/1.1 one counts once it is told apart)."""
    if peer is None:
        return None
    st = peer.stats
    return {
        "connections": st.connections,
        "goaways": st.goaways,
        "resets": st.resets,
        "protocol_errors": st.protocol_errors,
        "max_open": st.max_open,
        "ignored_after_goaway": st.ignored_after_goaway,
        "live": len(st.live),
        "rules": dataclasses.asdict(peer.rules),
        "port": peer.port,
    }


def _front_stats(emu: Emulator) -> dict[str, Any] | None:
    """The public port's front: its HTTP/2 connections' counters (``_peer_stats``) and the HTTP/1.1
    connections it relayed to granian."""
    out = _peer_stats(emu.front)
    if out is not None and emu.front is not None:
        out["relayed"] = emu.front.stats.relayed
    return out


def stats(emu: Emulator, _req: Any, _query_string: bytes) -> Response:
    state = emu.state
    return _ok(
        {
            "counts": dict(state.counts),
            "faults": [f.__dict__ for f in state.faults],
            "realism": dataclasses.asdict(state.realism),
            "apns_peer": _peer_stats(emu.peer),
            "front": _front_stats(emu),
            "latency_ms": state.latency_s * 1000,
            # the apis a push or a look-up touched, with their totals (not summed over every token)
            "delivered": {api: state.delivered_total[api] for api in state.delivered},
        }
    )


def _deliveries_of(emu: Emulator, token: str) -> dict[str, Any]:
    state = emu.state
    return {
        "token": token,
        "fcm": state.delivered["fcm"][token],
        "apns": state.delivered["apns"][token],
        "attempts": state.attempts[token],
    }


def deliveries(emu: Emulator, _req: Any, query: bytes) -> Response:
    return _ok(_deliveries_of(emu, _query(query).get("token", "")))


def deliveries_of_many(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    """Many tokens at once: ``{"tokens": [...]}``."""
    tokens = req["tokens"]
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise TypeError("tokens must be a list of strings")
    return _ok({"deliveries": [_deliveries_of(emu, t) for t in tokens]})


def last_request(emu: Emulator, _req: Any, query: bytes) -> Response:
    view = emu.state.last_view(_query(query).get("token", ""))
    return _ok(view) if view is not None else _ok({"error": "no request"}, 404)


def reset(emu: Emulator, _req: Any, _query_string: bytes) -> Response:
    state = emu.state
    issued = state.issued  # access tokens stay valid, as a real token outlives a test
    state.reset()  # keep the same object: the app reads it per request
    state.issued = issued
    peer = emu.peer
    if peer is not None:
        peer.rules = PeerRules()
        peer.stats = PeerStats(live=peer.stats.live)  # counters restart; open connections stay
    if emu.front is not None:
        emu.front.stats = PeerStats(live=emu.front.stats.live)
        emu.front.rules.goaway_after = 0
    return _ok()


def realistic(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    emu.state.realism.update({k: v for k, v in req.items() if k not in _PEER_KEYS and k not in _FRONT_KEYS})
    for key, attr in _FRONT_KEYS.items():
        if key in req:
            if emu.front is None:
                return _ok({"error": f"{key} needs the emulator's front (served by `notee emulator`)"}, 400)
            setattr(emu.front.rules, attr, int(req[key]))
    peer = emu.peer
    for key, attr in _PEER_KEYS.items():
        if key in req:
            if peer is None:
                return _ok({"error": f"{key} needs `notee emulator --realistic` (its APNs port)"}, 400)
            if attr == "max_streams":
                peer.lower_limit(int(req[key]))  # sent at once to the open connections
            elif attr == "answer_delay_s":
                peer.rules.answer_delay_s = max(0.0, float(req[key])) / 1000
            else:
                setattr(peer.rules, attr, int(req[key]))
    return _ok({"realism": dataclasses.asdict(emu.state.realism)})


def apns_goaway(emu: Emulator, _req: Any, _query_string: bytes) -> Response:
    if emu.peer is None:
        return _ok({"error": "GOAWAY needs `notee emulator --realistic` (its APNs port)"}, 400)
    return _ok({"connections": emu.peer.goaway_all()})


def apns_reset(emu: Emulator, _req: Any, _query_string: bytes) -> Response:
    if emu.peer is None:
        return _ok({"error": "a connection reset needs `notee emulator --realistic` (its APNs port)"}, 400)
    return _ok({"connections": emu.peer.reset_all()})


def fcm_goaway(emu: Emulator, _req: Any, _query_string: bytes) -> Response:
    """GOAWAY on every open HTTP/2 connection of the public port (FCM's, the browser push services'),
    as Google's front ends send when they drain a connection."""
    if emu.front is None:
        return _ok({"error": "GOAWAY needs the emulator's front (served by `notee emulator`)"}, 400)
    return _ok({"connections": emu.front.goaway_all()})


def fcm_reset(emu: Emulator, _req: Any, _query_string: bytes) -> Response:
    """A TCP reset on every open HTTP/2 connection of the public port now, mid-stream (HTTP/1.1
    connections, relayed to granian, are left alone)."""
    if emu.front is None:
        return _ok({"error": "a connection reset needs the emulator's front (served by `notee emulator`)"}, 400)
    return _ok({"connections": emu.front.reset_all()})


def fcm_tokens(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    for code, tokens in req.items():
        if code not in FCM_ERRORS:
            return _ok({"error": f"unknown FCM errorCode {code}"}, 400)
        emu.state.fcm_tokens.update(dict.fromkeys(tokens, code))
    return _ok()


def apns_tokens(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    for kind, tokens in req.items():
        if kind not in _APNS_KINDS:
            return _ok({"error": f"unknown kind {kind}; one of {sorted(_APNS_KINDS)}"}, 400)
        emu.state.apns_tokens.update(dict.fromkeys(tokens, _APNS_KINDS[kind]))
    return _ok()


def add_fault(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    api = req["api"]
    status = int(req["status"])
    if api == "fcm":
        code = req.get("code") or FCM_DEFAULT_CODE.get(status, "INTERNAL")
    elif api == "apns":
        code = req.get("reason") or req.get("code") or APNS_DEFAULT_REASON.get(status, "InternalServerError")
    elif api == "webpush":
        code = req.get("code") or f"HTTP {status}"
    else:
        return _ok({"error": "api must be fcm, apns or webpush"}, 400)
    ra = req.get("retry_after")
    emu.state.faults.append(
        Fault(api, str(req.get("match", "*")), status, code, None if ra is None else str(ra), int(req.get("times", 1)))
    )
    return _ok()


def webpush_subscribe(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    """A new browser subscription: ``{"origin": <emulator URL>, "flavor": fcm|mozilla|apple,
    "application_server_key": <VAPID public key, optional>}``."""
    return _ok(webpush.subscribe(emu.state, req))


def webpush_pushes(emu: Emulator, _req: Any, query: bytes) -> Response:
    """What one subscription received, decrypted (``?id=``), oldest first; ``answers``: every request's
    time and status (refusals and faults included)."""
    sub_id = _query(query).get("id", "")
    state = emu.state
    return _ok({"id": sub_id, "pushes": state.web_pushes.get(sub_id, []), "answers": state.web_answers.get(sub_id, [])})


def webpush_gone(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    """The browser unsubscribed: ``{"ids": [...], "status": 410 | 404}`` answer that from now on."""
    status = int(req.get("status", 410))
    if status not in (404, 410):
        return _ok({"error": "status must be 404 or 410"}, 400)
    for sub_id in req["ids"]:
        emu.state.web_subs[sub_id].gone = status
    return _ok()


def set_latency(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    emu.state.latency_s = max(0.0, float(req.get("ms", 0))) / 1000
    return _ok()


def reject_bearers(emu: Emulator, req: Any, _query_string: bytes) -> Response:
    emu.state.rejected_bearers.update(req.get("bearers", []))
    return _ok()


ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "stats"): stats,
    ("GET", "deliveries"): deliveries,
    ("POST", "deliveries"): deliveries_of_many,
    ("GET", "requests/last"): last_request,
    ("POST", "reset"): reset,
    ("POST", "realistic"): realistic,
    ("POST", "apns/goaway"): apns_goaway,
    ("POST", "apns/reset"): apns_reset,
    ("POST", "fcm/goaway"): fcm_goaway,
    ("POST", "fcm/reset"): fcm_reset,
    ("POST", "fcm/tokens"): fcm_tokens,
    ("POST", "apns/tokens"): apns_tokens,
    ("POST", "faults"): add_fault,
    ("POST", "latency"): set_latency,
    ("POST", "webpush/subscribe"): webpush_subscribe,
    ("GET", "webpush/pushes"): webpush_pushes,
    ("POST", "webpush/gone"): webpush_gone,
    ("POST", "auth/reject"): reject_bearers,
}
