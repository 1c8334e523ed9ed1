"""``python -m chaos.recheck <run folder>``: check a finished run's ledger and delivery journal again
and rewrite its report (after a change to the checker or the report, or on a copy of an operator's
run). Exit status as ``python -m chaos``."""

from __future__ import annotations

import sys
from pathlib import Path

from chaos.record import read_lines
from chaos.run import Options, check_and_report


def main(folder: Path) -> int:
    events = list(read_lines(folder / "ledger.jsonl"))
    run = next(e for e in events if e["kind"] == "run")
    started = min((e["t_start"] for e in events if e["kind"] == "fault"), default=run["t"])
    opts = Options(minutes=float(run["minutes"]), seed=int(run["seed"]), out=folder)
    ok = check_and_report(opts, started, max(e["t"] for e in events), folder / "logs", folder / "deliveries.jsonl")
    print(f"{folder / 'report.md'}: {'every invariant held' if ok else 'INVARIANTS VIOLATED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
