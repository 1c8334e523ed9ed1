"""The run's report, as Markdown and as one self-contained HTML page: the seed, the invariants table
with counts, the timeline of throughput and errors with the faults marked (inline SVG), and the log
lines around each violation. Pure: it formats what it is given."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaos.ledger import Event, Result, Violation

BUCKET_S = 5.0
COLOURS = {
    "sigkill": "#d62728",
    "sigterm": "#ff7f0e",
    "cassandra_node": "#9467bd",
    "mariadb_restart": "#8c564b",
    "storm": "#e377c2",
    "goaway": "#7f7f7f",
    "reset": "#aec7e8",
    "latency": "#bcbd22",
    "token_expiry": "#17becf",
    "hostile": "#000000",
}


@dataclass
class RunInfo:
    seed: int
    minutes: float
    started: float  # epoch s
    ended: float
    command: str
    figures: dict[str, Any] = field(default_factory=dict)  # what the workload did, counted


@dataclass
class Timeline:
    deliveries: list[float]  # times of delivered pushes
    errors: list[float]  # times of requests answered 5xx or not at all
    faults: list[Event]


def buckets(times: Iterable[float], start: float, end: float) -> list[int]:
    n = max(1, int((end - start) // BUCKET_S) + 1)
    counts = Counter(int((t - start) // BUCKET_S) for t in times if start <= t <= end)
    return [counts.get(i, 0) for i in range(n)]


def svg_timeline(tl: Timeline, start: float, end: float, width: int = 900, height: int = 240) -> str:
    """Pushes per second (blue) and failed requests per second (red) per 5 s, faults as bands."""
    pushes, errors = buckets(tl.deliveries, start, end), buckets(tl.errors, start, end)
    top = max([*pushes, 1]) / BUCKET_S
    err_top = max([*errors, 1]) / BUCKET_S  # errors on their own scale: a handful beside thousands of pushes
    span = max(end - start, 1.0)
    plot_h = height - 40

    def x(t: float) -> float:
        return 40 + (t - start) / span * (width - 50)

    def line(counts: list[int], colour: str, scale: float) -> str:
        pts = " ".join(
            f"{x(start + (i + 0.5) * BUCKET_S):.1f},{10 + plot_h - c / BUCKET_S / scale * plot_h:.1f}"
            for i, c in enumerate(counts)
        )
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>'

    bands = []
    for i, f in enumerate(tl.faults):
        x0, x1 = x(f["t_start"]), x(max(f.get("t_end", f["t_start"]), f["t_start"] + 1))
        colour = COLOURS.get(f["name"], "#999")
        label = html.escape(f"{f['name']} {f.get('target', '')}")
        bands.append(
            f'<rect x="{x0:.1f}" y="10" width="{max(x1 - x0, 1.5):.1f}" height="{plot_h}" fill="{colour}" '
            f'fill-opacity="0.18"><title>{label}</title></rect>'
            f'<text x="{x0:.1f}" y="{22 + (i % 6) * 10}" font-size="8" fill="{colour}">{label}</text>'
        )
    ticks = "".join(
        f'<text x="{x(start + m * 60):.1f}" y="{height - 12}" font-size="9">{m}m</text>'
        for m in range(int(span // 60) + 1)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">'
        f'<rect x="40" y="10" width="{width - 50}" height="{plot_h}" fill="none" stroke="#ccc"/>'
        f"{''.join(bands)}{line(pushes, '#1f77b4', top)}{line(errors, '#d62728', err_top)}{ticks}"
        f'<text x="2" y="18" font-size="9" fill="#1f77b4">{top:.0f}/s</text>'
        f'<text x="2" y="30" font-size="9" fill="#d62728">{err_top:.1f}/s</text>'
        f'<text x="{width - 420}" y="{height - 2}" font-size="9">blue: pushes delivered/s; red: failed requests/s '
        "(own scale); bands: faults</text>"
        "</svg>"
    )


def _rows(results: list[Result]) -> list[tuple[str, str, int, int, str]]:
    return [
        (
            "PASS" if r.ok else "FAIL",
            r.invariant,
            r.checked,
            len(r.violations),
            "; ".join(f"{k}={v}" for k, v in r.measured.items() if k != "groups")[:300],
        )
        for r in results
    ]


def markdown(info: RunInfo, results: list[Result], faults: list[Event], excerpts: dict[Violation, list[str]]) -> str:
    out = [
        f"# Chaos run, seed {info.seed}",
        "",
        f"- length: {info.minutes:g} minutes ({info.ended - info.started:.0f} s of workload and drain)",
        f"- replay: `{info.command}`",
        f"- verdict: **{'all invariants held' if all(r.ok for r in results) else 'VIOLATIONS'}**",
        "",
        "| | invariant | checked | violations | measured |",
        "|---|---|---|---|---|",
        *(f"| {s} | {name} | {n} | {v} | {m} |" for s, name, n, v, m in _rows(results)),
        "",
        "## Workload",
        "",
        *(f"- {k}: {v}" for k, v in sorted(info.figures.items())),
        "",
        "## Faults",
        "",
        "| at (s) | fault | target | length (s) | outcome |",
        "|---|---|---|---|---|",
        *(
            f"| {f['t_start'] - info.started:.0f} | {f['name']} | {f.get('target', '')} | "
            f"{f.get('t_end', f['t_start']) - f['t_start']:.0f} | {f.get('outcome', '')} |"
            for f in faults
        ),
    ]
    dups = next((r for r in results if r.invariant.startswith("duplicates")), None)
    if dups is not None and dups.measured.get("groups"):
        out += ["", "## Duplicates and their causes", "", *(f"- {g}" for g in dups.measured["groups"])]
    for r in results:
        for v in r.violations[:20]:
            out += [
                "",
                f"## Violation: {v.invariant}",
                "",
                f"{v.detail}" + (f" (faults: {v.cause})" if v.cause else ""),
            ]
            lines = excerpts.get(v, [])
            if lines:
                out += ["", "```", *lines, "```"]
        if len(r.violations) > 20:
            out += ["", f"… and {len(r.violations) - 20} more violations of “{r.invariant}”"]
    return "\n".join(out) + "\n"


def page(info: RunInfo, results: list[Result], tl: Timeline, excerpts: dict[Violation, list[str]]) -> str:
    rows = "".join(
        f"<tr class='{s.lower()}'><td>{s}</td><td>{html.escape(n)}</td><td>{c}</td><td>{v}</td>"
        f"<td>{html.escape(m)}</td></tr>"
        for s, n, c, v, m in _rows(results)
    )
    viol = "".join(
        f"<h3>{html.escape(v.invariant)}</h3><p>{html.escape(v.detail)}</p>"
        f"<pre>{html.escape(chr(10).join(excerpts.get(v, [])))}</pre>"
        for r in results
        for v in r.violations[:20]
    )
    md = html.escape(markdown(info, results, tl.faults, {}))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Chaos run, seed {info.seed}</title><style>body{{font-family:sans-serif;margin:2em}}"
        "td,th{border:1px solid #ccc;padding:3px 6px}table{border-collapse:collapse}"
        ".fail td:first-child{color:#c00;font-weight:bold}.pass td:first-child{color:#080}</style></head><body>"
        f"<h1>Chaos run, seed {info.seed}</h1><p>{info.minutes:g} minutes; replay: <code>"
        f"{html.escape(info.command)}</code></p>{svg_timeline(tl, info.started, info.ended)}"
        "<table><tr><th></th><th>invariant</th><th>checked</th><th>violations</th><th>measured</th></tr>"
        f"{rows}</table><h2>Violations</h2>{viol or '<p>none</p>'}<h2>Details</h2><pre>{md}</pre></body></html>"
    )
