"""Secrets never appear in logs: capture every log record of the test session to a file, and scan
it (plus the logs of the Notee subprocesses the tests started) for credential material at the end.

Loaded for the whole suite from ``tests/conftest.py`` (``pytest_plugins``). How it works:

- at start-up a root ``logging`` handler writes every record (Notee's from DEBUG, others from INFO,
  SQLAlchemy's statement log off) to ``.run/test-logs/<run>/session.log`` (an xdist worker's to
  ``session-<worker>.log`` in the same folder); subprocesses started by the tests write their
  stderr into the same folder (``log_dir()``);
- every API key the session generates is remembered: ``notee.core.crypto.generate_api_key`` is wrapped,
  and tests that get keys from a subprocess API call ``remember_secret()``; the admin token and the
  credentials key come from the environment; an xdist worker hands the keys it saw to the controller
  when it ends (``workeroutput``);
- at session end the folder is scanned for the known secrets (literally) and for credential
  patterns (full API keys, PEM private keys, an FCM service account's ``private_key``, JWTs).
  A finding turns the session red (exit status 1) and prints file, line number and kind, never the
  secret itself.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_KNOWN: set[str] = set()
_STATE: dict[str, object] = {}

# Credential shapes. API key: notee.core.crypto (nk_<16 hex>_<secret>). JWT: three base64url parts, the
# first two JSON objects (start with "eyJ" = '{"'). PEM private keys of any algorithm. A service
# account JSON's "private_key" field with a value.
PATTERNS: dict[str, re.Pattern[str]] = {
    "api_key": re.compile(r"nk_[0-9a-f]{16}_[A-Za-z0-9_-]{20,}"),
    "jwt": re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}"),
    "pem_private_key": re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----"),
    "service_account_private_key": re.compile(r"""["']?private_key["']?\s*[:=]\s*["'][^"']{20,}"""),
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    kind: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}"


def remember_secret(secret: str | None) -> None:
    """Scan the session's logs for this literal too (e.g. an API key a subprocess API returned)."""
    if secret and len(secret) >= 8:
        _KNOWN.add(secret)
        if secret.startswith("nk_") and secret.count("_") >= 2:
            _KNOWN.add(secret.split("_", 2)[2])  # the secret part alone


def log_dir() -> Path:
    """Where subprocesses started by tests should write their logs so the final scan covers them."""
    path = _STATE.get("dir")
    if path is None:  # used outside a pytest session (e.g. imported by a tool)
        path = _REPO / ".run" / "test-logs" / "adhoc"
        path.mkdir(parents=True, exist_ok=True)
    return Path(path)  # type: ignore[arg-type]


def session_log() -> Path:
    """This test process's own log file (``session.log``, or an xdist worker's ``session-<worker>.log``)."""
    return Path(_STATE.get("log") or log_dir() / "session.log")  # type: ignore[arg-type]


def scan_text(text: str, known: set[str] | frozenset[str] = frozenset(), path: str = "<text>") -> list[Finding]:
    """Pure: every line of ``text`` holding a known secret or a credential pattern."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in PATTERNS.items():
            if pattern.search(line):
                found.append(Finding(path, number, kind))
        if any(secret in line for secret in known):
            found.append(Finding(path, number, "known_secret"))
    return found


def scan_dir(folder: Path, known: set[str]) -> list[Finding]:
    found: list[Finding] = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            found += scan_text(path.read_text(errors="replace"), known, str(path.relative_to(_REPO)))
    return found


def _env_secrets() -> None:
    for name in ("NOTEE_ADMIN_TOKEN", "NOTEE_CREDENTIALS_KEY"):
        remember_secret(os.environ.get(name))


def _wrap_key_generation() -> None:
    from notee.core import crypto

    original = crypto.generate_api_key
    if getattr(original, "_remembered", False):
        return

    def generate_api_key(kind: str = "server"):
        new = original(kind)
        remember_secret(new.api_key)
        return new

    generate_api_key._remembered = True  # type: ignore[attr-defined]
    crypto.generate_api_key = generate_api_key


def pytest_configure(config: pytest.Config) -> None:
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker and os.environ.get("NOTEE_TEST_LOG_DIR"):
        # An xdist worker: its records go to the controller's folder (``session-<worker>.log``),
        # the secrets it makes go back to the controller at its end, and the controller scans.
        folder = Path(os.environ["NOTEE_TEST_LOG_DIR"])
        name = f"session-{worker}.log"
    else:
        folder = _REPO / ".run" / "test-logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        folder.mkdir(parents=True, exist_ok=True)
        os.environ["NOTEE_TEST_LOG_DIR"] = str(folder)  # inherited by the xdist workers started next
        name = "session.log"
        _STATE["scans"] = True
    _STATE["dir"], _STATE["log"] = folder, folder / name
    handler = logging.FileHandler(folder / name, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("notee").setLevel(logging.DEBUG)
    # SQLAlchemy logs every statement with its parameters at INFO when its logger is enabled.
    logging.getLogger("sqlalchemy").setLevel(logging.WARNING)
    _STATE["handler"] = handler
    _env_secrets()
    _wrap_key_generation()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """xdist, on the controller: the secrets a worker made, for the scan of every log."""
    for secret in getattr(node, "workeroutput", {}).get("notee_known_secrets", []):
        remember_secret(secret)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    handler = _STATE.get("handler")
    folder = _STATE.get("dir")
    if handler is None or folder is None:
        return
    handler.flush()  # type: ignore[union-attr]
    if not _STATE.get("scans"):  # an xdist worker: hand its secrets to the controller
        session.config.workeroutput["notee_known_secrets"] = sorted(_KNOWN)  # type: ignore[attr-defined]
        return
    _env_secrets()
    findings = scan_dir(Path(folder), _KNOWN)  # type: ignore[arg-type]
    _STATE["findings"] = findings
    if findings and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    folder = _STATE.get("dir")
    if folder is None or not _STATE.get("scans"):
        return
    findings: list[Finding] = _STATE.get("findings", [])  # type: ignore[assignment]
    size = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())  # type: ignore[arg-type]
    if findings:
        terminalreporter.section("SECRETS IN LOGS", red=True)
        for finding in findings[:50]:
            terminalreporter.write_line(str(finding))
        terminalreporter.write_line(f"{len(findings)} finding(s): credential material was logged (session FAILED)")
    else:
        terminalreporter.write_line(
            f"log scan: {size} bytes of session logs in {Path(folder).relative_to(_REPO)} "  # type: ignore[arg-type]
            f"scanned for {len(_KNOWN)} known secrets and {len(PATTERNS)} credential patterns: clean"
        )
