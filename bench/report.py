"""Figures and the results files: ``bench/results/latest.json`` and ``latest.md``.

A figure is either measured::

    {"value": 0.93, "goal": ">= 0.9", "met": true,
     "numerator": {"name": ..., "value": ..., "unit": ...},
     "denominator": {"name": ..., "value": ..., "unit": ...},
     "sizes": {...}, "extra": {...}}

or missing, with the reason (never a default value)::

    {"missing": true, "reason": "..."}
"""

from __future__ import annotations

import json
import operator
import os
import platform
import socket
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The figures of earlier runs kept in the repository (``python -m bench.run --keep``): per mode and
# figure, the last measured one, with the commit, machine and time it came from. Every report shows
# them beside the new figures.
KEPT_FILE = Path(__file__).resolve().parent / "kept.json"
# Side figures (``extra``) set beside the kept run's in the report: the absolute CPU costs.
SIDE_FIGURES: dict[str, tuple[str, ...]] = {
    "send_cpu_ratio": ("notee_us_per_msg", "bare_us_per_req"),
    "send_cpu_ratio_apns": ("notee_us_per_msg", "bare_us_per_req"),
    "gorush_cpu_ratio": ("notee_worker_us_per_push", "gorush_per_notee_worker"),
    "gorush_cpu_ratio_apns": ("notee_worker_us_per_push", "gorush_per_notee_worker"),
    "fanout_ratio": (
        "worker_cpu_us_per_push",
        "worker_cpu_us_per_push_steady",
        "worker_cpu_us_per_push_apns",
        "emulator_cpu_us_per_request",
        "emulator_cpu_us_per_request_apns",
    ),
    "fanout_scaling": ("emulator_cpu_us_per_request", "emulator_cores"),
    "local_time_cpu_ratio": ("emulator_cpu_us_per_request",),
    "personal_cpu_ratio": ("emulator_cpu_us_per_request",),
    "subscribe_ratio": ("api_server_cpu_ms_per_sub", "rate_limited_server_cpu_ms_per_sub"),
    "slot_walk_ratio": ("notee_cpu_us_per_row", "raw_cpu_us_per_row"),
}

# name -> (comparison, goal value, one-line meaning); the order of the table.
GOALS: dict[str, tuple[str, float, str]] = {
    "slot_walk_ratio": (">=", 0.95, "recipient stream rows/s / raw driver paged SELECT rows/s"),
    "send_cpu_ratio": (">=", 0.8, "FCM: Notee sender msgs per CPU-s / leanest bare loop (pycurl) req per CPU-s"),
    "send_cpu_ratio_apns": (">=", 0.8, "APNs: Notee sender msgs per CPU-s / leanest bare loop (pycurl) req per CPU-s"),
    "webpush_cpu_us": (
        "<=",
        0.5,
        "Web Push: Notee worker CPU µs per encrypted message / a plain pywebpush loop's, same messages, same run",
    ),
    "gorush_cpu_ratio": (
        ">=",
        57.5 / 40,
        "FCM: gorush's CPU per message / Notee deliver()'s, same run (issue 19: 40 µs where gorush took 57.5)",
    ),
    "gorush_cpu_ratio_apns": (
        ">=",
        42.1 / 40,
        "APNs: gorush's CPU per message / Notee deliver()'s, same run (issue 19: 40 µs where gorush took 42.1)",
    ),
    "fanout_ratio": (">=", 0.85, "topic publish pushes/s / min(slot walk, bare sender) pushes/s"),
    "cycle_minute_s": ("<", 60.0, "tick -> last cycle push acknowledged, seconds"),
    "subscribe_ratio": (">=", 0.6, "API topic subscriptions/s / raw driver same writes/s"),
    "bulk_subscribe_ratio": (">=", 3000.0, "bulk endpoint users/s / raw driver same writes users/s (goal: users/s)"),
    "fanout_scaling": (
        ">=",
        1.0,
        "two notee worker processes' pushes/s / one's, same topic publish (more than 1 needs free cores)",
    ),
    "worker_rss_growth": ("<=", 1.1, "worker RSS at end of publish / after its first page"),
    "sparse_publish": ("<", 1.0, "10-subscriber topic in a type at 3,000,000: seconds to done (and tasks <= 2)"),
    "sparse_cycle": ("<", 1.0, "10-subscriber cycle bucket in a type at 3,000,000: tick to done, s (tasks <= 2)"),
    "local_time_cpu_ratio": (
        "<=",
        1.2,
        "local-time publish (24 zones) worker CPU per push / plain publish of the same topic",
    ),
    "condition_publish_ratio": (
        ">=",
        0.8,
        "condition 'A' && !'B' (two 100,000-subscriber topics) pushes/s / topic publish of 100,000, same run",
    ),
    "segment_publish_ratio": (
        ">=",
        0.8,
        "filter matching 100,000 of 1,000,000 users pushes/s / topic publish to the same 100,000, same run",
    ),
    "personal_cpu_ratio": (
        "<=",
        3.0,
        "worker CPU per push of a template reading recipient.name and a date / plain publish of the same topic",
    ),
    "fairness_p99_s": (
        "<",
        2.0,
        "tenant B's publish -> acknowledged p99, seconds, while tenant A's large publish runs (1 worker)",
    ),
    "estimate_s": ("<", 2.0, "filter estimate (tag = AND platform =) over 1,000,000 tagged users, seconds"),
    "import_users_per_s": (">=", 10_000.0, "bulk import: new users/s with 4 tags and one device each (upload to done)"),
    "import_subscriptions_ratio": (
        ">=",
        0.7,
        "bulk import: topic subscriptions/s of existing users / raw driver same writes/s, same run",
    ),
    "receipts_per_s": (">=", 5_000.0, "receipt events/s one API process accepts, batches of 100 (issue 36)"),
}
# Figures whose value is a ratio but whose goal is on the numerator, an absolute rate (issue 19:
# "at least 3,000 users/s" through the bulk endpoint; the ratio says how close to the raw writes).
ON_NUMERATOR = {"bulk_subscribe_ratio"}
_OPS = {">=": operator.ge, "<=": operator.le, "<": operator.lt, ">": operator.gt}


