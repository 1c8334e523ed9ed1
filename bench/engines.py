"""HTTP/2 engines side by side: client CPU per push request of each engine's bare loop against the
emulator, next to Notee's own ``deliver()`` (issue 19, item 6; docs/PROVIDERS.md "HTTP/2 engines").

    flock /tmp/notee-bench.lock .venv/bin/python -m bench.engines [--n 10000] [--repeats 3]
        [--engines h2 jh2 pycurl curl_cffi pyreqwest notee] [--apis fcm apns] [--baseline DIR ...]

``--baseline``: also measure ``deliver()`` of the ``notee`` package of other checkouts (e.g. main
before a transport change, in a ``git worktree``), as engines ``notee@DIR``: before and after in one run.

One realistic ``notee emulator`` (FCM on granian, APNs on its own HTTP/2 server) is started for the
run. Every engine sends the same requests Notee sends: FCM v1 POSTs with distinct 163-character
tokens spliced into one page's JSON body and the emulator's OAuth access token; APNs POSTs to
``/3/device/<token>`` with the same ES256 JWT, headers and payload, a fresh ``apns-id`` per request.
All over TLS (the emulator's CA), HTTP/2 negotiated by ALPN, ``IN_FLIGHT`` (100) requests in flight
multiplexed on ONE connection, each engine in its own freshly spawned process; CPU is that process's
``time.process_time()`` (user + system, every thread of it: the Rust clients' runtimes included),
the emulator's is not counted. Every run must get 200 for every request or it fails. Engines run
interleaved (each repetition runs every engine once, in a rotated order) so that all share the
machine's load of the moment; medians of the repetitions are reported, with min and max.

An engine that is not installed is reported as missing (``pip install pycurl jh2 curl_cffi pyreqwest``
into the venv to measure them all); only the one Notee uses is a dependency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.workload import (
    APNS_TOPIC,
    IN_FLIGHT,
    PROJECT,
    apns_credentials,
    apns_messages,
    fcm_messages,
    in_child,
    notee_side,
)

ENGINES = ("notee", "h2", "jh2", "pycurl", "curl_cffi", "pyreqwest")
APIS = ("fcm", "apns")


# --------------------------------------------------------------------------------- the requests
class Work:
    """The requests of one run: ``path(i)``, ``body(i)``, constant ``headers`` and whether each
    request carries a fresh apns-id (as Notee's APNs sender does)."""

    def __init__(self, api: str, url: str, n: int, bearer: str) -> None:
        self.api, self.url, self.n = api, url, n
        self.origin = url.rstrip("/")
        self.authority = urlsplit(url).hostname or "localhost"
        if api == "fcm":
            from notee.providers.fcm import fcm_message

            messages = fcm_messages(n)
            self.targets = [m.device_token for m in messages]
            mark = "\x00TOKEN\x00"
            now = time.time()
            whole = json.dumps(
                {"message": fcm_message(replace(messages[0], device_token=mark), now=now)},
                separators=(",", ":"),
                ensure_ascii=False,
            ).encode()
            self.prefix, self.suffix = whole.split(json.dumps(mark).encode())
            # byte for byte what Notee sends for the same message
            assert (
                self.body(n - 1)
                == json.dumps(
                    {"message": fcm_message(messages[-1], now=now)}, separators=(",", ":"), ensure_ascii=False
                ).encode()
            )
            self.fixed_path = f"/v1/projects/{PROJECT}/messages:send".encode()
            self.headers = [
                (b"authorization", b"Bearer " + bearer.encode()),
                (b"content-type", b"application/json"),
                (b"x-goog-api-format-version", b"2"),
                (b"x-firebase-client", b"notee"),
            ]
            self.apns_id = False
        else:
            from notee.providers.apns import apns_payload

            messages = apns_messages(n)
            m = messages[0]
            self.targets = [x.device_token for x in messages]
            self.payload = json.dumps(
                apns_payload(m.title, m.body, m.data), separators=(",", ":"), ensure_ascii=False
            ).encode()
            self.headers = [
                (b"authorization", bearer.encode()),
                (b"apns-topic", APNS_TOPIC.encode()),
                (b"apns-push-type", b"alert"),
                (b"apns-priority", b"10"),
                (b"apns-expiration", str(int(time.time()) + (m.ttl_seconds or 0)).encode()),
            ]
            self.apns_id = True

    def path(self, i: int) -> bytes:
        return self.fixed_path if self.api == "fcm" else b"/3/device/" + self.targets[i].encode()

    def body(self, i: int) -> bytes:
        if self.api == "fcm":
            return self.prefix + json.dumps(self.targets[i]).encode() + self.suffix
        return self.payload

    def extra_headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"apns-id", str(uuid.uuid4()).encode())] if self.apns_id else []


