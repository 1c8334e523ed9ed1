"""The web console in a real browser (issue 16.5): headless Chromium from Debian's packages, driven by
selenium, against a real `notee api` and `notee worker` with the FCM emulator.

One walk through the console as an operator and a tenant would: a wrong key cannot sign in; the
admin creates a service and its key; the tenant signs in with that key, creates a template,
publishes to a topic and watches the job reach done with the right counts while the page updates
itself (no reload); cancels a long running job; replays a dead letter; opens every page, also at a
phone's width (no horizontal overflow); never sees another tenant's data. A screenshot of every page
and each page's load time (Navigation Timing) are kept as CI artifacts
(``.run/artifacts/console/console/``, or ``$NOTEE_CONSOLE_ARTIFACTS/console/``).
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import httpx
from selenium.webdriver.common.by import By

from tests.support import browser
from tests.support.fanout import seed_topic, topic_job
from tests.support.logscan import remember_secret
from tests.support.registry import admin_headers, bearer, random_token, shared_service_account

PAGES = ["jobs", "publish", "templates", "topics", "dead-letters", "calendar"]

JOB_PAGE = re.compile(r"/jobs/([0-9a-f-]{36})$")


def _state(b: browser.Browser) -> str:
    return b.text('[data-field="state"]')


def _job_page(b: browser.Browser) -> str:
    """The id of the job whose page the publish form redirected to (waits for that page's URL: the
    form's own URL can still be current for a moment after the click)."""
    found = b.wait(lambda: JOB_PAGE.search(b.d.current_url), 60, "the publish to open its job's page")
    return found.group(1)


def _count(b: browser.Browser, field: str) -> int:
    return int(b.text(f'[data-field="{field}"]') or 0)


def _subscribe_users(api: httpx.Client, key: str, tokens: list[str]) -> None:
    """Real users with one Android device each, subscribed to news/sports and to a daily digest."""
    for token in tokens:
        r = api.put(f"/v1/users/u-{token}", json={"name": "Browser"}, headers=bearer(key))
        assert r.status_code in (200, 201), r.text
        user = r.json()["user_id"]
        r = api.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS"}, headers=bearer(key))
        assert r.status_code in (200, 201), r.text
        r = api.put(f"/v1/users/{user}/subscriptions/topic/news/sports", headers=bearer(key))
        assert r.status_code in (200, 201), r.text
        cycle = {"days": ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"], "hour": 9, "minute": 30}
        r = api.put(f"/v1/users/{user}/subscriptions/cycle/digest", json=cycle, headers=bearer(key))
        assert r.status_code in (200, 201), r.text


def test_the_console_in_a_real_browser(processes, emulator, runtime, settings):
    api_proc = processes.api()
    api = httpx.Client(base_url=api_proc.url, timeout=30)
    admin_token = settings.admin_token.get_secret_value()
    service = "W" + secrets.token_hex(5).upper()
    folder = browser.artifacts("console")
    with browser.Browser(api_proc.url, folder) as b:
        # --- sign-in: a wrong key is refused, the cookie is HttpOnly and SameSite=Strict -------------
        b.visit("/console/", "sign-in")
        assert b.d.current_url.endswith("/console/sign-in?next=/console/")
        b.submit("sign-in", {"secret": "nk_0123456789abcdef_" + secrets.token_urlsafe(32)})
        b.record("sign-in-refused")
        assert "Unknown admin token or API key" in b.text("#sign-in-error")
        assert not [c for c in b.d.get_cookies() if c["name"] == "notee_console"]

        b.submit("sign-in", {"secret": admin_token})
        b.record("services-signed-in")
        [cookie] = [c for c in b.d.get_cookies() if c["name"] == "notee_console"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and admin_token not in cookie["value"]
        assert "notee_console" not in b.d.execute_script("return document.cookie")  # no script can read it

        # --- admin: a service and its key -----------------------------------------------------------
        b.submit("new-service", {"service": service, "display_name": "Browser shop", "timezone": "Europe/Berlin"})
        assert b.find(f'tr[data-service="{service}"]')
        b.find(f'tr[data-service="{service}"] input[name="label"]').send_keys("browser")
        b.click(b.find(f'tr[data-service="{service}"] form[action$="/keys"] button'))
        key = b.text("#new-key code")
        remember_secret(key)  # the session's log scan looks for it in every log
        assert key.startswith("nk_")
        b.visit(f"/console/services?q={service}", "services")  # the key is not on the page any more
        assert key not in b.d.page_source
        r = api.put(
            f"/v1/admin/services/{service}/credentials/fcm",
            json={"service_account": shared_service_account()},
            headers=admin_headers(settings),
        )
        assert r.status_code == 200, r.text
        b.visit("/console/health", "health-admin")
        b.click(b.find("#who + form button"))  # sign out

        # --- the tenant signs in with its key and creates a template ---------------------------------
        b.visit(f"/console/s/{service}/templates", "sign-in-tenant")
        b.submit("sign-in", {"secret": key})
        assert b.d.current_url.endswith(f"/console/s/{service}/templates")
        b.submit(
            "new-template",
            {"method": "TOPIC", "type": "news", "title": "Hi {{name}}", "body": "Something new in sports"},
        )
        b.record("templates")
        assert "Saved TOPIC news" in b.text("#saved")
        assert b.find('tr[data-template="TOPIC/news"]').text.startswith("TOPIC news Hi {{name}}")
        r = api.put(
            "/v1/templates/CYCLE/digest",
            json={"title": "Your digest", "body": "Good morning"},
            headers=bearer(key),
        )
        assert r.status_code == 201, r.text
        notification_key = api.get("/v1/templates/TOPIC/news", headers=bearer(key)).json()["notification_key"]

        # --- subscribers: 2 real subscriptions + 38 seeded rows; one device's pushes always fail -----
        real = [random_token("real"), random_token("failing")]
        _subscribe_users(api, key, real)
        seeded = seed_topic(runtime, service, "news", notification_key, "sports", 38)
        emulator.fault("fcm", 429, match=real[1], times=1000)  # the device's own rate: no Retry-After
        b.visit(f"/console/s/{service}/topics", "topics")
        assert b.find('tr[data-type="TOPIC/news"] td.num').text == "2"  # the two real users (seeded rows count nothing)
        assert b.find('tr[data-type="CYCLE/digest"] td.num').text == "2"
        assert b.find('tr[data-topic="news/sports"] td.num').text == "2"
        listed = api.get("/v1/topics", headers=bearer(key)).json()["items"]
        assert [(t["type"], t["topic"], t["subscribers"]) for t in listed] == [("news", "sports", 2)]
        b.visit(f"/console/s/{service}/calendar", "calendar")
        [due] = b.d.find_elements(By.CSS_SELECTOR, '[data-due="digest"]')  # 09:30 Berlin comes once a day
        assert "Europe/Berlin" in due.text and due.text.endswith("· 2"), due.text

        # --- publish from the console; the job page follows it live while no worker runs yet ---------
        b.visit(f"/console/s/{service}/publish", "publish")
        b.submit("publish", {"topic": "sports", "var.name": "Browser"})
        b.record("publish-confirm")
        b.submit("confirm")  # the composer restates the publish before it sends
        job_id = _job_page(b)
        b.record("job-queued")
        assert _state(b) == "queued"
        b.d.execute_script("window.noteeSamePage = true")  # gone if the page reloads
        worker = processes.worker(service, lanes=1, NOTEE_FANOUT_FETCH_SIZE="100", NOTEE_FANOUT_SEND_CONCURRENCY="10")
        b.wait(lambda: _state(b) == "done", 120, "the job to reach done on the page")
        assert b.d.execute_script("return window.noteeSamePage === true"), "the page reloaded"
        b.record("job-done")
        assert (_count(b, "targeted"), _count(b, "sent"), _count(b, "failed")) == (40, 39, 1)
        truth = api.get(f"/v1/jobs/{job_id}", headers=bearer(key)).json()
        assert (truth["state"], truth["targeted"], truth["sent"], truth["failed"]) == ("done", 40, 39, 1)
        assert emulator.deliveries(seeded[0])["fcm"] == 1 and emulator.deliveries(real[0])["fcm"] == 1
        assert not b.find("#cancel").is_displayed()

        # --- a long job (3,000 devices, a slow provider) is cancelled while it runs ------------------
        seed_topic(runtime, service, "news", notification_key, "big", 3000)
        emulator.latency(50)  # 10 pushes in flight, 50 ms each: the 3,000 take ~15 s
        try:
            b.visit(f"/console/s/{service}/publish", "publish-long-job")
            b.submit("publish", {"topic": "big", "var.name": "Many"})
            b.find("#zero-ok").click()  # seeded rows are not in the topic's counters: its reach reads 0
            b.submit("confirm")
            big_id = _job_page(b)
            b.d.execute_script("window.noteeSamePage = true")
            b.wait(lambda: _count(b, "sent") > 0, 120, "the long job to send its first page")
            assert _state(b) == "running" and b.d.execute_script("return window.noteeSamePage === true")
            b.record("job-running")
            b.visit("/console/health", "health-busy")  # the worker holding the task shows on the health page
            [busy] = b.d.find_elements(By.CSS_SELECTOR, "#workers tbody tr")
            assert busy.find_element(By.CSS_SELECTOR, "td.num").text == "1", busy.text
            b.visit(f"/console/s/{service}/jobs/{big_id}", "job-before-cancel")
            assert _state(b) == "running"
            b.click(b.find("#cancel button"))
            b.record("job-cancelled")
            assert _state(b) == "cancelled"
            tasks = api.get(f"/v1/jobs/{big_id}", headers=bearer(key)).json()["tasks"]
            b.wait(lambda: _count(b, "tasks_done") == tasks, 120, "the cancelled job's running task to stop")
        finally:
            emulator.latency(0)
        big = api.get(f"/v1/jobs/{big_id}", headers=bearer(key)).json()
        assert big["state"] == "cancelled" and 0 < big["sent"] < 3000
        assert _count(b, "sent") == big["sent"]  # the page says what really happened

        # --- the jobs list shows both, updating itself ----------------------------------------------
        b.visit(f"/console/s/{service}/jobs", "jobs")
        rows = {r.get_attribute("data-job"): r for r in b.d.find_elements(By.CSS_SELECTOR, "tr[data-job]")}
        assert set(rows) == {job_id, big_id}
        before = b.find("#jobs").get_attribute("data-updated")
        b.wait(lambda: b.find("#jobs").get_attribute("data-updated") not in (None, before), 30, "a live refresh")
        assert b.find(f'tr[data-job="{job_id}"] [data-field="state"]').text == "done"
        assert b.find(f'tr[data-job="{big_id}"] [data-field="state"]').text == "cancelled"
        summary = {f: int(b.text(f'[data-sum="{f}"]')) for f in ("targeted", "sent", "failed", "dead_lettered")}
        assert summary == {
            "targeted": 40 + big["targeted"],
            "sent": 39 + big["sent"],
            "failed": 1 + big["failed"],
            "dead_lettered": 1,
        }, summary
        assert b.text('[data-sum="jobs"]') == "2 · 1 done, 1 cancelled"
        b.submit("job-filters", {"type": "news", "state": "cancelled"})
        b.record("jobs-filtered")
        assert [r.get_attribute("data-job") for r in b.d.find_elements(By.CSS_SELECTOR, "tr[data-job]")] == [big_id]
        assert "state=cancelled" in b.find("#jobs").get_attribute("data-poll")  # the live refresh keeps the filter
        before = b.find("#jobs").get_attribute("data-updated")
        b.wait(lambda: b.find("#jobs").get_attribute("data-updated") not in (None, before), 30, "a filtered refresh")
        assert [r.get_attribute("data-job") for r in b.d.find_elements(By.CSS_SELECTOR, "tr[data-job]")] == [big_id]

        # --- the dead letter of the failing device is replayed once the provider recovered ----------
        b.visit(f"/console/s/{service}/dead-letters", "dead-letters")
        letters = b.d.find_elements(By.CSS_SELECTOR, "tr[data-letter]")
        assert len(letters) == 1 and "gave up after 5 attempts" in letters[0].text
        emulator.reset()
        b.click(letters[0].find_element(By.CSS_SELECTOR, "button"))
        b.record("dead-letters-replayed")
        assert b.text("#replay-outcome") == "Replayed 1: delivered 1, pruned 0, failed again 0."
        assert not b.d.find_elements(By.CSS_SELECTOR, "tr[data-letter]")
        assert emulator.deliveries(real[1])["fcm"] == 1

        b.visit("/console/health", "health")
        assert b.text('[data-store="mysql"]') == "ok" and b.text('[data-store="cassandra"]') == "ok"

        # --- another tenant's data is never shown to this one ---------------------------------------
        other = "X" + secrets.token_hex(5).upper()
        r = api.post(
            "/v1/admin/services", json={"service": other, "display_name": "Other"}, headers=admin_headers(settings)
        )
        assert r.status_code == 201, r.text
        other_key = api.post(f"/v1/admin/services/{other}/api-keys", json={}, headers=admin_headers(settings)).json()[
            "api_key"
        ]
        remember_secret(other_key)
        other_tpl = api.put(
            "/v1/templates/TOPIC/privatenews", json={"title": "Private", "body": "b"}, headers=bearer(other_key)
        ).json()
        other_job = topic_job(runtime, other, other_tpl["notification_key"], "privatetopic", type_="privatenews")
        for path in [f"/console/s/{other}/{p}" for p in PAGES] + [
            f"/console/s/{other}/jobs/{other_job.job_id}",
            f"/console/s/{service}/jobs/{other_job.job_id}",
            "/console/services",
        ]:
            b.d.get(api_proc.url + path)
            page = b.d.page_source
            assert "Not Found" in page or "no such" in page, path
            assert "privatenews" not in page and "privatetopic" not in page and other_job.job_id not in page, path
        b.record("other-tenant-refused")
        b.visit(f"/console/s/{service}/jobs", "jobs-own-only")
        assert other_job.job_id not in b.d.page_source and other not in b.d.page_source

        # --- every page at a phone's width ----------------------------------------------------------
        b.phone()
        for page in PAGES:
            b.visit(f"/console/s/{service}/{page}", f"phone-{page}")
            assert b.horizontal_overflow() <= 0, page
            assert b.d.execute_script("return window.innerWidth") == browser.PHONE[0], page
        b.visit(f"/console/s/{service}/jobs/{job_id}", "phone-job")
        assert b.horizontal_overflow() <= 0
        b.visit("/console/health", "phone-health")
        assert b.horizontal_overflow() <= 0
        b.click(b.find("#who + form button"))
        b.record("phone-signed-out")
        b.submit("sign-in", {"secret": admin_token})
        b.visit(f"/console/services?q={service}", "phone-services")
        assert b.horizontal_overflow() <= 0
        row = f'tr[data-service="{service}"]'
        assert b.text(f'{row} [data-activity="jobs"]') == "2"
        assert b.text(f'{row} [data-activity="sent"]') == str(39 + big["sent"])

        worker.stop(timeout=30)
    api.close()

    timings: list[dict[str, Any]] = b.timings
    assert all(t.get("load_ms", 0) > 0 for t in timings), timings
    lines = [
        f"{t['page']:<24} {t['url']:<48} load {t['load_ms']:7.1f} ms  response {t['response_ms']:6.1f} ms"
        for t in timings
    ]
    (folder / "page-load-times.txt").write_text("\n".join(lines) + "\n")
    print("\nconsole page load times (Navigation Timing, headless Chromium):\n" + "\n".join(lines))
    assert key not in "".join(p.read_text(errors="replace") for p in folder.glob("*.txt"))
