"""The one launcher of Notee subprocesses (``python -m notee <args>``) for tests.

Each process writes its output into the session's log folder (so the final secrets scan,
tests/support/logscan.py, covers it); the ``processes`` fixture stops every process a test
started, by pid, at teardown. Registered as a plugin by tests/conftest.py.
"""

from __future__ import annotations

import itertools
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from notee.core.settings import Settings
from notee.emulator.control import free_port
from tests.support.logscan import log_dir

__all__ = [
    "NoteeProcess",
    "Processes",
    "api_process",
    "free_port",
    "processes",
    "settings_from",
    "subprocess_env",
    "wait_http",
]

REPO = Path(__file__).resolve().parents[2]
_serial = itertools.count(1)
# xdist workers write into the same session folder, each counting from 1: their files keep apart.
_WORKER = f"-{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else ""


@dataclass
class NoteeProcess:
    """One ``python -m notee <args>`` subprocess; output goes to ``<session log dir>/<name>-<n>.log``
    (``<name>-<n>-<xdist worker>.log`` in an xdist worker)."""

    name: str
    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    port: int = 0  # the port it serves, for the servers started by ``Processes.api``
    scheme: str = "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> NoteeProcess:
        self.log_path = log_dir() / f"{self.name}-{next(_serial)}{_WORKER}.log"
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "notee", *self.args],
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The exit code; raises subprocess.TimeoutExpired if still running after ``timeout`` s."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def output(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-n:])


@dataclass
class Processes:
    """Every subprocess a test started; all are stopped at teardown, by pid."""

    started: list[NoteeProcess] = field(default_factory=list)

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> NoteeProcess:
        p = NoteeProcess(name, args, env if env is not None else subprocess_env()).start()
        self.started.append(p)
        return p

    def worker(self, service: str, *, lanes: int = 2, name: str = "worker", **env: str) -> NoteeProcess:
        """A ``notee worker`` scoped to one test tenant, with extra environment ``env``."""
        return self.start(name, ["worker", "--lanes", str(lanes), "--service", service], subprocess_env(**env))

    def api(
        self, *args: str, name: str = "api", scheme: str = "http", verify: ssl.SSLContext | bool = True, **env: str
    ) -> NoteeProcess:
        """``notee api`` on a free port (``.port``, ``.url``), returned once ``/healthz`` answers."""
        port = free_port()
        p = self.start(name, ["api", "--port", str(port), *args], subprocess_env(**env))
        p.port, p.scheme = port, scheme
        wait_http(f"{p.url}/healthz", proc=p, verify=verify)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.started):
            p.stop(timeout=20)

    def __enter__(self) -> Processes:  # for module-scoped fixtures: ``with Processes() as procs:``
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


@pytest.fixture()
def processes() -> Iterator[Processes]:
    procs = Processes()
    try:
        yield procs
    finally:
        procs.stop_all()


@pytest.fixture(scope="module")
def api_process(emulator_process: object, migrated: None) -> Iterator[NoteeProcess]:
    """One ``notee api`` for the tests of a module, started once the emulator exported its URL and
    CA (so the API's senders reach it) and the stores are migrated."""
    with Processes() as procs:
        yield procs.api()


def subprocess_env(**overrides: str) -> dict[str, str]:
    """The test environment (test database, keyspaces, admin token, emulator) plus overrides."""
    env = dict(os.environ)
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"})
    env.update(overrides)
    return env


def settings_from(env: dict[str, str]) -> Settings:
    """Settings as a process started with ``env`` would read them."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        return Settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def wait_http(
    url: str, timeout: float = 60, proc: NoteeProcess | None = None, verify: ssl.SSLContext | bool = True
) -> None:
    """Until ``url`` answers below 500; fails early when ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            if httpx.get(url, timeout=2, verify=verify).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout} s" + (f"\n{proc.tail()}" if proc else ""))


def read_all(sock: socket.socket) -> bytes:
    """Everything a raw client socket receives until the server closes it (or resets it, or the
    socket's own timeout passes): a test's view of one HTTP/1.1 exchange on the wire."""
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        out += data
    return out