def _result(work: Work, ok: int, other: int, cpu: float, wall: float, name: str) -> dict[str, Any]:
    if ok != work.n:
        raise AssertionError(f"{name} {work.api}: {ok} of {work.n} requests answered 200 ({other} other)")
    return {"n": work.n, "cpu_s": cpu, "wall_s": wall}


# ---------------------------------------------------------------------------- h2 / jh2 (Python)
def _h2_loop(module: str, work: Work, ca_file: str) -> dict[str, Any]:
    """One connection driven by callbacks (an ``asyncio.Protocol``), no object per request beyond
    what the state machine makes: the leanest loop these state machines allow. Same settings as
    Notee (no header validation; HPACK Huffman off where the encoder lets us)."""
    import importlib
    import ssl

    config_mod = importlib.import_module(f"{module}.config")
    conn_mod = importlib.import_module(f"{module}.connection")
    events = importlib.import_module(f"{module}.events")
    ResponseReceived, DataReceived, StreamEnded = events.ResponseReceived, events.DataReceived, events.StreamEnded
    RemoteSettingsChanged = events.RemoteSettingsChanged

    class Client(asyncio.Protocol):
        def __init__(self, done: asyncio.Future[None]) -> None:
            config = config_mod.H2Configuration(
                client_side=True,
                header_encoding=None,
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
                validate_inbound_headers=False,
            )
            self.conn = conn_mod.H2Connection(config=config)
            try:  # h2: pure-Python hpack, Huffman coding off (what Notee does)
                encode = self.conn.encoder.encode
                self.conn.encoder.encode = lambda headers, huffman=True: encode(headers, huffman=False)
            except (AttributeError, TypeError):  # jh2's encoder is native and not patchable
                pass
            self.done, self.next, self.open, self.limit, self.ok, self.other = done, 0, 0, 0, 0, 0
            self.status: dict[int, int] = {}
            self.head = [(b":authority", work.authority.encode()), *work.headers]

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport
            self.conn.initiate_connection()
            self.conn.increment_flow_control_window(1 << 24)
            transport.write(self.conn.data_to_send())

        def data_received(self, data: bytes) -> None:
            conn = self.conn
            for ev in conn.receive_data(data):
                if isinstance(ev, ResponseReceived):
                    self.status[ev.stream_id] = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, DataReceived):
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, StreamEnded):
                    self.open -= 1
                    if self.status.pop(ev.stream_id, 0) == 200:
                        self.ok += 1
                    else:
                        self.other += 1
                elif isinstance(ev, RemoteSettingsChanged):
                    self.limit = min(IN_FLIGHT, conn.remote_settings.max_concurrent_streams)
            while self.open < self.limit and self.next < work.n:
                i = self.next
                self.next += 1
                sid = conn.get_next_available_stream_id()
                conn.send_headers(
                    sid,
                    [
                        (b":method", b"POST"),
                        (b":scheme", b"https"),
                        (b":path", work.path(i)),
                        *self.head,
                        *work.extra_headers(),
                    ],
                )
                conn.send_data(sid, work.body(i), end_stream=True)
                self.open += 1
            self.transport.write(conn.data_to_send())
            if self.open == 0 and self.next >= work.n and not self.done.done():
                self.done.set_result(None)

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.done.done():
                self.done.set_exception(ConnectionError(f"connection lost: {exc!r}"))

    async def main() -> dict[str, Any]:
        parts = urlsplit(work.url)
        ctx = ssl.create_default_context(cafile=ca_file)
        ctx.set_alpn_protocols(["h2"])
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        wall, cpu = time.perf_counter(), time.process_time()
        transport, proto = await loop.create_connection(
            lambda: Client(done), parts.hostname, parts.port, ssl=ctx, server_hostname=parts.hostname
        )
        await done
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        transport.close()
        return _result(work, proto.ok, proto.other, cpu, wall, module)

    return asyncio.run(main())