@dataclass(frozen=True)
class Measure:
    name: str
    value: float
    unit: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": _round(self.value), "unit": self.unit}


def _round(x: float) -> float:
    if isinstance(x, int):
        return x
    return float(f"{x:.4g}") if abs(x) < 1e6 else round(x)


def figure(
    name: str,
    numerator: Measure,
    denominator: Measure,
    sizes: dict[str, Any],
    *,
    value: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A measured figure. ``value`` defaults to numerator / denominator."""
    op, goal, _ = GOALS[name]
    if value is None:
        if denominator.value <= 0:
            return missing(f"denominator {denominator.name} measured {denominator.value}")
        value = numerator.value / denominator.value
    judged = numerator.value if name in ON_NUMERATOR else value
    out: dict[str, Any] = {
        "value": _round(value),
        "goal": f"numerator {op} {goal:g}" if name in ON_NUMERATOR else f"{op} {goal:g}",
        "met": bool(_OPS[op](judged, goal)),
        "numerator": numerator.as_dict(),
        "denominator": denominator.as_dict(),
        "sizes": sizes,
    }
    if extra:
        out["extra"] = {k: _round(v) if isinstance(v, float) else v for k, v in extra.items()}
    return out


def missing(reason: str) -> dict[str, Any]:
    return {"missing": True, "reason": reason}


def speed_probe() -> float:
    """ms of CPU for a fixed pure-Python loop (median of 5): the machine's speed at the time, so that
    the absolute side figures (µs per message, ms per subscription) of runs on different days can be
    read against each other (the bare send loops' µs per request tell the same for the send path)."""

    def once() -> float:
        t = time.process_time()
        total = 0
        for i in range(2_000_000):
            total += i
        return (time.process_time() - t) * 1000

    return round(sorted(once() for _ in range(5))[2], 1)


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        info["mem_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (OSError, ValueError):
        pass
    try:
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=RESULTS_DIR.parent.parent,
            timeout=5,
        ).stdout.strip()
    except OSError:
        pass
    return info


def table(figures: dict[str, dict[str, Any]]) -> str:
    """The human-readable table (Markdown)."""
    lines = ["| figure | value | goal | met | numerator | denominator | sizes |", "|---|---|---|---|---|---|---|"]
    for name in GOALS:
        f = figures.get(name) or missing("not run")
        if f.get("missing"):
            on = "numerator " if name in ON_NUMERATOR else ""
            lines.append(f"| {name} | missing | {on}{GOALS[name][0]} {GOALS[name][1]:g} | — | {f['reason']} | | |")
            continue
        n, d = f["numerator"], f["denominator"]
        sizes = ", ".join(f"{k}={v}" for k, v in f["sizes"].items())
        extra = f.get("extra")
        if extra:
            sizes += "; " + ", ".join(f"{k}={v}" for k, v in extra.items())
        lines.append(
            f"| {name} | **{f['value']}** | {f['goal']} | {'yes' if f['met'] else 'NO'} | "
            f"{n['name']}: {n['value']} {n['unit']} | {d['name']}: {d['value']} {d['unit']} | {sizes} |"
        )
    return "\n".join(lines)


def read_kept(path: Path = KEPT_FILE) -> dict[str, dict[str, Any]]:
    """The kept figures, by mode then figure ({} when there is no such file)."""
    try:
        return json.loads(path.read_text())["modes"]
    except (OSError, ValueError, KeyError):
        return {}


def keep(doc: dict[str, Any], path: Path = KEPT_FILE) -> int:
    """Put the measured figures of ``doc`` (what ``write`` returned) into the kept file, each with the
    run it came from; figures not measured in it keep their earlier entry. Returns how many were kept."""
    modes = read_kept(path)
    kept = modes.setdefault(doc["mode"], {})
    run = {"commit": doc["machine"].get("commit", "?"), "started_utc": doc["started_utc"], "machine": doc["machine"]}
    measured = {name: f for name, f in doc["figures"].items() if not f.get("missing")}
    for name, f in measured.items():
        kept[name] = {**f, "run": run}
    path.write_text(json.dumps({"modes": modes}, indent=2, ensure_ascii=False) + "\n")
    return len(measured)


def _from(entry: dict[str, Any]) -> str:
    run, m = entry.get("run", {}), entry.get("run", {}).get("machine", {})
    return f"{run.get('commit', '?')}, {run.get('started_utc', '?')[:16]}, {m.get('host', '?')} ({m.get('cpus', '?')} CPUs)"


def side_by_side(figures: dict[str, dict[str, Any]], kept: dict[str, dict[str, Any]]) -> str:
    """The new figures beside the kept ones (Markdown): each value, then the side figures of SIDE_FIGURES."""
    lines = [
        "| figure | now | kept | kept from (commit, time, machine) |",
        "|---|---|---|---|",
    ]
    for name in GOALS:
        now, before = figures.get(name) or missing("not run"), kept.get(name)
        if now.get("missing") and before is None:
            continue
        rows = [(name, now.get("value", "—"), before["value"] if before else "—")]
        for side in SIDE_FIGURES.get(name, ()):
            rows.append(
                (
                    f"{name}.{side}",
                    (now.get("extra") or {}).get(side, "—"),
                    ((before or {}).get("extra") or {}).get(side, "—"),
                )
            )
        for label, a, b in rows:
            lines.append(f"| {label} | {a} | {b} | {_from(before) if before else 'not kept'} |")
    return "\n".join(lines)


def write(
    mode: str,
    figures: dict[str, dict[str, Any]],
    started: datetime,
    results_dir: Path = RESULTS_DIR,
    speed: tuple[float, float] | None = None,
    kept_file: Path = KEPT_FILE,
) -> dict:
    """``speed``: ``speed_probe()`` before and after the figures. ``kept_file``: the figures kept from
    earlier runs, shown beside these (``keep`` adds these to it)."""
    doc = {
        "mode": mode,
        "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine() | ({"speed_probe_ms": list(speed)} if speed else {}),
        "figures": {name: figures.get(name) or missing("not run") for name in GOALS},
    }
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "latest.json").write_text(json.dumps(doc, indent=2) + "\n")
    m = doc["machine"]
    md = (
        f"# Notee benchmarks ({mode})\n\n{doc['started_utc']} to {doc['finished_utc']}, "
        f"{m.get('cpus')} CPUs ({m.get('cpu', '?')}), {m.get('mem_gb', '?')} GB, Python {m['python']}, "
        f"commit {m.get('commit', '?')}"
        + (
            f"; speed probe {speed[0]:g} ms before, {speed[1]:g} ms after (a pure-Python loop's CPU: lower is faster)"
            if speed
            else ""
        )
        + "\n\n"
        + table(doc["figures"])
        + f"\n\n## Beside the kept figures ({kept_file.name}, {mode} runs)\n\n"
        + side_by_side(doc["figures"], read_kept(kept_file).get(mode, {}))
        + "\n"
    )
    (results_dir / "latest.md").write_text(md)
    return doc
