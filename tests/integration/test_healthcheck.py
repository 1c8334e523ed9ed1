"""`notee healthcheck api|worker|scheduler|webhooks|emulator`, the container healthchecks of compose.yaml,
against real processes: healthy while they work, unhealthy once they hang (SIGSTOP) or are gone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from notee.core.settings import Settings
from notee.emulator.tls import ensure_tls
from notee.usecases import migrate
from tests.support.stores import store_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "notee", "healthcheck", *args],
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _wait_for(args: tuple[str, ...], env: dict[str, str], returncode: int, *, within: float = 120) -> str:
    """Poll the healthcheck until it answers ``returncode`` (a condition, not a timing assertion:
    the deadline only stops a test that would never pass)."""
    deadline = time.monotonic() + within
    while True:
        done = _healthcheck(*args, env=env)
        if done.returncode == returncode:
            return done.stdout + done.stderr
        assert time.monotonic() < deadline, f"healthcheck {args} stayed {done.returncode}: {done.stderr}"
        time.sleep(0.5)


@pytest.fixture()
def own_stores(fresh_stores: Settings) -> dict[str, str]:
    """Migrated stores of the test's own, for a process that serves every tenant (a worker without
    --service, the webhook dispatcher, a scheduler): it acts on no other test's rows."""
    migrate.migrate_all(fresh_stores)
    return store_env(fresh_stores)


@contextmanager
def _process(command: str, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "notee", command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_worker_healthcheck_follows_its_event_loop(tmp_path: Path, own_stores) -> None:
    env = own_stores | {"NOTEE_HEARTBEAT_FILE": str(tmp_path / "heartbeat")}
    assert _healthcheck("worker", env=env).returncode == 1  # nothing has beaten yet
    with _process("worker", env) as proc:
        out = _wait_for(("worker",), env, 0)
        assert out.startswith("healthy: last heartbeat")
        proc.send_signal(signal.SIGSTOP)  # hung: alive but doing nothing
        out = _wait_for(("worker", "--max-age", "10"), env, 1)
        assert "unhealthy: last heartbeat" in out
        proc.send_signal(signal.SIGCONT)  # its loop beats every few seconds again
        _wait_for(("worker", "--max-age", "10"), env, 0)


def test_webhook_dispatcher_healthcheck_follows_its_event_loop(tmp_path: Path, own_stores) -> None:
    env = own_stores | {"NOTEE_HEARTBEAT_FILE": str(tmp_path / "heartbeat")}
    assert _healthcheck("webhooks", env=env).returncode == 1  # nothing has beaten yet
    with _process("webhooks", env) as proc:
        assert _wait_for(("webhooks",), env, 0).startswith("healthy: last heartbeat")
        proc.send_signal(signal.SIGSTOP)
        assert "unhealthy: last heartbeat" in _wait_for(("webhooks", "--max-age", "10"), env, 1)
        proc.send_signal(signal.SIGCONT)
        _wait_for(("webhooks", "--max-age", "10"), env, 0)


def test_scheduler_beats_after_every_minute_tick(tmp_path: Path, own_stores) -> None:
    beat = tmp_path / "heartbeat"
    env = own_stores | {"NOTEE_HEARTBEAT_FILE": str(beat)}
    with _process("scheduler", env):
        out = _wait_for(("scheduler",), env, 0)  # the catch-up tick at start-up
        assert out.startswith("healthy: last heartbeat")
        first = beat.stat().st_mtime
        deadline = time.monotonic() + 180
        while beat.stat().st_mtime == first:  # the tick at the next minute beats again
            assert time.monotonic() < deadline, "no second tick within three minutes"
            time.sleep(0.2)
    # Stopped: no tick any more, so the heartbeat ages past a short limit.
    out = _wait_for(("scheduler", "--max-age", "2"), env, 1)
    assert "unhealthy: last heartbeat" in out


def test_heartbeat_healthcheck_needs_the_setting() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NOTEE_HEARTBEAT_FILE"}
    done = _healthcheck("worker", env=env)
    assert done.returncode == 1 and "NOTEE_HEARTBEAT_FILE is not set" in done.stderr
    assert _healthcheck("cron", env=env).returncode == 2


def test_api_healthcheck_answers_for_a_running_api_only(migrated) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    proc = subprocess.Popen(
        [sys.executable, "-m", "notee", "api", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        out = _wait_for(("api", "--url", url), dict(os.environ), 0)
        assert out.startswith(f"healthy: {url} answered 200")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    gone = _healthcheck("api", "--url", url)
    assert gone.returncode == 1 and "unhealthy:" in gone.stderr
    # The default URL is NOTEE_API_PORT on loopback.
    other = free_port()
    default = _healthcheck("api", env=os.environ | {"NOTEE_API_PORT": str(other)})
    assert default.returncode == 1 and f"http://127.0.0.1:{other}/healthz" in default.stderr


def test_emulator_healthcheck_passes_once_it_serves_with_the_ca_it_wrote(tmp_path: Path) -> None:
    """compose.yaml starts the processes that read the emulator's CA once this passes: the CA file is
    written and the emulator's certificate verifies against it."""
    port, state = free_port(), tmp_path / "emulator"
    env = os.environ | {"NOTEE_EMULATOR_URL": f"https://127.0.0.1:{port}", "NOTEE_EMULATOR_CA_FILE": f"{state}/ca.crt"}
    before = _healthcheck("emulator", env=env)
    assert before.returncode == 1 and "FileNotFoundError" in before.stderr  # no CA written yet
    proc = subprocess.Popen(
        [sys.executable, "-m", "notee", "emulator", "--port", str(port), "--state-dir", str(state)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        out = _wait_for(("emulator",), env, 0)
        assert out.startswith(f"healthy: https://127.0.0.1:{port}/_emu/stats answered 200"), out
        strange = ensure_tls(tmp_path / "another-ca").ca_cert  # a CA that did not sign its certificate
        other = _healthcheck("emulator", env=env | {"NOTEE_EMULATOR_CA_FILE": str(strange)})
        assert other.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in other.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    unset = {k: v for k, v in env.items() if k != "NOTEE_EMULATOR_URL"}
    assert _healthcheck("emulator", env=unset).returncode == 1
