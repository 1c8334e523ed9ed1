"""The console as a campaign tool, in a real browser (issue 33): headless Chromium against a real
`notee api` and `notee worker` with the FCM emulator.

One walk as a product or operations person would take it: edit a template's title without losing
any of its other fields; compose a push with its live reach and preview per locale and platform,
see the warning for a target that reaches nobody, confirm and send; schedule one and watch its
countdown; follow a large job live and cancel it mid-way (no push after the cancel beyond the pages
in flight); break its failures down and replay its dead letters from the job page; the jobs list at
a phone's width. Every page of the walk gets an axe-core pass (0 serious or critical violations),
fails on any Content-Security-Policy violation the browser reports (its charts, the composer's device
cards and the live scripts all run under the console's CSP), and gets screenshots at 1280 x 800 and 390 x 844, kept as CI artifacts in
``.run/artifacts/console/console-campaign/`` (or ``$NOTEE_CONSOLE_ARTIFACTS``; docs/CONSOLE.md lists them)."""

from __future__ import annotations

import re
import secrets
import socket
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
from selenium.webdriver.common.by import By

from tests.support import a11y, browser
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import seed_topic
from tests.support.logscan import remember_secret
from tests.support.registry import admin_headers, bearer, random_token, shared_service_account

LAPTOP = (1280, 800)
BIG = 20_000  # devices of the job cancelled mid-way (docs/CONSOLE.md)
PAGE = 100  # NOTEE_FANOUT_FETCH_SIZE of the test's worker: a page in flight is at most this many pushes
TEMPLATE = {
    "title": "Hi {{ name }}",
    "body": "{% if count %}{{ count }} new{% else %}Nothing new{% endif %} in sports",
    "data": {"screen": "sports"},
    "defaults": {"count": "0"},
    "ttl_seconds": 7200,
    "priority": "normal",
    "quiet_hours": "drop",
    "variants": {
        "fr": {"title": "Salut {{ name }}", "body": "Du nouveau"},
        "de": {"title": "Hallo {{ name }}", "body": "Neues"},
    },
    "payload": {"image": "https://example.com/i.png", "sound": "chime", "badge": 2, "android": {"channel_id": "news"}},
}


def _state(b: browser.Browser) -> str:
    return b.text('[data-field="state"]')


def _count(b: browser.Browser, field: str) -> int:
    return int(b.text(f'[data-field="{field}"]') or 0)


def _shoot(b: browser.Browser, name: str) -> None:
    """The page at a laptop's and at a phone's size (screenshots), axe-checked at both."""
    for size, mobile, suffix in ((LAPTOP, False, "1280x800"), (browser.PHONE, True, "390x844")):
        b.viewport(*size, mobile=mobile)
        # A phone's browser widens its layout viewport to fit a page wider than the screen, so a too
        # wide page shows as a wider innerWidth (not as overflow) once the new size is laid out.
        width = "return window.innerWidth"
        b.wait(lambda w=size[0]: b.d.execute_script(width) == w, 10, f"{name} to fit {suffix}")  # noqa: B023
        b.record(f"{name}-{suffix}")
        assert b.horizontal_overflow() <= 0, (name, suffix)
        found = a11y.serious(b.d)
        assert not found, (name, suffix, found)
        assert b.csp_violations() == [], (name, suffix)
    b.viewport(*LAPTOP)


def _tenant(api: httpx.Client, settings, zone: str) -> tuple[str, str]:
    service = "C" + secrets.token_hex(5).upper()
    r = api.post(
        "/v1/admin/services",
        json={"service": service, "display_name": "Campaigns", "timezone": zone},
        headers=admin_headers(settings),
    )
    assert r.status_code == 201, r.text
    key = api.post(f"/v1/admin/services/{service}/api-keys", json={}, headers=admin_headers(settings)).json()["api_key"]
    remember_secret(key)
    r = api.put(
        f"/v1/admin/services/{service}/credentials/fcm",
        json={"service_account": shared_service_account()},
        headers=admin_headers(settings),
    )
    assert r.status_code == 200, r.text
    return service, key


