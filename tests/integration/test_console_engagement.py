"""The console's engagement (issue 36; docs/CONSOLE.md "Engagement"): the block on a job's page and
the service overview (`/console/s/{service}/engagement`: totals with rates, delivered and opened per
day as server-side SVG, per day and per type tables), through the app's HTTP and in headless
Chromium under the console's Content-Security-Policy; another service's session sees none of it."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

import httpx
from fastapi.testclient import TestClient

from notee.core import notification_id
from tests.support import browser
from tests.support.fanout import finished_topic_job
from tests.support.logscan import log_dir, remember_secret
from tests.support.registry import admin_headers, bearer

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def _client_key(api, settings, service: str) -> str:
    r = api.post(
        f"/v1/admin/services/{service}/api-keys",
        json={"label": "app", "kind": "client"},
        headers=admin_headers(settings),
    )
    assert r.status_code == 201, r.text
    remember_secret(r.json()["api_key"])
    return str(r.json()["api_key"])


def _receipts(api, runtime, settings, service: str) -> str:
    """A job of 4 sent pushes with 3 delivered, 2 opened and 1 clicked: its id."""
    job_id = finished_topic_job(runtime, service, 4, type_="promo", topic="deals")
    source = notification_id.source_of_job(job_id)
    nids = [f"{source}.{notification_id.device_part(f'd{i}')}" for i in range(4)]
    now = datetime.now(UTC).isoformat()
    events = [{"notification_id": n, "event": "delivered", "at": now} for n in nids[:3]]
    events += [{"notification_id": n, "event": "opened", "at": now} for n in nids[:2]]
    events.append({"notification_id": nids[0], "event": "clicked", "at": now, "action": "buy"})
    r = api.post("/v1/receipts", json={"events": events}, headers=bearer(_client_key(api, settings, service)))
    assert r.status_code == 200 and r.json()["accepted"] == 6, r.text
    return job_id


def _signed_in(app, key: str) -> TestClient:
    c = TestClient(app, follow_redirects=False)
    form = c.get("/console/sign-in")
    r = c.post("/console/sign-in", data={"csrf": CSRF.search(form.text).group(1), "secret": key, "next": "/console/"})
    assert r.status_code == 303, r.text
    return c


def test_the_job_page_and_the_overview_show_the_receipts(app, client, settings, runtime, make_tenant):
    mine, other = make_tenant(), make_tenant()
    job_id = _receipts(client, runtime, settings, mine.service)
    c = _signed_in(app, mine.api_key)
    page = c.get(f"/console/s/{mine.service}/jobs/{job_id}")
    assert page.status_code == 200, page.text
    block = page.text[page.text.index('id="h-engagement"') : page.text.index('id="h-message"')]
    assert re.search(r'data-field="eng-delivered">3<', block) and re.search(r'data-field="eng-opened">2<', block)
    assert "75.0 % · 50.0 % · 25.0 %" in block  # delivery, open and click rates over 4 sent
    assert "<svg" in block and "style=" not in block  # the CSP forbids inline styles
    overview = c.get(f"/console/s/{mine.service}/engagement")
    assert overview.status_code == 200, overview.text
    html = overview.text
    assert re.search(r'data-field="sent">4<', html) and re.search(r'data-field="opened">2<', html)
    assert re.search(r'data-field="open_rate">50.0 %<', html)
    assert 'id="delivered-chart"' in html and 'id="opened-chart"' in html and html.count("<svg") >= 2
    assert re.search(r'<tr data-key="promo"><td>promo</td><td class="num">4</td><td class="num">3</td>', html)
    theirs = _signed_in(app, other.api_key)
    assert theirs.get(f"/console/s/{mine.service}/engagement").status_code == 404
    assert theirs.get(f"/console/s/{mine.service}/jobs/{job_id}").status_code == 404
    assert "data-key=" not in theirs.get(f"/console/s/{other.service}/engagement").text  # nothing of mine


def test_the_engagement_pages_in_a_real_browser(processes, runtime, settings):
    api_proc = processes.api()
    api = httpx.Client(base_url=api_proc.url, timeout=30)
    service = "E" + secrets.token_hex(5).upper()
    r = api.post(
        "/v1/admin/services",
        json={"service": service, "display_name": "Engagement", "timezone": "Asia/Seoul"},
        headers=admin_headers(settings),
    )
    assert r.status_code == 201, r.text
    key = api.post(f"/v1/admin/services/{service}/api-keys", json={}, headers=admin_headers(settings)).json()["api_key"]
    remember_secret(key)
    job_id = _receipts(api, runtime, settings, service)
    with browser.Browser(api_proc.url, log_dir() / "console-engagement") as b:
        b.visit(f"/console/s/{service}/engagement", "sign-in")
        b.submit("sign-in", {"secret": key})
        b.wait(lambda: b.d.current_url.endswith(f"/console/s/{service}/engagement"), 30, "the overview after sign-in")
        b.record("engagement")
        assert b.text('[data-field="opened"]') == "2" and b.text('[data-field="click_rate"]') == "25.0 %"
        for chart in ("#delivered-chart svg", "#opened-chart svg"):
            box = b.find(chart).rect
            assert box["width"] > 100 and box["height"] > 50, (chart, box)
        bars = b.d.find_elements("css selector", "#opened-chart svg rect")
        assert bars and max(float(r.get_attribute("height") or 0) for r in bars) > 0
        assert b.find('nav a[href$="/engagement"]').get_attribute("aria-current") == "page"
        b.visit(f"/console/s/{service}/jobs/{job_id}", "job-engagement")
        assert b.text('[data-field="eng-rates"]') == "75.0 % · 50.0 % · 25.0 %"
        assert b.find("#engagement-chart svg").rect["width"] > 100
        violations = [e for e in b.d.get_log("browser") if "Content Security Policy" in e.get("message", "")]
        assert violations == [], violations
        b.phone()
        b.visit(f"/console/s/{service}/engagement", "engagement-phone")
        assert b.horizontal_overflow() == 0
