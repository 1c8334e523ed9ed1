"""The chaos run as a test (issue 31): ``python -m chaos`` for a short seeded run (a Cassandra node
and the MariaDB killed and the hostile phase at least once, the other fault kinds as the seed draws
them), checked by its independent ledger (chaos/ledger.py). The run is a subprocess with its
own cluster use, MariaDB, emulator and Notee processes; its report and logs go into the session's
log folder (so the secrets scan covers them), and a failure prints the report's invariants table.

Part of ``make test-faults`` (and so of ``.ci/run``): it runs last in that session
(tests/faults/conftest.py orders it), on the 3-node cluster the other fault tests started, so the
cluster's start and stop are theirs. ``pytest -m chaos tests/faults`` runs it alone (then it starts
and stops the cluster itself)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.logscan import log_dir

pytestmark = [pytest.mark.faults, pytest.mark.chaos]

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