# ------------------------------------------------------------------------ pycurl (libcurl multi)
def _pycurl_loop(work: Work, ca_file: str) -> dict[str, Any]:
    """libcurl's multi interface driven by asyncio (socket and timer callbacks: the integration a
    Notee transport would use), one connection (MAX_HOST_CONNECTIONS 1, PIPEWAIT), 100 transfers
    in flight; easy handles reused, constant options set once per handle."""
    import pycurl

    if not pycurl.version_info()[4] & pycurl.VERSION_HTTP2:
        raise RuntimeError(f"this pycurl's libcurl has no HTTP/2: {pycurl.version}")

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        multi = pycurl.CurlMulti()
        multi.setopt(pycurl.M_PIPELINING, pycurl.PIPE_MULTIPLEX)
        multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, 1)
        multi.setopt(pycurl.M_MAX_CONCURRENT_STREAMS, IN_FLIGHT)
        watching: dict[int, int] = {}
        timer: list[asyncio.TimerHandle | None] = [None]
        done: asyncio.Future[None] = loop.create_future()
        counts = {"ok": 0, "other": 0, "next": 0, "open": 0}
        free: list[Any] = []
        head_fixed = [k.decode() + ": " + v.decode() for k, v in work.headers]
        base = work.origin

        def act(fd: int, ev: int) -> None:
            multi.socket_action(fd, ev)
            drain()

        def on_socket(what: int, fd: int, _multi: Any, _data: Any) -> None:
            old = watching.get(fd, 0)
            new = 0 if what == pycurl.POLL_REMOVE else what
            if old & pycurl.POLL_IN and not new & pycurl.POLL_IN:
                loop.remove_reader(fd)
            if old & pycurl.POLL_OUT and not new & pycurl.POLL_OUT:
                loop.remove_writer(fd)
            if new & pycurl.POLL_IN and not old & pycurl.POLL_IN:
                loop.add_reader(fd, act, fd, pycurl.CSELECT_IN)
            if new & pycurl.POLL_OUT and not old & pycurl.POLL_OUT:
                loop.add_writer(fd, act, fd, pycurl.CSELECT_OUT)
            if new:
                watching[fd] = new
            else:
                watching.pop(fd, None)

        def on_timer(ms: int) -> None:
            if timer[0] is not None:
                timer[0].cancel()
                timer[0] = None
            if ms >= 0:
                timer[0] = loop.call_later(ms / 1000.0, act, pycurl.SOCKET_TIMEOUT, 0)

        multi.setopt(pycurl.M_SOCKETFUNCTION, on_socket)
        multi.setopt(pycurl.M_TIMERFUNCTION, on_timer)

        def handle() -> Any:
            if free:
                return free.pop()
            c = pycurl.Curl()
            chunks: list[bytes] = []
            heads: list[bytes] = []
            c.chunks, c.heads = chunks, heads  # type: ignore[attr-defined]
            c.setopt(pycurl.WRITEFUNCTION, chunks.append)
            c.setopt(pycurl.HEADERFUNCTION, heads.append)
            c.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_2TLS)
            c.setopt(pycurl.PIPEWAIT, 1)
            c.setopt(pycurl.CAINFO, ca_file)
            c.setopt(pycurl.POST, 1)
            c.setopt(pycurl.NOSIGNAL, 1)
            if work.api == "fcm":
                c.setopt(pycurl.URL, base + work.fixed_path.decode())
                c.setopt(pycurl.HTTPHEADER, head_fixed)
            return c

        def start() -> None:
            # libcurl opens streams as soon as ALPN said h2, before the server's SETTINGS (a server
            # starting at one stream, like APNs, resets the rest): one request alone on the new
            # connection, the others once it is answered (SETTINGS read by then).
            room = IN_FLIGHT if counts["ok"] + counts["other"] else 1
            while counts["open"] < room and counts["next"] < work.n:
                i = counts["next"]
                counts["next"] += 1
                c = handle()
                if work.api != "fcm":
                    c.setopt(pycurl.URL, base + work.path(i).decode())
                    c.setopt(pycurl.HTTPHEADER, [*head_fixed, "apns-id: " + str(uuid.uuid4())])
                c.setopt(pycurl.POSTFIELDS, work.body(i))
                multi.add_handle(c)
                counts["open"] += 1

        def finish(c: Any, ok: bool) -> None:
            multi.remove_handle(c)
            counts["open"] -= 1
            if ok and c.getinfo(pycurl.RESPONSE_CODE) == 200:
                counts["ok"] += 1
            else:
                counts["other"] += 1
            c.chunks.clear()
            c.heads.clear()
            free.append(c)

        def drain() -> None:
            while True:
                queued, good, bad = multi.info_read()
                for c in good:
                    finish(c, True)
                for c, _errno, _msg in bad:
                    finish(c, False)
                if not queued:
                    break
            start()
            if counts["open"] == 0 and counts["next"] >= work.n and not done.done():
                done.set_result(None)

        wall, cpu = time.perf_counter(), time.process_time()
        start()
        await done
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if timer[0] is not None:
            timer[0].cancel()
        for fd in list(watching):
            on_socket(pycurl.POLL_REMOVE, fd, multi, None)
        multi.close()
        return _result(work, counts["ok"], counts["other"], cpu, wall, "pycurl")

    return asyncio.run(main())


