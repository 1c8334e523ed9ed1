"""Real `notee api` processes for edge tests: start one on a free port, wait until it answers, stop it;
and a raw-socket upload client that streams a large body without holding it in memory.

    with api_process(env_extra={...}) as api:       # api.port, api.pid, api.url
        status = upload(api.port, "/v1/users/x/devices", 50 * MIB, chunked=False)
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ApiProcess:
    proc: subprocess.Popen[bytes]
    port: int
    scheme: str = "http"
    admin_port: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"


def wait_ready(url: str, proc: subprocess.Popen[bytes], *, verify: ssl.SSLContext | bool = True,
               timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"notee api exited with {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=2, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"notee api at {url} not ready in {timeout}s")


@contextmanager
def api_process(*args: str, env_extra: dict[str, str] | None = None, log_path: Path | None = None,
                scheme: str = "http", verify: ssl.SSLContext | bool = True,
                admin_port: int | None = None) -> Iterator[ApiProcess]:
    """`notee api --port <free>` with the test environment (plus ``env_extra``); stopped with SIGTERM."""
    port = free_port()
    env = os.environ | (env_extra or {})
    with ExitStack() as files:
        out = files.enter_context(open(log_path, "wb")) if log_path is not None else subprocess.DEVNULL
        proc = subprocess.Popen([sys.executable, "-m", "notee", "api", "--port", str(port), *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        api = ApiProcess(proc, port, scheme, admin_port)
        try:
            wait_ready(api.url, proc, verify=verify)
            yield api
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def upload(port: int, path: str, size: int, *, chunked: bool, headers: dict[str, str] | None = None,
           chunk: int = 64 * 1024, timeout: float = 120.0) -> int:
    """POST ``size`` bytes of JSON-looking body, streamed; stop sending as soon as the server answers
    (a real client does the same). Returns the status code of the answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        # A valid JSON document that is costly to parse: one long array of empty objects, "[{},{},...,{}]".
        size = 4 + 3 * ((size - 4) // 3)
        head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        filler = b"{}," * (chunk // 3)
        sent = 0
        while sent < size:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered before the body was complete
            if sent == 0:
                part = b"["
            elif size - sent == 3:
                part = b"{}]"
            else:
                part = filler[: min(len(filler), size - sent - 3)]
            try:
                sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n" if chunked else part)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(part)
        else:
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            got = sock.recv(4096)
            if not got:
                raise ConnectionError(f"connection closed without an answer after {sent} bytes")
            data += got
        return int(data.split(b" ", 2)[1])
    finally:
        sock.close()
