"""Small bar charts as inline SVG markup, rendered on the server (no script, no CDN, nothing the
console's Content-Security-Policy would block: the SVG carries presentation attributes, never a
``style``). Each chart is a ``Chart`` the templates place with ``{{ chart.svg|safe }}``: every text
in it is escaped here, and it carries a text summary for screen readers (``role="img"`` and a
``<title>``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from notee.domain import insight
from notee.domain.job_activity import MinuteRow

WIDTH = 600
HEIGHT = 140
LABEL_H = 16


@dataclass(frozen=True, slots=True)
class Bar:
    label: str  # under the bar (may be "" to leave it out)
    value: int
    tip: str  # the bar's own <title>: what a hover or a screen reader gets


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    svg: str  # escaped markup, safe to place as it is
    total: int


def bars(title: str, items: Sequence[Bar], colour: str = "#2f5bea") -> Chart:
    """A bar chart of ``items`` left to right, scaled to the largest value (an empty chart: a line)."""
    peak = max([b.value for b in items] + [1])
    slot = WIDTH / max(len(items), 1)
    width = max(slot * 0.8, 1.0)
    plot_h = HEIGHT - LABEL_H
    total = sum(b.value for b in items)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" height="{HEIGHT}" role="img" '
        f'aria-label="{escape(title)}: {total} in all" preserveAspectRatio="none" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}: {total} in all</title>",
        f'<line x1="0" y1="{plot_h}" x2="{WIDTH}" y2="{plot_h}" stroke="#d9dee8" stroke-width="1"/>',
    ]
    step = max(1, len(items) // 8)  # at most ~8 labels, so they never overlap
    for i, b in enumerate(items):
        h = round(plot_h * b.value / peak, 1)
        x = round(i * slot + (slot - width) / 2, 1)
        parts.append(
            f'<rect x="{x}" y="{round(plot_h - h, 1)}" width="{round(width, 1)}" height="{h}" fill="{colour}">'
            f"<title>{escape(b.tip)}</title></rect>"
        )
        if b.label and i % step == 0:
            parts.append(
                f'<text x="{round(i * slot + slot / 2, 1)}" y="{HEIGHT - 3}" font-size="11" fill="#4a5468" '
                f'text-anchor="middle">{escape(b.label)}</text>'
            )
    parts.append("</svg>")
    return Chart(title=title, svg="".join(parts), total=total)


def hourly_bars(summary: insight.DeliverySummary) -> Chart:
    """The service's pushes sent per UTC hour of the last 24 hours (the delivery summary's hours)."""
    items = [
        Bar(f"{h.hour:%H}h", h.deliveries.sent, f"{h.hour:%Y-%m-%d %H}:00 UTC: {h.deliveries.sent} sent")
        for h in summary.hours
    ]
    return bars("Pushes sent per hour, last 24 hours (UTC)", items)


def minute_bars(title: str, minutes: Sequence[MinuteRow]) -> Chart:
    """Pushes sent per UTC minute (``domain.job_activity``: a service's last hour, a job's run)."""
    items = [
        Bar(
            f"{m.minute_utc:%H:%M}",
            m.sent,
            f"{m.minute_utc:%Y-%m-%d %H:%M} UTC: {m.sent} sent, {m.failed} failed, {m.pruned} pruned ({m.pages} pages)",
        )
        for m in minutes
    ]
    return bars(title, items)


def failure_bars(failures: Sequence[tuple[str, str, int]]) -> Chart:
    """A job's dead letters by reason and platform (``usecases.replay.job_failures``)."""
    items = [Bar("", n, f"{reason} ({platform}): {n}") for reason, platform, n in failures]
    return bars("Failures by reason and platform", items, colour="#c0362c")


def due_bars(hours: Sequence[tuple[str, int]]) -> Chart:
    """Cycle pushes due per hour of the next 24 hours: (the hour's label, subscriptions due)."""
    items = [Bar(label, n, f"{label}: {n} due") for label, n in hours]
    return bars("Cycle pushes due per hour, next 24 hours (UTC)", items, colour="#1e7d4f")