def _subscribers(api: httpx.Client, key: str, tokens: list[str]) -> None:
    for token in tokens:
        r = api.put(f"/v1/users/u-{token}", json={"name": "Browser"}, headers=bearer(key))
        user = r.json()["user_id"]
        r = api.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS"}, headers=bearer(key))
        assert r.status_code in (200, 201), r.text
        r = api.put(f"/v1/users/{user}/subscriptions/topic/news/sports", headers=bearer(key))
        assert r.status_code in (200, 201), r.text


def _sign_in(b: browser.Browser, service: str, key: str) -> None:
    b.visit(f"/console/s/{service}/templates", "sign-in")
    b.submit("sign-in", {"secret": key})
    assert b.d.current_url.endswith(f"/console/s/{service}/templates")


def _edit_template(b: browser.Browser, api: httpx.Client, service: str, key: str) -> None:
    before = api.get("/v1/templates/TOPIC/news", headers=bearer(key)).json()
    b.click(b.find('a[data-edit="TOPIC/news"]'))
    _shoot(b, "template-edit")
    b.submit("new-template", {"title": "Hello {{ name }}"})
    assert "Saved TOPIC news" in b.text("#saved")
    after = api.get("/v1/templates/TOPIC/news", headers=bearer(key)).json()
    assert after["title"] == "Hello {{ name }}"
    for field in ("body", "data", "defaults", "ttl_seconds", "priority", "quiet_hours", "variants", "payload"):
        assert after[field] == before[field], field


def _compose(b: browser.Browser, service: str, topic: str, name: str) -> None:
    b.visit(f"/console/s/{service}/publish?template=TOPIC/news", "publish")
    b.find('input[name="topic"]').clear()
    b.find('input[name="topic"]').send_keys(topic)
    b.find('input[name="var.name"]').send_keys(name)


def _previewed(b: browser.Browser, before: str | None) -> None:
    b.wait(lambda: b.find("#publish").get_attribute("data-previewed") not in (None, before), 30, "a live preview")


