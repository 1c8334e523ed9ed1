"""README.md's quickstart, run as written, so it cannot rot: its bash block goes through `bash -e`
against a real `notee api`, a real worker and the emulator, with the variables `make run` writes to
.run/env. Also `workers/run.sh` (what `make run` runs once the stores are up): it starts the emulator
with the other processes, prints the next steps and writes .run/env (mode 600).

The rules of this topic that need no server are in tests/unit/test_quickstart.py."""

from __future__ import annotations

import os
import secrets
import signal
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from notee.core.settings import Settings
from notee.usecases import migrate
from tests.support.emulator import deliveries_per_token
from tests.support.processes import Processes, free_port
from tests.support.repo_files import quickstart_block
from tests.support.stores import store_env

ROOT = Path(__file__).resolve().parents[2]

STANDIN = {"NOTEE_EMULATOR_STANDIN": "true"}  # what `make run` sets for its embedded emulator


@pytest.fixture(scope="module")
def api(emulator_process, migrated):
    with Processes() as procs:
        yield procs.api(**STANDIN)


def test_the_readme_quickstart_runs_as_written(processes, api, settings, emulator, tmp_path: Path):
    service = "Q" + secrets.token_hex(5).upper()  # a fresh service per run; the rest is the README's text
    script = quickstart_block().replace("DEMO", service)
    run_dir = tmp_path / ".run"
    run_dir.mkdir()
    (run_dir / "env").write_text(
        f"export NOTEE_URL={api.url}\n"
        f"export NOTEE_ADMIN_TOKEN={settings.admin_token.get_secret_value()}\n"
        f"export NOTEE_EMULATOR_URL={os.environ['NOTEE_EMULATOR_URL']} "
        f"NOTEE_EMULATOR_CA_FILE={os.environ['NOTEE_EMULATOR_CA_FILE']}\n"
        f'export PATH="{Path(sys.executable).parent}:$PATH"\n'
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("NOTEE_")
        or k in ("NOTEE_MYSQL_URL", "NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION", "NOTEE_CASSANDRA_KEYSPACE_NUMBERING")
    }
    worker = processes.worker(service, **STANDIN)  # `make run` runs one for every service
    try:
        out = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        worker.stop(timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"state": "done"' in out.stdout and '"sent": 1' in out.stdout, out.stdout
    assert '"title": "Hi Alice"' in out.stdout.replace('":"', '": "'), out.stdout  # the emulator's copy
    # the topic publish, then the publish to the filter `plan = pro` (alice's tag): one push each
    assert out.stdout.count('"state": "done"') == 2, out.stdout
    assert deliveries_per_token(emulator, ["demo-device-token-1"], api="fcm") == {"demo-device-token-1": 2}


def test_make_run_starts_the_emulator_prints_next_steps_and_writes_the_env(fresh_stores: Settings, tmp_path: Path):
    # Stores of its own: the worker, scheduler and webhook dispatcher `make run` starts serve every
    # tenant, and on the shared stores they would take other tests' import chunks, minutes and deliveries.
    migrate.migrate_all(fresh_stores)
    api_port, emu_port = free_port(), free_port()
    env = {
        k: v
        for k, v in store_env(fresh_stores).items()
        if k not in ("NOTEE_EMULATOR_URL", "NOTEE_EMULATOR_CA_FILE", "NOTEE_LIVE_DELIVERY")
    }
    env |= {
        "NOTEE_API_PORT": str(api_port),
        "NOTEE_EMULATOR_PORT": str(emu_port),
        "NOTEE_RUN_DIR": str(tmp_path / "run"),
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
    }
    log = open(tmp_path / "run.log", "wb")  # noqa: SIM115 - closed in the finally below, after the process group stops
    proc = subprocess.Popen(
        ["bash", str(ROOT / "workers" / "run.sh")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        env_file = tmp_path / "run" / "env"
        deadline = time.monotonic() + 90
        healthy = emulating = False
        while time.monotonic() < deadline and not (healthy and emulating):
            assert proc.poll() is None, (tmp_path / "run.log").read_text()
            try:
                healthy = httpx.get(f"http://127.0.0.1:{api_port}/healthz", timeout=2).status_code == 200
                ca = ssl.create_default_context(cafile=str(tmp_path / "run" / "emulator" / "ca.crt"))
                emulating = (
                    httpx.get(f"https://127.0.0.1:{emu_port}/_emu/stats", verify=ca, timeout=2).status_code == 200
                )
            except (httpx.HTTPError, FileNotFoundError):  # FileNotFoundError: the CA is not written yet
                time.sleep(0.3)
        assert healthy and emulating, (tmp_path / "run.log").read_text()
        banner = (tmp_path / "run.log").read_text()
        assert f"API           http://127.0.0.1:{api_port}" in banner and "/docs" in banner
        assert f"console       http://127.0.0.1:{api_port}/console" in banner
        signin = httpx.get(f"http://127.0.0.1:{api_port}/console", follow_redirects=True, timeout=10)
        assert signin.status_code == 200 and "/console/sign-in" in str(signin.url), signin.url
        assert f"every push goes to the embedded emulator at https://127.0.0.1:{emu_port}" in banner
        assert "admin token" in banner and "Quickstart" in banner
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        written = env_file.read_text()
        assert f"NOTEE_URL=http://127.0.0.1:{api_port}" in written and "NOTEE_ADMIN_TOKEN=" in written
        assert f"NOTEE_EMULATOR_URL=https://127.0.0.1:{emu_port}" in written
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