# ----------------------------------------------------------------- curl_cffi (libcurl via cffi)
def _curl_cffi_loop(work: Work, ca_file: str) -> dict[str, Any]:
    """curl_cffi's low-level ``AsyncCurl`` (libcurl multi on asyncio) with reused ``Curl`` handles;
    its high-level Session is far costlier (docs/PROVIDERS.md)."""
    from curl_cffi import CurlHttpVersion, CurlOpt
    from curl_cffi.aio import AsyncCurl
    from curl_cffi.curl import Curl

    async def main() -> dict[str, Any]:
        acurl = AsyncCurl()
        free: list[Curl] = []
        counts = {"ok": 0, "other": 0}
        head_fixed = [k + b": " + v for k, v in work.headers]
        sem = asyncio.Semaphore(IN_FLIGHT)

        async def one(i: int) -> None:
            async with sem:
                c = free.pop() if free else Curl()
                c.reset()
                c.setopt(CurlOpt.URL, (work.origin + work.path(i).decode()).encode())
                c.setopt(CurlOpt.HTTP_VERSION, CurlHttpVersion.V2TLS)
                c.setopt(CurlOpt.PIPEWAIT, 1)
                c.setopt(CurlOpt.CAINFO, ca_file.encode())
                c.setopt(CurlOpt.POSTFIELDS, work.body(i))
                c.setopt(CurlOpt.HTTPHEADER, head_fixed + [k + b": " + v for k, v in work.extra_headers()])
                chunks: list[bytes] = []
                c.setopt(CurlOpt.WRITEFUNCTION, chunks.append)
                try:
                    await acurl.add_handle(c)
                    ok = c.getinfo(2097154) == 200  # CURLINFO_RESPONSE_CODE
                except Exception:
                    ok = False
                counts["ok" if ok else "other"] += 1
                free.append(c)

        wall, cpu = time.perf_counter(), time.process_time()
        await one(0)  # alone on the new connection: libcurl would open streams before SETTINGS
        await asyncio.gather(*(one(i) for i in range(1, work.n)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await acurl.close()
        return _result(work, counts["ok"], counts["other"], cpu, wall, "curl_cffi")

    return asyncio.run(main())


# ------------------------------------------------------------------------- pyreqwest (Rust)
def _pyreqwest_loop(work: Work, ca_file: str) -> dict[str, Any]:
    """pyreqwest (reqwest + hyper on tokio), HTTP/2 only, one client, ``IN_FLIGHT`` coroutines
    each sending its share of the requests in turn."""
    from pyreqwest.client import ClientBuilder

    async def main() -> dict[str, Any]:
        builder = ClientBuilder().add_root_certificate_pem(Path(ca_file).read_bytes()).http2(True).max_connections(1)
        counts = {"ok": 0, "other": 0}
        head_fixed = {k.decode(): v.decode() for k, v in work.headers}
        async with builder.build() as client:

            async def lane(start: int) -> None:
                for i in range(start, work.n, IN_FLIGHT):
                    headers = dict(head_fixed)
                    for k, v in work.extra_headers():
                        headers[k.decode()] = v.decode()
                    req = client.post(work.origin + work.path(i).decode()).headers(headers).body_bytes(work.body(i))
                    resp = await req.build().send()
                    await resp.bytes()
                    counts["ok" if resp.status == 200 else "other"] += 1

            wall, cpu = time.perf_counter(), time.process_time()
            await asyncio.gather(*(lane(j) for j in range(IN_FLIGHT)))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return _result(work, counts["ok"], counts["other"], cpu, wall, "pyreqwest")

    return asyncio.run(main())


# ------------------------------------------------------------------------------------- runner
def _notee(api: str, n: int, tree: str | None = None) -> dict[str, Any]:
    """Notee's ``deliver()`` on pages of 1,000 (bench/send_cpu.py); with ``tree``, the ``notee``
    package of another checkout (e.g. main before a transport change), for a before/after in one run."""
    if tree:
        sys.path.insert(0, tree)
        import notee

        if not notee.__file__ or not notee.__file__.startswith(tree):
            raise RuntimeError(f"notee was imported from {notee.__file__}, not from {tree}")
    return notee_side(n, 1000, api)


LOOPS: dict[str, Callable[[Work, str], dict[str, Any]]] = {
    "h2": lambda w, ca: _h2_loop("h2", w, ca),
    "jh2": lambda w, ca: _h2_loop("jh2", w, ca),
    "pycurl": _pycurl_loop,
    "curl_cffi": _curl_cffi_loop,
    "pyreqwest": _pyreqwest_loop,
}
MODULES = {"h2": "h2", "jh2": "jh2", "pycurl": "pycurl", "curl_cffi": "curl_cffi", "pyreqwest": "pyreqwest"}


def one_run(engine: str, api: str, url: str, ca_file: str, n: int, bearer: str) -> dict[str, Any]:
    """In a spawned child: one engine, one API, ``n`` requests."""
    if engine == "notee":
        return _notee(api, n)
    if engine.startswith("notee@"):
        return _notee(api, n, engine.removeprefix("notee@"))
    return LOOPS[engine](Work(api, url, n, bearer), ca_file)


def version(engine: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    if engine.startswith("notee@"):
        import subprocess

        tree = engine.removeprefix("notee@")
        rev = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        return f"checkout {rev.stdout.strip() or tree}"
    if engine == "notee":
        import subprocess

        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "notee"], capture_output=True, text=True).stdout
        return f"this checkout ({rev or 'no git'}{' + changes' if dirty.strip() else ''})"
    dist = {"curl_cffi": "curl_cffi"}.get(engine, engine)
    try:
        v = dist_version(dist)
    except PackageNotFoundError:
        return "not installed"
    if engine == "pycurl":
        import pycurl

        info = pycurl.version_info()
        v += f" (libcurl {info[1]}, nghttp2 {'yes' if info[4] & pycurl.VERSION_HTTP2 else 'NO'})"
    return v


def measure(
    emulator: Any, engines: list[str], apis: list[str], n: int, repeats: int
) -> dict[tuple[str, str], dict[str, Any]]:
    from notee.providers.apns import ApnsJwt

    fcm_bearer = emulator.access_token()
    c = apns_credentials().apns
    apns_bearer = ApnsJwt(c.private_key, c.key_id, c.team_id).bearer().decode()
    urls = {"fcm": emulator.url, "apns": emulator.apns_url or emulator.url}
    bearers = {"fcm": fcm_bearer, "apns": apns_bearer}
    available = []
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for e in engines:
        v = version(e)
        if v == "not installed":
            for api in apis:
                out[(e, api)] = {"missing": f"{MODULES.get(e, e)} is not installed"}
        else:
            available.append(e)
            for api in apis:
                out[(e, api)] = {"version": v, "runs": []}
    for r in range(repeats):
        order = available[r % len(available) :] + available[: r % len(available)] if available else []
        for api in apis:
            for e in order:
                try:
                    res = in_child(one_run, e, api, urls[api], emulator.ca_file, n, bearers[api])
                except Exception as exc:
                    out[(e, api)].setdefault("errors", []).append(f"{type(exc).__name__}: {str(exc)[:200]}")
                    print(f"  {e:10} {api:5} run {r + 1}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                out[(e, api)]["runs"].append(res)
                print(
                    f"  {e:10} {api:5} run {r + 1}: {1e6 * res['cpu_s'] / res['n']:7.1f} µs CPU/req, "
                    f"{res['n'] / res['wall_s']:7.0f} req/s wall",
                    file=sys.stderr,
                )
    for entry in out.values():
        runs = entry.get("runs")
        if runs:
            us = [1e6 * x["cpu_s"] / x["n"] for x in runs]
            entry["us_per_req"] = statistics.median(us)
            entry["us_min"], entry["us_max"] = min(us), max(us)
            entry["wall_per_s"] = statistics.median(x["n"] / x["wall_s"] for x in runs)
    return out


def table(results: dict[tuple[str, str], dict[str, Any]], engines: list[str], apis: list[str]) -> str:
    lines = [
        "| engine | version | " + " | ".join(f"µs CPU / {a.upper()} request (min–max)" for a in apis) + " |",
        "|---|---|" + "---|" * len(apis),
    ]
    for e in engines:
        cells = []
        ver = ""
        for a in apis:
            entry = results[(e, a)]
            ver = entry.get("version", ver)
            if "us_per_req" in entry:
                cells.append(f"{entry['us_per_req']:.1f} ({entry['us_min']:.1f}–{entry['us_max']:.1f})")
            else:
                cells.append(entry.get("missing") or "; ".join(entry.get("errors", ["no run"]))[:80])
        name = "Notee `deliver()`" if e == "notee" else e
        if e.startswith("notee@"):
            name = f"Notee `deliver()` of {e.removeprefix('notee@')}"
        lines.append(f"| {name} | {ver or 'not installed'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engines", description=__doc__)
    parser.add_argument("--n", type=int, default=10_000, help="requests per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", nargs="*", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--apis", nargs="*", default=list(APIS), choices=APIS)
    parser.add_argument(
        "--baseline", nargs="*", default=[], help="also measure deliver() of the notee package in these checkouts"
    )
    args = parser.parse_args(argv)
    args.engines = [f"notee@{Path(b).resolve()}" for b in args.baseline] + args.engines
    from bench import env

    env.use_bench_stores()
    started = time.time()
    with env.emulator() as emulator:
        results = measure(emulator, args.engines, args.apis, args.n, args.repeats)
    print(table(results, args.engines, args.apis))
    import os

    print(
        f"\n{args.n} requests per run, {IN_FLIGHT} in flight on one connection, {args.repeats} interleaved "
        f"repetitions, medians; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
        f"{time.time() - started:.0f} s"
    )
    return 0 if all("us_per_req" in v for v in results.values() if "missing" not in v) else 1


if __name__ == "__main__":
    sys.exit(main())
