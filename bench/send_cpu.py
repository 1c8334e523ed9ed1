"""send_cpu_ratio: messages per client CPU-second of Notee's sending path against the leanest bare
client loop: raw ``h2`` over TLS on asyncio, same emulator, same request (path, headers, bearer token,
JSON body), same number of requests in flight.

* Notee's side is the path the fan-out worker uses for a page: ``notee.delivery.deliver`` (routing,
  the FCM provider, Notee's HTTP/2 pool, outcome classification, retry bookkeeping), called with
  pages of ``fetch_size`` messages as the worker does.
* The bare side is one ``asyncio.Protocol`` driving one ``h2`` connection by callbacks: no coroutine,
  future or object per request; each response that ends immediately sends the next request. It
  uses the same h2 settings Notee uses (no header validation, no Huffman coding), so the ceiling is
  what this transport can do at best, not a strawman. Its body is the same JSON Notee sends for the
  same message (``fcm_message``), built per request the lean way: the page's JSON around the
  token is rendered once and each request splices its JSON-quoted token in.

Each side runs in its own freshly spawned process; CPU is ``time.process_time()`` of that process
only (the emulator's CPU is not counted). Sides alternate, ``repeats`` times; medians are reported.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import time
from dataclasses import replace
from typing import Any

from bench.report import Measure, figure

PROJECT = "notee-bench"
SERVICE = "BENCH"
BEARER = "notee-emulator"  # what Notee's emulator wiring sends (providers/fcm.py StaticToken)
IN_FLIGHT = 100  # Notee's pool: one connection, max_streams=100 (providers/routing.py)


def _messages(n: int, offset: int = 0):
    from notee.providers.base import Message

    from bench.seed import fcm_like_token

    return [Message(fcm_like_token(offset + i), "AOS", "Bench title", "A benchmark push body of realistic length.",
                    {"kind": "bench", "ref": "12345"}, 3600, "high") for i in range(n)]


def _headers() -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Bearer " + BEARER.encode()), (b"content-type", b"application/json"),
            (b"x-goog-api-format-version", b"2"), (b"x-firebase-client", b"notee")]


# ----------------------------------------------------------------------------------------- bare
class _BareClient(asyncio.Protocol):
    def __init__(self, tokens: list[str], body: tuple[bytes, bytes], path: bytes, authority: bytes, in_flight: int,
                 done: asyncio.Future):
        import h2.config
        import h2.connection

        config = h2.config.H2Configuration(client_side=True, header_encoding=None, validate_outbound_headers=False,
                                           normalize_outbound_headers=False, validate_inbound_headers=False)
        self.conn = h2.connection.H2Connection(config=config)
        encode = self.conn.encoder.encode
        self.conn.encoder.encode = lambda headers, huffman=True: encode(headers, huffman=False)
        self.tokens, self.next, self.in_flight = tokens, 0, in_flight
        self.prefix, self.suffix = body
        self.head = [(b":method", b"POST"), (b":scheme", b"https"), (b":path", path), (b":authority", authority),
                     *_headers()]
        self.done, self.ok, self.other, self.open = done, 0, 0, 0
        self.status: dict[int, int] = {}

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(1 << 24)
        for _ in range(self.in_flight):
            self._send_one()
        transport.write(self.conn.data_to_send())

    def _send_one(self) -> None:
        if self.next >= len(self.tokens):
            return
        body = self.prefix + json.dumps(self.tokens[self.next]).encode() + self.suffix
        self.next += 1
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, self.head)
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
                self._send_one()
        self.transport.write(self.conn.data_to_send())
        if self.open == 0 and self.next >= len(self.tokens) and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc!r}"))


async def _bare(url: str, ca_file: str, n: int) -> dict[str, Any]:
    import ssl
    from urllib.parse import urlsplit

    from notee.providers.fcm import fcm_message

    parts = urlsplit(url)
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.set_alpn_protocols(["h2"])
    messages = _messages(n)
    tokens = [m.device_token for m in messages]
    mark = "\x00TOKEN\x00"
    now = time.time()
    whole = json.dumps({"message": fcm_message(replace(messages[0], device_token=mark), now=now)},
                       separators=(",", ":"), ensure_ascii=False).encode()
    prefix, suffix = whole.split(json.dumps(mark).encode())
    # the spliced body is byte for byte what Notee sends for the same message
    assert prefix + json.dumps(tokens[-1]).encode() + suffix == json.dumps(
        {"message": fcm_message(messages[-1], now=now)}, separators=(",", ":"), ensure_ascii=False).encode()
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    path = f"/v1/projects/{PROJECT}/messages:send".encode()
    wall, cpu = time.perf_counter(), time.process_time()
    transport, proto = await loop.create_connection(
        lambda: _BareClient(tokens, (prefix, suffix), path, parts.hostname.encode(), IN_FLIGHT, done),
        parts.hostname, parts.port, ssl=ctx, server_hostname=parts.hostname)
    await done
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    transport.close()
    if proto.ok != n:
        raise AssertionError(f"bare client: {proto.ok} of {n} requests answered 200 ({proto.other} other)")
    return {"n": n, "cpu_s": cpu, "wall_s": wall}


# ----------------------------------------------------------------------------------------- notee
async def _notee(n: int, page: int) -> dict[str, Any]:
    from bench.tenant import bench_service_account
    from notee.delivery import deliver
    from notee.vocabulary import FcmCredentials, ProviderCredentials
    from notee.providers.routing import ProviderSet
    from notee.runtime import Runtime
    from notee.settings import Settings

    settings = Settings()
    if not settings.emulator_url:
        raise RuntimeError("NOTEE_EMULATOR_URL is not set")
    runtime = Runtime(settings)  # lazy: nothing connects unless a token is pruned or dead-lettered
    providers = ProviderSet(settings)
    pages = [_messages(min(page, n - i), i) for i in range(0, n, page)]
    credentials = ProviderCredentials(fcm=FcmCredentials(bench_service_account()))  # no device goes without
    delivered = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for msgs in pages:
        result = await deliver(runtime, providers, SERVICE, msgs, credentials=credentials, job_id=None)
        delivered += result.delivered
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await providers.close()
    runtime.close()
    if delivered != n:
        raise AssertionError(f"notee sender delivered {delivered} of {n}")
    return {"n": n, "cpu_s": cpu, "wall_s": wall}


def bare_side(url: str, ca_file: str, n: int) -> dict[str, Any]:
    return asyncio.run(_bare(url, ca_file, n))


def notee_side(n: int, page: int) -> dict[str, Any]:
    return asyncio.run(_notee(n, page))


def in_child(fn, *args):
    """Run ``fn(*args)`` in a freshly spawned process (clean CPU accounting, no shared threads)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


