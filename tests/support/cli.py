"""The `notee` CLI as its users run it: a subprocess configured by NOTEE_URL and NOTEE_ADMIN_TOKEN /
NOTEE_API_KEY alone, against a real `notee api` (``cli_api``, one per test module, started after the
emulator exported its URL, so the API's sends reach it). Registered as a plugin by tests/conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from notee.core.settings import Settings
from tests.support.processes import NoteeProcess, Processes

__all__ = ["admin_env", "cli_api", "notee", "tenant_env"]


def notee(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m notee ARGS`` with exactly ``env``; its exit code, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "notee", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def tenant_env(admin_env: dict[str, str], service: str, name: str = "CLI") -> dict[str, str]:
    """Create ``service`` and a key through the CLI; the environment of that service's key alone."""
    made = notee("admin", "service", "create", service, "--name", name, env=admin_env)
    assert made.returncode == 0, made.stderr
    key = notee("admin", "key", "create", service, env=admin_env).stdout.strip()
    return {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}


@pytest.fixture(scope="module")
def cli_api(emulator_process: object, migrated: None) -> Iterator[NoteeProcess]:
    with Processes() as procs:
        yield procs.api()


@pytest.fixture()
def admin_env(cli_api: NoteeProcess, settings: Settings) -> dict[str, str]:
    """The environment of the admin token (no service key), pointed at ``cli_api``."""
    env = {k: v for k, v in os.environ.items() if k != "NOTEE_API_KEY"}
    return env | {"NOTEE_URL": cli_api.url, "NOTEE_ADMIN_TOKEN": settings.admin_token.get_secret_value()}
