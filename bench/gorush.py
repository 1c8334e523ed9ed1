"""gorush_cpu_ratio / gorush_cpu_ratio_apns: CPU per message of a widely used Go push server
(gorush, github.com/appleboy/gorush) against Notee's sending path, measured side by side in one
run on the same emulator (issue 19 item 6: "faster than a Go push server per message").

gorush is built from the Go module proxy (``github.com/appleboy/gorush@v1.22.0``, into ``.run/bench-tools``;
never committed) and configured for production use: FCM with a service-account file, APNs with a .p8 key, ``core.sync`` so a request returns when its pushes are
answered, access and error logs at ``error`` (no line per push, like Notee). It can only talk to
Google's and Apple's host names, so it reaches the emulator through ``bench.connect_proxy`` (its own
``core.http_proxy`` setting), TLS end to end: the emulator's certificate holds those names
(``notee.emulator.control.PROVIDER_HOSTS``) and gorush trusts its CA through ``SSL_CERT_FILE``.

* gorush's side: ``n`` messages with the bodies Notee sends in bench/send_cpu.py (same title, body,
  data, TTL and priority; the same 163-character FCM tokens, 64-hex APNs tokens), posted to its
  ``/api/push`` as notifications of 500 tokens (FCM's multicast limit, which gorush enforces), 100
  notifications per request (its default ``max_notification``). CPU is the gorush process's user +
  system time (psutil) over the requests, so it includes parsing its API's JSON; Notee's ``deliver()``
  starts from messages already in memory (the whole worker's CPU per push, with its Cassandra read,
  is ``fanout_ratio``'s side figure ``worker_cpu_us_per_push``). The emulator must count ``n`` more
  deliveries, or the run fails.
* Notee's side: ``bench.workload.notee_side`` (``deliver()`` in pages of 1,000, in a fresh process).

Sides alternate ``repeats`` times; medians. The value is gorush's µs per message over Notee's; the
goal is the issue's: Notee at 40 µs when gorush measured 57.5 (FCM) and 42.1 (APNs) µs on this
machine, i.e. at least 57.5 / 40 and 42.1 / 40 times cheaper per message, whatever the machine's
speed on the day.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil

from bench.connect_proxy import ConnectProxy
from bench.env import free_port, stop_process
from bench.report import Measure, figure, missing
from bench.workload import APNS_TOPIC, apns_credentials, in_child, notee_side
from notee.emulator.peer import PeerRules

MODULE = "github.com/appleboy/gorush"
VERSION = "v1.22.0"
ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / ".run" / "bench-tools" / f"gorush-{VERSION}"
PER_NOTIFICATION = 500  # FCM's multicast limit; gorush refuses more tokens per notification
PER_REQUEST = 100  # gorush's default core.max_notification
TITLE, BODY = "Bench title", "A benchmark push body of realistic length."
DATA = {"kind": "bench", "ref": "12345"}
GO_FIRST_BURST = 100  # x/net/http2's initialMaxConcurrentStreams: streams it opens before the server's SETTINGS


def available() -> bool:
    """gorush is built, or can be: a Go toolchain is on PATH."""
    return (TOOLS / "gorush").exists() or shutil.which("go") is not None


def build(timeout_s: float = 900) -> Path:
    """The gorush binary, built once from the Go module proxy (RuntimeError: why it cannot be).
    ``go mod download`` of the tagged version, then ``go build`` in the module's own directory, so
    its own go.sum checks every dependency (``go install m@v`` also asks the proxy for the module's
    version list, which the registry here refuses). One build at a time (a file lock): `make test`
    starts it in the background (``python -m bench.gorush``) and the smoke test that needs the binary
    waits for that build instead of starting its own."""
    TOOLS.mkdir(parents=True, exist_ok=True)
    with (TOOLS / ".build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(timeout_s)


def _build(timeout_s: float) -> Path:
    binary = TOOLS / "gorush"
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("no Go toolchain on this machine (go not on PATH)")
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": ""}
    got = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], env=env, capture_output=True, text=True, timeout=300
    )
    if got.returncode != 0:
        raise RuntimeError(f"go mod download {MODULE}@{VERSION} failed: {(got.stdout + got.stderr)[-1500:]}")
    source = json.loads(got.stdout)["Dir"]
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."], cwd=source, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    if built.returncode != 0 or not binary.exists():
        raise RuntimeError(f"go build of {MODULE}@{VERSION} failed: {built.stderr[-1500:]}")
    return binary


def _fcm_tokens(n: int, offset: int) -> list[str]:
    from bench.seed import fcm_like_token

    return [fcm_like_token(offset + i) for i in range(n)]


def _apns_tokens(n: int, offset: int) -> list[str]:
    return [f"{offset + i:064x}" for i in range(n)]


def _notifications(api: str, tokens: list[str]) -> list[dict[str, Any]]:
    common: dict[str, Any] = {"title": TITLE, "message": BODY, "data": DATA, "priority": "high"}
    out = []
    for i in range(0, len(tokens), PER_NOTIFICATION):
        chunk = tokens[i : i + PER_NOTIFICATION]
        if api == "apns":
            # gorush's expiration is an absolute time, like apns-expiration: Notee's TTL of 3600 s
            expiration = int(time.time()) + 3600
            out.append({**common, "platform": 1, "tokens": chunk, "topic": APNS_TOPIC, "expiration": expiration})
        else:
            out.append({**common, "platform": 2, "tokens": chunk, "time_to_live": 3600})
    return out


class Gorush:
    """One gorush process pointed at the emulator through the proxy."""

    def __init__(self, binary: Path, emulator, proxy: ConnectProxy) -> None:
        from bench.tenant import bench_service_account

        self.dir = Path(tempfile.mkdtemp(prefix="notee-bench-gorush-"))
        account = bench_service_account()
        (self.dir / "fcm.json").write_text(json.dumps(account))
        apns = apns_credentials().apns
        assert apns is not None
        (self.dir / "apns.p8").write_text(apns.private_key)
        self.port = free_port()
        config = {
            "core": {
                "address": "127.0.0.1",
                "port": str(self.port),
                "sync": True,
                "mode": "release",
                "http_proxy": proxy.url,
                "max_notification": PER_REQUEST,
            },
            "android": {"enabled": True, "key_path": str(self.dir / "fcm.json"), "max_retry": 0},
            "ios": {
                "enabled": True,
                "key_path": str(self.dir / "apns.p8"),
                "key_type": "p8",
                "key_id": apns.key_id,
                "team_id": apns.team_id,
                "production": not apns.sandbox,
                "max_retry": 0,
            },
            "log": {"format": "string", "access_level": "error", "error_level": "error"},
            "stat": {"engine": "memory"},
        }
        # YAML is a superset of JSON: gorush's config loader (viper) reads this file as YAML
        (self.dir / "config.yml").write_text(json.dumps(config))
        self.log = (self.dir / "gorush.log").open("wb")
        env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
        env["SSL_CERT_FILE"] = emulator.ca_file
        self.proc = subprocess.Popen(
            [str(binary), "-c", str(self.dir / "config.yml")],
            cwd=self.dir,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=600)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gorush exited: {(self.dir / 'gorush.log').read_text()[-1500:]}")
            try:
                if self.http.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("gorush did not answer within 30 s")
            time.sleep(0.1)
        self.ps = psutil.Process(self.proc.pid)

    def push(self, api: str, tokens: list[str]) -> None:
        """Every token's push answered (sync mode), or AssertionError with gorush's logs."""
        notes = _notifications(api, tokens)
        for i in range(0, len(notes), PER_REQUEST):
            r = self.http.post("/api/push", json={"notifications": notes[i : i + PER_REQUEST]})
            body = r.json()
            if r.status_code != 200 or body.get("logs"):
                raise AssertionError(f"gorush answered {r.status_code}: {str(body)[:800]}")

    def cpu_s(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def close(self) -> None:
        self.http.close()
        stop_process(self.proc, 10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _gorush_run(server: Gorush, emulator, api: str, n: int, offset: int) -> dict[str, Any]:
    tokens = _fcm_tokens(n, offset) if api == "fcm" else _apns_tokens(n, offset)
    before = emulator.delivered()
    cpu, wall = server.cpu_s(), time.perf_counter()
    server.push(api, tokens)
    cpu, wall = server.cpu_s() - cpu, time.perf_counter() - wall
    got = emulator.delivered() - before
    if got != n:
        raise AssertionError(f"gorush: the emulator counted {got} deliveries of {n}")
    return {"n": n, "cpu_s": cpu, "wall_s": wall}


def _routes(emulator) -> dict[tuple[str, int], tuple[str, int]]:
    fcm = urlsplit(emulator.url)
    apns = urlsplit(emulator.apns_url or emulator.url)
    to_fcm = ("127.0.0.1", int(fcm.port or 443))
    to_apns = ("127.0.0.1", int(apns.port or 443))
    return {
        ("fcm.googleapis.com", 443): to_fcm,
        ("oauth2.googleapis.com", 443): to_fcm,
        ("api.sandbox.push.apple.com", 443): to_apns,
        ("api.push.apple.com", 443): to_apns,
    }


def run(emulator, *, n: int, repeats: int = 3, page: int = 1000) -> dict[str, dict[str, Any]]:
    """Both figures (FCM and APNs); each missing with the reason when gorush cannot run here."""
    names = ("gorush_cpu_ratio", "gorush_cpu_ratio_apns")
    try:
        binary = build()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return {name: missing(f"gorush unavailable: {exc}") for name in names}
    figures: dict[str, dict[str, Any]] = {}
    with ConnectProxy(_routes(emulator)).running() as proxy:
        server = Gorush(binary, emulator, proxy)
        try:
            offset = 10_000_000
            for api, name in (("fcm", names[0]), ("apns", names[1])):
                if api == "apns":
                    # Go's HTTP/2 client opens up to 100 streams on a new connection before it has read
                    # the server's first SETTINGS; the realistic APNs port (one stream until a valid
                    # request, like APNs: docs/PROVIDERS.md) closes such a connection with GOAWAY
                    # PROTOCOL_ERROR. For both sides of this figure its first SETTINGS allows that
                    # burst; Notee opens no stream before it anyway.
                    emulator.realistic(apns_first_streams=GO_FIRST_BURST)
                tunnels = proxy.tunnels
                server.push(api, (_fcm_tokens if api == "fcm" else _apns_tokens)(PER_NOTIFICATION, offset))  # warm
                offset += PER_NOTIFICATION
                warm_tunnels = proxy.tunnels - tunnels  # its connections, opened by the warm-up
                runs: dict[str, list[dict[str, Any]]] = {"gorush": [], "notee": []}
                for _ in range(repeats):
                    runs["gorush"].append(_gorush_run(server, emulator, api, n, offset))
                    offset += n
                    runs["notee"].append(in_child(notee_side, n, page, api))
                g_us = statistics.median(1e6 * r["cpu_s"] / r["n"] for r in runs["gorush"])
                n_us = statistics.median(1e6 * r["cpu_s"] / r["n"] for r in runs["notee"])
                figures[name] = figure(
                    name,
                    Measure(f"gorush {VERSION} {api.upper()}: CPU per message", g_us, "µs"),
                    Measure(f"notee deliver() {api.upper()}: CPU per message", n_us, "µs"),
                    {"messages": n, "repeats": repeats, "page": page, "per_notification": PER_NOTIFICATION},
                    extra={
                        "gorush_wall_per_s": statistics.median(r["n"] / r["wall_s"] for r in runs["gorush"]),
                        "notee_wall_per_s": statistics.median(r["n"] / r["wall_s"] for r in runs["notee"]),
                        "gorush_rss_mib": server.ps.memory_info().rss / 2**20,
                        "proxy_tunnels": warm_tunnels,
                        # connections gorush opened during the measured runs (a steady state: 0)
                        "proxy_tunnels_measured": proxy.tunnels - tunnels - warm_tunnels,
                    },
                )
        finally:
            server.close()
            emulator.realistic(apns_first_streams=PeerRules().first_streams)
    return figures


def add_worker_side(figures: dict[str, dict[str, Any]]) -> None:
    """The whole ``notee worker`` against gorush, when ``fanout_ratio`` ran in the same bench: its CPU
    per push (claim, Cassandra page read, sends, checkpoints; ``worker_cpu_us_per_push``) beside
    gorush's whole process, as side figures of the gorush figures (issue 19: the whole worker at 50 µs
    where gorush took 57.5 / 42.1 µs)."""
    fan = figures.get("fanout_ratio", {}).get("extra")
    if not fan:
        return
    for name, key in (
        ("gorush_cpu_ratio", "worker_cpu_us_per_push"),
        ("gorush_cpu_ratio_apns", "worker_cpu_us_per_push_apns"),
    ):
        fig = figures.get(name)
        if fig is None or fig.get("missing") or not fan.get(key):
            continue
        worker_us = float(fan[key])
        fig.setdefault("extra", {})["notee_worker_us_per_push"] = worker_us
        fig["extra"]["gorush_per_notee_worker"] = round(fig["numerator"]["value"] / worker_us, 4)


if __name__ == "__main__":
    # `python -m bench.gorush`: build the binary now (`make bench-tools`; `make test` runs it in the
    # background so the smoke test finds it built). Without Go there is nothing to build: not an error.
    if shutil.which("go") is None and not (TOOLS / "gorush").exists():
        print("gorush: no Go toolchain (go not on PATH): the gorush comparison will be skipped")
    else:
        started = time.monotonic()
        print(f"gorush: {build()} ({time.monotonic() - started:.0f} s)")