def test_campaigns_in_a_real_browser(processes, emulator, runtime, settings):
    api_proc = processes.api()
    api = httpx.Client(base_url=api_proc.url, timeout=30)
    service, key = _tenant(api, settings, "Europe/Berlin")
    assert api.put("/v1/templates/TOPIC/news", json=TEMPLATE, headers=bearer(key)).status_code == 201
    notification_key = api.get("/v1/templates/TOPIC/news", headers=bearer(key)).json()["notification_key"]
    real = [random_token("real"), random_token("real"), random_token("failing")]
    _subscribers(api, key, real)
    emulator.fault("fcm", 429, match=real[2], times=1000)  # this device's pushes fail: one dead letter
    processes.worker(service, lanes=1, NOTEE_FANOUT_FETCH_SIZE=str(PAGE), NOTEE_FANOUT_SEND_CONCURRENCY="10")
    with browser.Browser(api_proc.url, browser.artifacts("console-campaign")) as b:
        b.viewport(*LAPTOP)
        _sign_in(b, service, key)
        _edit_template(b, api, service, key)

        # --- compose: live reach and preview; a typo reaches nobody; confirm and send ---------------
        _compose(b, service, "sprots", "Ann")
        _previewed(b, None)
        b.wait(lambda: "warn" in (b.find("#reach").get_attribute("class") or ""), 30, "the 0-reach warning")
        assert "reaches 0" in b.text("#warnings")
        before = b.find("#publish").get_attribute("data-previewed")
        b.find('input[name="topic"]').clear()
        b.find('input[name="topic"]').send_keys("sports")
        _previewed(b, before)
        b.wait(lambda: "3 users" in b.text("#reach"), 30, "the reach of news/sports")
        b.find("#ttl").send_keys("600")  # this publish's TTL and priority, not the template's
        b.find("#priority").find_element(By.CSS_SELECTOR, 'option[value="normal"]').click()
        cards = {c.get_attribute("data-locale"): c for c in b.d.find_elements(By.CSS_SELECTOR, "#preview .locale")}
        assert set(cards) == {"default", "fr", "de"} and "Hello Ann" in cards["default"].text
        assert "Salut Ann" in cards["fr"].text and "of 4096 bytes" in cards["default"].text
        # an Android and an iOS card per locale, with the template's rich fields as each would show them
        android = cards["default"].find_element(By.CSS_SELECTOR, '.device[data-platform="AOS"]')
        ios = cards["default"].find_element(By.CSS_SELECTOR, '.device[data-platform="IOS"]')
        assert android.find_element(By.CSS_SELECTOR, '[data-fact="channel"]').text == "news"
        assert ios.find_element(By.CSS_SELECTOR, '[data-fact="badge"]').text == "2"
        assert ios.find_element(By.CSS_SELECTOR, '[data-fact="sound"]').text == "chime"
        assert ios.find_element(By.CSS_SELECTOR, ".image").get_attribute("data-image") == "https://example.com/i.png"
        _shoot(b, "compose")
        b.submit("publish")
        assert "3 users" in b.text("#restated-reach") and b.text("#restated-when") == "now"
        assert "sports" in b.text("#restated-target") and "Hello Ann" in b.text("#confirm-preview")
        assert b.text("#restated-ttl") == "600 s (this publish's)" and b.text("#restated-priority").startswith("normal")
        assert b.text("#restated-quiet").startswith("honoured")
        _shoot(b, "compose-confirm")
        b.submit("confirm")
        job_id = b.d.current_url.rsplit("/", 1)[1]
        b.wait(lambda: _state(b) == "done", 180, "the job to finish on its page")
        assert (_count(b, "sent"), _count(b, "failed"), _count(b, "dead_lettered")) == (2, 1, 1)
        [failure] = b.d.find_elements(By.CSS_SELECTOR, "#failures tbody tr")
        assert "AOS" in failure.text and failure.text.endswith("1")
        b.visit(f"/console/s/{service}/jobs/{job_id}", "job-done-reloaded")  # the stored per-minute series
        assert "2 sent" in b.text("#job-minute-chart figcaption") and "claimed by a worker" in b.text("#page-events")
        _shoot(b, "job-done")
        assert len(api.get("/v1/jobs", headers=bearer(key)).json()["items"]) == 1

        # --- its dead letter, then replayed from the job page ---------------------------------------
        b.click(b.find("#job-letters"))
        assert len(b.d.find_elements(By.CSS_SELECTOR, "tr[data-letter]")) == 1
        _shoot(b, "job-dead-letters")
        emulator.reset()
        b.visit(f"/console/s/{service}/jobs/{job_id}", "job-before-replay")
        b.submit("replay-job")
        assert b.text("#replay-outcome") == "Replayed 1: delivered 1, pruned 0, failed again 0."
        assert deliveries_per_token(emulator, [real[2]])[real[2]] == 1

        # --- schedule: send_at in the service's zone, a countdown that ticks ------------------------
        _compose(b, service, "sports", "Later")
        at = (datetime.now(UTC) + timedelta(hours=3)).astimezone(ZoneInfo("Europe/Berlin"))
        b.d.execute_script("document.querySelector('input[value=at]').click()")
        b.d.execute_script("document.querySelector('input[name=send_at]').value = arguments[0]", f"{at:%Y-%m-%dT%H:%M}")
        b.submit("publish")
        assert b.text("#restated-when").startswith(f"at {at:%Y-%m-%d %H:%M} CE")
        b.submit("confirm")
        assert _state(b) == "scheduled" and "Europe/Berlin" in b.text("#send-at") and "UTC" in b.text("#send-at")
        first = b.text("#countdown")
        b.wait(lambda: b.text("#countdown") != first, 10, "the countdown to tick")
        _shoot(b, "job-scheduled")
        b.click(b.find("#cancel button"))
        assert _state(b) == "cancelled"

        # --- a large job followed live and cancelled mid-way ----------------------------------------
        big_tokens = seed_topic(runtime, service, "news", notification_key, "big", BIG)
        emulator.latency(50)
        try:
            _compose(b, service, "big", "Many")
            b.submit("publish")
            # Seeded rows are not in the topic's subscriber counters: the confirmation says it reaches
            # nobody, and sends only once told to.
            assert b.find("#zero-warning").is_displayed()
            b.find("#zero-ok").click()
            b.submit("confirm")
            big_id = b.d.current_url.rsplit("/", 1)[1]
            b.d.execute_script("window.noteeSamePage = true")
            b.wait(lambda: _count(b, "sent") > 3 * PAGE, 180, "the large job to send a few pages")
            assert _state(b) == "running" and b.d.execute_script("return window.noteeSamePage === true")
            b.wait(lambda: b.d.find_elements(By.CSS_SELECTOR, "#rate rect"), 10, "the live pushes-per-minute chart")
            _shoot(b, "job-running")
            b.click(b.find("#cancel button"))
            at_cancel = api.get(f"/v1/jobs/{big_id}", headers=bearer(key)).json()
            assert at_cancel["state"] == "cancelled"
            b.wait(lambda: _count(b, "tasks_done") == at_cancel["tasks"], 180, "the running task to stop")
        finally:
            emulator.latency(0)
        final = api.get(f"/v1/jobs/{big_id}", headers=bearer(key)).json()
        assert 0 < final["sent"] < BIG and final["sent"] - at_cancel["sent"] <= PAGE * 2  # pages in flight only
        delivered = sum(deliveries_per_token(emulator, big_tokens).values())
        assert delivered == final["sent"], (delivered, final["sent"])  # nothing sent that the job does not count
        assert _count(b, "sent") == final["sent"]
        _shoot(b, "job-cancelled")
        for css in ("#failures", "#job-letters", "#replay-job button", "#message", "#timeline"):
            element = b.find(css)
            assert element.is_displayed(), css
        b.visit(f"/console/s/{service}/jobs/{big_id}", "job-cancelled-pages")  # every page it sent, per minute
        assert f"{final['sent']} sent" in b.text("#job-minute-chart figcaption")
        assert len(b.d.find_elements(By.CSS_SELECTOR, "#page-events tbody tr")) >= 2

        # --- the jobs list, the health page and the calendar ----------------------------------------
        b.visit(f"/console/s/{service}/jobs", "jobs")
        assert b.find(f'tr[data-job="{big_id}"] [data-field="time_text"]').text.startswith("made ")
        _shoot(b, "jobs")
        b.viewport(*browser.PHONE, mobile=True)
        headers = [h.text for h in b.d.find_elements(By.CSS_SELECTOR, "#jobs th") if h.is_displayed()]
        assert headers == ["Job", "State", "Target", "Progress", "Time"], headers
        b.viewport(*LAPTOP)
        assert "sent" in b.text("#minute-chart figcaption")  # the service's pushes per minute, last hour
        for page in ("health", "calendar", "dead-letters", "templates"):
            b.visit(f"/console/s/{service}/{page}" if page != "health" else "/console/health", page)
            _shoot(b, page)
            if page == "health":  # the API and the worker beat; a tenant sees no host name
                for kind in ("api", "worker"):
                    live = f'#process-kinds tr[data-kind="{kind}"] [data-live]'
                    b.wait(lambda css=live: int(b.text(css) or 0) >= 1, 30, f"a live {kind}")
                host_ids = rf"{re.escape(socket.gethostname())}:\d+:"  # host:pid:random, never shown to a tenant
                assert not re.search(host_ids, b.d.page_source)
        assert b.csp_violations() == []  # the pages visited without a screenshot pair too
