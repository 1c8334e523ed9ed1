"""send_cpu_ratio: messages per client CPU-second of Notee's sending path against the leanest bare
client loop measured (bench/engines.py, docs/PROVIDERS.md "HTTP/2 engines"): libcurl's multi
interface through pycurl, driven by asyncio, over TLS; same emulator, same request (path, headers,
bearer token, JSON body), same number of requests in flight on one connection.

* Notee's side is the path the fan-out worker uses for a page: ``notee.usecases.deliver.deliver`` (routing,
  the FCM provider, Notee's HTTP/2 pool, outcome classification, retry bookkeeping), called with
  pages of ``fetch_size`` messages as the worker does.
* The bare side is the leanest engine's bare loop of bench/engines.py (``LEANEST``: pycurl, or jh2
  where pycurl is not installed): no coroutine or future per request, each finished transfer
  starts the next, the body is the same JSON Notee sends for the same message (``fcm_message``),
  the page's JSON rendered once and each request's JSON-quoted token spliced in (asserted byte for
  byte). ``bare_side`` (the fan-out's wall-clock ceiling, bench/fanout.py) is still the bare
  ``h2`` loop below.

Each side runs in its own freshly spawned process; CPU is ``time.process_time()`` of that process
only (the emulator's CPU is not counted). Sides alternate, ``repeats`` times; medians are reported.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from dataclasses import replace
from typing import Any

from bench import engines
from bench.report import Measure, figure
from bench.workload import IN_FLIGHT, PROJECT, apns_credentials, fcm_messages, in_child, notee_side


def _headers(bearer: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"authorization", b"Bearer " + bearer.encode()),
        (b"content-type", b"application/json"),
        (b"x-goog-api-format-version", b"2"),
        (b"x-firebase-client", b"notee"),
    ]


# ----------------------------------------------------------------------------------------- bare
class _BareClient(asyncio.Protocol):
    """One h2 connection driven by callbacks. Like Notee it opens no stream before the server's
    first SETTINGS and never more than the server allows (the realistic emulator's APNs port starts
    at one stream), so it is the leanest *correct* client, not a strawman."""

    def __init__(
        self,
        targets: list[str],
        body: tuple[bytes, bytes],
        path: bytes,
        head: list[tuple[bytes, bytes]],
        in_flight: int,
        done: asyncio.Future,
        *,
        apns_id: bool = False,
    ):
        import h2.config
        import h2.connection

        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
        )
        self.conn = h2.connection.H2Connection(config=config)
        encode = self.conn.encoder.encode
        self.conn.encoder.encode = lambda headers, huffman=True: encode(headers, huffman=False)
        self.targets, self.next, self.in_flight, self.limit = targets, 0, in_flight, 0
        self.prefix, self.suffix = body
        self.path_prefix = path  # APNs: the token follows it
        self.head, self.apns_id = head, apns_id
        self.done, self.ok, self.other, self.open = done, 0, 0, 0
        self.status: dict[int, int] = {}

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(1 << 24)
        transport.write(self.conn.data_to_send())

    def _send_one(self) -> None:
        target = self.targets[self.next]
        self.next += 1
        if self.prefix:  # FCM: the token inside the JSON body
            body = self.prefix + json.dumps(target).encode() + self.suffix
            path = self.path_prefix
        else:  # APNs: the token in the path, one payload for all
            body = self.suffix
            path = self.path_prefix + target.encode()
        head = [(b":method", b"POST"), (b":scheme", b"https"), (b":path", path), *self.head]
        if self.apns_id:
            head.append((b"apns-id", str(uuid.uuid4()).encode()))
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, head)
        self.conn.send_data(sid, body, end_stream=True)
        self.open += 1

    def data_received(self, data: bytes) -> None:
        import h2.events

        for ev in self.conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                self.status[ev.stream_id] = int(dict(ev.headers)[b":status"])
            elif isinstance(ev, h2.events.DataReceived):
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self.open -= 1
                if self.status.pop(ev.stream_id, 0) == 200:
                    self.ok += 1
                else:
                    self.other += 1
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                self.limit = min(self.in_flight, self.conn.remote_settings.max_concurrent_streams)
        while self.open < self.limit and self.next < len(self.targets):
            self._send_one()
        self.transport.write(self.conn.data_to_send())
        if self.open == 0 and self.next >= len(self.targets) and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc!r}"))


async def _drive(url: str, ca_file: str, client) -> tuple[float, float, _BareClient]:
    import ssl
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.set_alpn_protocols(["h2"])
    loop = asyncio.get_running_loop()
    wall, cpu = time.perf_counter(), time.process_time()
    transport, proto = await loop.create_connection(
        client, parts.hostname, parts.port, ssl=ctx, server_hostname=parts.hostname
    )
    await proto.done
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    transport.close()
    return cpu, wall, proto


async def _bare(url: str, ca_file: str, n: int) -> dict[str, Any]:
    from urllib.parse import urlsplit

    from notee.emulator.control import attach
    from notee.providers.fcm import fcm_message

    control = attach(url, ca_file)  # a realistic FCM wants an access token from its OAuth endpoint
    bearer = control.access_token()
    control.http.close()
    messages = fcm_messages(n)
    tokens = [m.device_token for m in messages]
    mark = "\x00TOKEN\x00"
    now = time.time()
    whole = json.dumps(
        {"message": fcm_message(replace(messages[0], device_token=mark), now=now)},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    prefix, suffix = whole.split(json.dumps(mark).encode())
    # the spliced body is byte for byte what Notee sends for the same message
    assert (
        prefix + json.dumps(tokens[-1]).encode() + suffix
        == json.dumps(
            {"message": fcm_message(messages[-1], now=now)}, separators=(",", ":"), ensure_ascii=False
        ).encode()
    )
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    path = f"/v1/projects/{PROJECT}/messages:send".encode()
    head = [(b":authority", urlsplit(url).hostname.encode()), *_headers(bearer)]
    cpu, wall, proto = await _drive(
        url, ca_file, lambda: _BareClient(tokens, (prefix, suffix), path, head, IN_FLIGHT, done)
    )
    if proto.ok != n:
        raise AssertionError(f"bare client: {proto.ok} of {n} requests answered 200 ({proto.other} other)")
    return {"n": n, "cpu_s": cpu, "wall_s": wall}


def bare_side(url: str, ca_file: str, n: int) -> dict[str, Any]:
    return asyncio.run(_bare(url, ca_file, n))


def leanest() -> str:
    """The engine whose bare loop is the ceiling: the leanest measured (docs/PROVIDERS.md)."""
    try:
        import pycurl

        if pycurl.version_info()[4] & pycurl.VERSION_HTTP2:
            return "pycurl"
    except ImportError:
        pass
    return "jh2"


def lean_side(api: str, url: str, ca_file: str, n: int, bearer: str) -> dict[str, Any]:
    return engines.one_run(leanest(), api, url, ca_file, n, bearer)


def _label(engine: str, api: str) -> str:
    what = "pycurl (libcurl multi)" if engine == "pycurl" else engine
    return f"bare {what} loop" + (" APNs" if api == "apns" else "")


def measure(emulator, *, n: int, page: int, repeats: int) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {"bare": [], "notee": []}
    bearer = emulator.access_token()
    for _ in range(repeats):
        runs["bare"].append(in_child(lean_side, "fcm", emulator.url, emulator.ca_file, n, bearer))
        runs["notee"].append(in_child(notee_side, n, page))
    return runs


def run_apns(emulator, *, n: int, page: int = 1000, repeats: int = 3) -> dict[str, Any]:
    """The same ratio for APNs: Notee's deliver() on IOS devices of a service with APNs credentials
    against a bare client with the same JWT, headers and payload, both on the emulator's APNs port
    (the realistic one: one stream until the first valid request, then its limit)."""
    from notee.providers.apns import ApnsJwt

    url = emulator.apns_url or emulator.url
    c = apns_credentials().apns
    bearer = ApnsJwt(c.private_key, c.key_id, c.team_id).bearer().decode()
    runs: dict[str, list[dict[str, Any]]] = {"bare": [], "notee": []}
    for _ in range(repeats):
        runs["bare"].append(in_child(lean_side, "apns", url, emulator.ca_file, n, bearer))
        runs["notee"].append(in_child(notee_side, n, page, "apns"))
    bare_cpu = statistics.median(r["n"] / r["cpu_s"] for r in runs["bare"])
    notee_cpu = statistics.median(r["n"] / r["cpu_s"] for r in runs["notee"])
    return figure(
        "send_cpu_ratio_apns",
        Measure("notee deliver() APNs", notee_cpu, "msgs/CPU-s"),
        Measure(_label(leanest(), "apns"), bare_cpu, "req/CPU-s"),
        {"messages": n, "page": page, "in_flight": IN_FLIGHT, "repeats": repeats},
        extra={
            "notee_wall_per_s": statistics.median(r["n"] / r["wall_s"] for r in runs["notee"]),
            "bare_wall_per_s": statistics.median(r["n"] / r["wall_s"] for r in runs["bare"]),
            "notee_us_per_msg": 1e6 / notee_cpu,
            "bare_us_per_req": 1e6 / bare_cpu,
            "bare_engine": leanest(),
        },
    )


def run(emulator, *, n: int, page: int = 1000, repeats: int = 3) -> tuple[dict[str, Any], dict[str, float]]:
    """The figure, plus the bare client's wall-clock rate (pushes/s) for fanout_ratio's ceiling."""
    runs = measure(emulator, n=n, page=page, repeats=repeats)
    bare_cpu = statistics.median(r["n"] / r["cpu_s"] for r in runs["bare"])
    notee_cpu = statistics.median(r["n"] / r["cpu_s"] for r in runs["notee"])
    bare_wall = statistics.median(r["n"] / r["wall_s"] for r in runs["bare"])
    notee_wall = statistics.median(r["n"] / r["wall_s"] for r in runs["notee"])
    fig = figure(
        "send_cpu_ratio",
        Measure("notee deliver()", notee_cpu, "msgs/CPU-s"),
        Measure(_label(leanest(), "fcm"), bare_cpu, "req/CPU-s"),
        {"messages": n, "page": page, "in_flight": IN_FLIGHT, "repeats": repeats},
        extra={
            "notee_wall_per_s": notee_wall,
            "bare_wall_per_s": bare_wall,
            "notee_us_per_msg": 1e6 / notee_cpu,
            "bare_us_per_req": 1e6 / bare_cpu,
            "bare_engine": leanest(),
        },
    )
    return fig, {"bare_wall_per_s": bare_wall, "notee_wall_per_s": notee_wall}
