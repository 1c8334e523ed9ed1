"""``python -m chaos`` (``make chaos``): one chaos run. ``CHAOS_MINUTES`` (default 30) sets its length,
``CHAOS_SEED`` replays a run (default: a fresh seed, printed first and written into the report).
With ``CHAOS_API_URLS`` it runs against an existing deployment instead (``chaos.attach``).
Exit status 0 when every invariant held, 1 when one did not."""

from __future__ import annotations

import os
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path

from chaos.attach import attached, execute_attached
from chaos.run import Options, execute
from chaos.stack import REPO


def main() -> int:
    minutes = float(os.environ.get("CHAOS_MINUTES", "30"))
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbelow(2**31))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(os.environ.get("CHAOS_OUT") or REPO / ".run" / "chaos") / f"{stamp}-seed{seed}"
    print(f"chaos run: seed {seed}, {minutes:g} minutes, report in {out}", flush=True)
    opts = Options(minutes=minutes, seed=seed, out=out)
    ok = execute_attached(opts, dict(os.environ)) if attached() else execute(opts)
    print(f"chaos run: {'every invariant held' if ok else 'INVARIANTS VIOLATED'}: {out / 'report.md'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