def measure(url: str, ca_file: str, *, n: int, page: int, repeats: int) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {"bare": [], "notee": []}
    for _ in range(repeats):
        runs["bare"].append(in_child(bare_side, url, ca_file, n))
        runs["notee"].append(in_child(notee_side, n, page))
    return runs


def run(emulator, *, n: int, page: int = 1000, repeats: int = 3) -> tuple[dict[str, Any], dict[str, float]]:
    """The figure, plus the bare client's wall-clock rate (pushes/s) for fanout_ratio's ceiling."""
    runs = measure(emulator.url, emulator.ca_file, n=n, page=page, repeats=repeats)
    bare_cpu = statistics.median(r["n"] / r["cpu_s"] for r in runs["bare"])
    notee_cpu = statistics.median(r["n"] / r["cpu_s"] for r in runs["notee"])
    bare_wall = statistics.median(r["n"] / r["wall_s"] for r in runs["bare"])
    notee_wall = statistics.median(r["n"] / r["wall_s"] for r in runs["notee"])
    fig = figure("send_cpu_ratio", Measure("notee deliver()", notee_cpu, "msgs/CPU-s"),
                 Measure("bare h2 client", bare_cpu, "req/CPU-s"),
                 {"messages": n, "page": page, "in_flight": IN_FLIGHT, "repeats": repeats},
                 extra={"notee_wall_per_s": notee_wall, "bare_wall_per_s": bare_wall,
                        "notee_us_per_msg": 1e6 / notee_cpu, "bare_us_per_req": 1e6 / bare_cpu})
    return fig, {"bare_wall_per_s": bare_wall, "notee_wall_per_s": notee_wall}
