"""What the console's hourly charts say (issue 33, docs/CONSOLE.md "Charts"), from rows this test
seeds for its own tenant, read off the SVG the pages serve:

- the jobs page's "pushes sent per hour, last 24 hours" (``charts.hourly_bars``): one bar per UTC
  hour of the window, each the sent count of the service's jobs made in that hour; a job older than
  the window is left out; another tenant's chart shows none of it;
- the calendar's "cycle pushes due per hour, next 24 hours" (``charts.due_bars``): one bar per hour
  of the window, each the subscriptions due in that hour.

Each bar's ``<title>`` carries its hour and its value, and its height is its share of the highest."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from notee.api.console import charts
from tests.integration.test_console_compose import sign_in
from tests.support.fanout import topic_job

pytestmark = pytest.mark.tenant(credentials=True)

BAR = re.compile(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)"[^>]*><title>([^<]*)</title></rect>')
DAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
PLOT_H = charts.HEIGHT - charts.LABEL_H


def _bars(html: str, figure_id: str) -> list[tuple[float, str]]:
    """(height, title) of every bar of a page's chart, left to right."""
    figure = html.split(f'id="{figure_id}"', 1)[1].split("</figure>", 1)[0]
    return [(float(h), title) for h, title in BAR.findall(figure)]


def _db_now(runtime) -> datetime:
    with runtime.sessions() as s:
        return s.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one().replace(tzinfo=UTC)


def _sent(runtime, job_id: str, sent: int, created: datetime) -> None:
    """This test's own job: done, ``sent`` pushes (of one more targeted), made at ``created`` (UTC)."""
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE fanout_task SET state = 'done', targeted = :n + 1, sent = :n WHERE job_id = :j"),
            {"n": sent, "j": job_id},
        )
        s.execute(
            text("UPDATE fanout_job SET state = 'done', created_at = :t WHERE job_id = :j"),
            {"t": created.replace(tzinfo=None), "j": job_id},
        )


def test_the_pushes_per_hour_chart_shows_each_hours_sent(app, runtime, tenant):
    service = tenant.service
    key = tenant.template("TOPIC", "news", title="Hi {{name}}", body="b")["notification_key"]
    now = _db_now(runtime)
    hour = now.replace(minute=0, second=0, microsecond=0)
    # (hours before this one, sent); the window is this hour and the 23 before it. 22 h, not 23: the
    # hour may turn between seeding and reading, and the hour-by-hour assertions hold either way.
    seeded = [(0, 7), (0, 4), (3, 13), (22, 5), (30, 100)]  # the last one is outside the window
    for i, (back, sent) in enumerate(seeded):
        job = topic_job(runtime, service, key, f"t{i}")
        _sent(runtime, job.job_id, sent, hour - timedelta(hours=back) + timedelta(minutes=1))
    c = sign_in(app, tenant.api_key)
    page = c.get(f"/console/s/{service}/jobs")
    assert page.status_code == 200
    bars = _bars(page.text, "service-chart")
    assert len(bars) == 24
    values = {}
    for height, title in bars:
        found = re.fullmatch(r"(\d{4}-\d\d-\d\d \d\d):00 UTC: (\d+) sent", title)
        assert found, title
        values[found.group(1)] = (int(found.group(2)), height)
    label = lambda back: f"{hour - timedelta(hours=back):%Y-%m-%d %H}"  # noqa: E731
    expected = {label(0): 11, label(3): 13, label(22): 5}
    assert {k: n for k, (n, _) in values.items() if n} == expected, values
    assert label(30) not in values
    # each bar's height is its share of the highest (13): 11/13 of the plot, 5/13, and 0 for the rest
    for name, n in expected.items():
        assert values[name][1] == round(PLOT_H * n / 13, 1), (name, values[name])
    assert all(h == 0 for n, h in values.values() if n == 0)
    assert 'aria-label="Pushes sent per hour, last 24 hours (UTC): 29 in all"' in page.text


def test_another_tenants_hourly_chart_shows_none_of_it(app, runtime, tenant, make_tenant):
    key = tenant.template("TOPIC", "news", title="Hi {{name}}", body="b")["notification_key"]
    job = topic_job(runtime, tenant.service, key, "mine")
    _sent(runtime, job.job_id, 17, _db_now(runtime))
    other = make_tenant()
    o = sign_in(app, other.api_key)
    page = o.get(f"/console/s/{other.service}/jobs")
    assert page.status_code == 200
    assert [t for _, t in _bars(page.text, "service-chart") if not t.endswith(": 0 sent")] == []
    assert o.get(f"/console/s/{tenant.service}/jobs").status_code == 404


@pytest.fixture()
def due_rows(runtime):
    """The due-index rows this test's cycle subscriptions add (shared by every scheduler): deleted
    at the end, each by its own key, so no scheduler fires them later."""
    made: list[tuple[str, int, int, str]] = []
    yield made
    stamp = time.time_ns() // 1000 + 1
    for day, hour, minute, key in made:
        runtime.statements.delete_due(stamp, "UTC", day, hour, minute, key)


def test_the_due_per_hour_chart_shows_each_hours_subscriptions(app, client, runtime, tenant, due_rows):
    service, headers = tenant
    key = tenant.template("CYCLE", "remind", title="Time", body="Drink water")["notification_key"]
    now = _db_now(runtime)
    first = (now + timedelta(hours=2)).replace(minute=15, second=0, microsecond=0)
    later = (now + timedelta(hours=5)).replace(second=0, microsecond=0)
    # (moment, users due then): two at `first`, three and one in the hour of `later`
    seeded = [(first, 2), (later.replace(minute=40), 3), (later.replace(minute=10), 1)]
    for moment, users in seeded:
        day = DAYS[moment.weekday()]
        due_rows.append((day, moment.hour, moment.minute, key))
        for _ in range(users):
            user = tenant.user(devices=[(f"due-{time.time_ns()}", "AOS")])
            r = client.put(
                f"/v1/users/{user}/subscriptions/cycle/remind",
                json={"days": [day], "hour": moment.hour, "minute": moment.minute, "timezone": "UTC"},
                headers=headers,
            )
            assert r.status_code == 201, r.text
    c = sign_in(app, tenant.api_key)
    page = c.get(f"/console/s/{service}/calendar")
    assert page.status_code == 200
    bars = _bars(page.text, "due-chart")
    assert len(bars) in (24, 25)  # 25 when the window starts mid-hour
    values = {}
    for height, title in bars:
        found = re.fullmatch(r"(\d\d)h: (\d+) due", title)
        assert found, title
        values[found.group(1)] = (int(found.group(2)), height)
    expected = {f"{first:%H}": 2, f"{later:%H}": 4}
    assert {h: n for h, (n, _) in values.items() if n} == expected, values
    assert values[f"{later:%H}"][1] == PLOT_H and values[f"{first:%H}"][1] == round(PLOT_H * 2 / 4, 1)
    assert 'aria-label="Cycle pushes due per hour, next 24 hours (UTC): 6 in all"' in page.text
