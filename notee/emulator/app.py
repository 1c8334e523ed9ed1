"""The emulator's ASGI application: FCM HTTP v1 (``notee.emulator.fcm``), the APNs provider API
(``notee.emulator.apns``), browser push services (``notee.emulator.webpush``) and the ``/_emu``
control API (``notee.emulator.control_api``).

Served by granian, one worker, so all state is this process's memory (``notee.emulator.state``):
HTTP/1.1 through this ASGI app, HTTP/2 through the emulator's own server in the same worker
(``notee.emulator.front``, ``handle`` below).
Wire formats follow docs/PROVIDERS.md and the upstream docs (see the persona modules).
"""

from __future__ import annotations

import asyncio
import gc
import os
from functools import partial

from notee.emulator.apns import apns
from notee.emulator.control_api import control
from notee.emulator.fcm import fcm, oauth_token
from notee.emulator.front import FrontServer
from notee.emulator.h2blocks import JSON_HEADERS
from notee.emulator.peer import PeerServer, front_ssl_context, server_ssl_context
from notee.emulator.state import LAUNCH_REALISTIC, Emulator, Receive, Response, Scope, Send, State
from notee.emulator.webpush import webpush

EMULATOR = Emulator(State())  # the single worker's emulator; its state is reset through POST /_emu/reset


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await _start_peer()
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    if EMULATOR.state.latency_s and not scope["path"].startswith("/_emu/"):
        await asyncio.sleep(EMULATOR.state.latency_s)
    status, headers, out = handle(EMULATOR, scope, body)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": out})


async def _start_peer() -> None:
    """Serve the public port (``notee.emulator.front``: HTTP/2 here, HTTP/1.1 relayed to granian's
    Unix socket) and, in realistic mode, APNs on its own port through the emulator's HTTP/2 server
    (one stream until the first valid request, then a limit; GOAWAY), in this worker's loop and on
    its state."""
    # Start-up's objects are never garbage (frozen: no collection walks them again), and a push
    # frees what it allocates by reference counting, so a young collection every 700 allocations
    # (the default; several per read of ~100 requests) is CPU spent finding nothing (issue 35)
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    env = os.environ
    tls = (env.get("NOTEE_EMULATOR_TLS_CERT", ""), env.get("NOTEE_EMULATOR_TLS_KEY", ""))
    front_port, upstream = env.get("NOTEE_EMULATOR_FRONT_PORT"), env.get("NOTEE_EMULATOR_UPSTREAM")
    if front_port and upstream:
        front = EMULATOR.front = FrontServer(
            partial(handle, EMULATOR),
            100 if LAUNCH_REALISTIC else 200,  # Google's front ends / granian's default
            upstream,
            lambda: EMULATOR.state.latency_s,
        )
        await front.start(env.get("NOTEE_EMULATOR_FRONT_HOST", "127.0.0.1"), int(front_port), front_ssl_context(*tls))
    port = env.get("NOTEE_EMULATOR_APNS_PORT")
    if not LAUNCH_REALISTIC or not port:
        return
    peer = EMULATOR.peer = PeerServer(partial(handle, EMULATOR))
    await peer.start(env.get("NOTEE_EMULATOR_APNS_HOST", "127.0.0.1"), int(port), server_ssl_context(*tls))


def handle(emu: Emulator, scope: Scope, body: bytes) -> Response:
    """Answer one request (granian's ASGI app and the emulator's own HTTP/2 server both call this)."""
    path: str = scope["path"]
    state = emu.state
    if path.startswith("/3/device/"):
        return apns(state, scope, path[10:], body)
    if path.startswith("/v1/projects/") and path.endswith("/messages:send"):
        return fcm(state, scope, path[13:-14], body)
    if path.startswith("/wp/") and scope["method"] == "POST":
        flavor, _, sub_id = path[4:].partition("/")
        return webpush(state, scope, flavor, sub_id, body)
    if path.startswith("/_emu/"):
        return control(emu, scope["method"], path[6:], scope.get("query_string", b""), body)
    if path == "/token" and scope["method"] == "POST":
        return oauth_token(state, body)
    return 404, JSON_HEADERS, b'{"reason":"BadPath"}'
