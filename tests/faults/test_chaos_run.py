"""The chaos run as a test (issue 31): ``python -m chaos`` for a short seeded run, every fault kind at
least once, checked by its independent ledger (chaos/ledger.py). The run is a subprocess with its
own cluster use, MariaDB, emulator and Notee processes; its report and logs go into the session's
log folder (so the secrets scan covers them), and a failure prints the report's invariants table."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.logscan import log_dir

# Not `faults` (so not in `make test-faults`/CI) while the run still finds an open bug: a bulk
# subscribe retried after a 503 during a Cassandra node loss leaves duplicate slot rows
# (docs/RELIABILITY.md, "Found by the chaos run"). Run it with `pytest -m chaos tests/faults`.
pytestmark = pytest.mark.chaos

MINUTES = os.environ.get("NOTEE_CHAOS_CI_MINUTES", "5")
SEED = os.environ.get("NOTEE_CHAOS_CI_SEED", "31")


def test_a_short_seeded_chaos_run_holds_every_invariant() -> None:
    out = log_dir() / "chaos"
    env = {**os.environ, "CHAOS_MINUTES": MINUTES, "CHAOS_SEED": SEED, "CHAOS_OUT": str(out)}
    run = subprocess.run(
        [sys.executable, "-m", "chaos"], env=env, capture_output=True, text=True, timeout=float(MINUTES) * 60 + 1800
    )
    report = out / "latest" / "report.md"
    text = report.read_text() if report.exists() else f"no report:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert run.returncode == 0, text
