"""The console as a campaign tool (issue 33, docs/CONSOLE.md "Compose and follow"), over HTTP:
editing a template keeps every field it has; a scheduled job's send_at shows in the service's zone
and UTC with the time left, and a local-time publish its window; the composer previews and counts
any target, restates it before sending, sends once per page (Idempotency-Key) and warns before
sending to nobody; a job's page breaks its failures down by reason and platform and links its dead
letters; another tenant's ids are 404 and nothing of it leaks."""

from __future__ import annotations

import re
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient

from notee.store import deadletter
from tests.support.fanout import topic_job

CSRF = re.compile(r'name="csrf" value="([^"]+)"')

FULL_TEMPLATE: dict[str, Any] = {
    "title": "Hi {{ name | capitalize }}",
    "body": "{% if items.size > 0 %}You have {{ items.size }}:{% for i in items %} {{ i.name }}{% endfor %}{% else %}Nothing{% endif %}\nBye",
    "data": {"screen": "inbox", "ref": "{{ ref }}"},
    "defaults": {"name": "there", "ref": "r0"},
    "ttl_seconds": 3600,
    "priority": "normal",
    "quiet_hours": "drop",
    "variants": {
        "fr": {"title": "Salut {{ name }}", "body": "Bonjour", "data": {"screen": "boite"}},
        "de": {"title": "Hallo {{ name }}", "body": "Guten Tag"},
    },
    "payload": {
        "image": "https://example.com/a.png",
        "sound": "chime",
        "badge": 3,
        "link": "app://inbox/{{ ref }}",
        "category": "MESSAGE",
        "collapse_key": "inbox",
        "android": {"channel_id": "news", "color": "#112233"},
        "ios": {"thread_id": "t1", "subtitle": "Sub {{ name }}", "interruption_level": "time-sensitive"},
    },
}


class _Form(HTMLParser):
    """The named controls of one form (by id), as a browser would submit them."""

    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id, self.inside, self.fields = form_id, False, {}
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        name = a.get("name")
        if tag == "input" and name and (a.get("type") not in ("checkbox", "radio") or "checked" in a):
            self.fields[name] = a.get("value") or ""
        elif tag == "textarea" and name:
            self._textarea = name
            self.fields[name] = ""
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and ("selected" in a or self._select not in self.fields):
            self.fields[self._select] = a.get("value") or ""
            self._pending_option = "value" not in a

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data
        elif self._select and getattr(self, "_pending_option", False):
            self.fields[self._select] = data
            self._pending_option = False

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            if self._textarea:  # the parser keeps the newline after <textarea>; browsers drop it
                self.fields[self._textarea] = self.fields[self._textarea].removeprefix("\n")
            self._textarea = None
        elif tag == "select":
            self._select = None
        elif tag == "form":
            self.inside = False


def form_fields(html: str, form_id: str) -> dict[str, str]:
    parser = _Form(form_id)
    parser.feed(html)
    assert parser.fields, f"no form #{form_id} on the page"
    return parser.fields


def _browser(app) -> TestClient:
    return TestClient(app, follow_redirects=False)


def sign_in(app, key: str) -> TestClient:
    c = _browser(app)
    page = c.get("/console/sign-in")
    r = c.post("/console/sign-in", data={"csrf": CSRF.search(page.text).group(1), "secret": key, "next": "/console/"})
    assert r.status_code == 303, r.text
    return c


def _csrf(c: TestClient, path: str) -> str:
    return CSRF.search(c.get(path).text).group(1)


def _without_version(t: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in t.items() if k not in ("version", "updated_at", "title", "created")}


def test_editing_a_template_in_the_console_keeps_every_field(app, client, tenant):
    service, headers = tenant
    r = client.put("/v1/templates/TOPIC/digest", json=FULL_TEMPLATE, headers=headers)
    assert r.status_code in (200, 201), r.text
    before = client.get("/v1/templates/TOPIC/digest", headers=headers).json()
    c = sign_in(app, tenant.api_key)
    page = c.get(f"/console/s/{service}/templates/TOPIC/digest/edit")
    assert page.status_code == 200
    form = form_fields(page.text, "new-template")
    form["title"] = "Hello {{ name }}, edited in the console"
    r = c.post(f"/console/s/{service}/templates", data=form)
    assert r.status_code == 303, r.text
    after = client.get("/v1/templates/TOPIC/digest", headers=headers).json()
    assert after["title"] == "Hello {{ name }}, edited in the console"
    assert _without_version(after) == _without_version(before)
    for field in ("variants", "quiet_hours", "ttl_seconds", "payload", "priority", "data", "defaults", "body"):
        assert after[field] == FULL_TEMPLATE[field] or field == "variants", field
    assert after["variants"] == before["variants"] and set(after["variants"]) == {"fr", "de"}

    # A form that does not carry a field at all (an older page) keeps the stored value too.
    r = c.post(
        f"/console/s/{service}/templates",
        data={"csrf": form["csrf"], "method": "TOPIC", "type": "digest", "title": "Short", "body": before["body"]},
    )
    assert r.status_code == 303, r.text
    kept = client.get("/v1/templates/TOPIC/digest", headers=headers).json()
    assert (kept["title"], kept["variants"], kept["quiet_hours"], kept["ttl_seconds"], kept["payload"]) == (
        "Short",
        before["variants"],
        "drop",
        3600,
        before["payload"],
    )


def test_another_tenants_template_edit_page_is_404(app, client, tenant, make_tenant):
    other = make_tenant()
    other.template("TOPIC", "secretdigest", title="Secret {{name}}", body="b")
    c = sign_in(app, tenant.api_key)
    for path in [
        f"/console/s/{other.service}/templates/TOPIC/secretdigest/edit",
        f"/console/s/{tenant.service}/templates/TOPIC/secretdigest/edit",
    ]:
        r = c.get(path)
        assert r.status_code == 404 and "Secret" not in r.text and other.service not in r.text, path


@pytest.mark.tenant(credentials=True, timezone="Asia/Seoul")
def test_a_scheduled_job_shows_its_send_at_in_the_service_zone_and_utc_with_a_countdown(app, client, tenant):
    service, headers = tenant
    tenant.template("TOPIC", "news", title="Hi {{name}}", body="b")
    at = (datetime.now(UTC) + timedelta(hours=2, minutes=30)).replace(second=0, microsecond=0)
    r = client.post(
        "/v1/topics/news/sports/publish",
        json={"variables": {"name": "x"}, "send_at": at.isoformat()},
        headers=headers,
    )
    assert r.status_code == 202 and r.json()["state"] == "scheduled", r.text
    job_id = r.json()["job_id"]
    local = at.astimezone(ZoneInfo("Asia/Seoul"))
    c = sign_in(app, tenant.api_key)
    utc_text, local_text = f"{at:%Y-%m-%d %H:%M}:00 UTC", f"{local:%Y-%m-%d %H:%M} KST (Asia/Seoul)"
    listed = c.get(f"/console/s/{service}/jobs")
    assert utc_text in listed.text and local_text in listed.text
    assert re.search(r"in 2 h (29|30) min", listed.text), "the time left"
    item = c.get(f"/console/s/{service}/jobs.json").json()["items"][0]
    assert item["when"]["send_at"]["utc"] == utc_text and item["when"]["send_at"]["local"] == local_text
    page = c.get(f"/console/s/{service}/jobs/{job_id}")
    assert f'data-until="{int(at.timestamp())}"' in page.text and local_text in page.text and utc_text in page.text
    assert 'id="cancel"' in page.text and 'id="cancel" data-open-only hidden' not in page.text  # cancellable
    health = c.get("/console/health").text  # a scheduled job is not queued work
    assert re.search(r'data-queue="scheduled_jobs">1 ', health) and 'data-queue="queued">0<' in health, health
    assert not re.search(r'data-queue="held">0 ', health)

    r = client.post(
        "/v1/topics/news/sports/publish", json={"variables": {"name": "x"}, "local_time": "09:00"}, headers=headers
    )
    assert r.status_code == 202, r.text
    page = c.get(f"/console/s/{service}/jobs/{r.json()['job_id']}")
    assert 'id="local-window"' in page.text and "09:00 on each recipient" in page.text


@pytest.mark.tenant(credentials=True)
def test_the_composer_previews_restates_and_sends_once(app, client, runtime, tenant, make_tenant):
    service, headers = tenant
    tenant.template(
        "TOPIC",
        "news",
        title="Hi {{ name }}",
        body="Body for {{ name }}",
        variants={"fr": {"title": "Salut {{ name }}", "body": "Corps"}},
    )
    for n in range(3):
        user = tenant.user(devices=[(f"tok-{secrets.token_hex(8)}", "AOS" if n else "IOS")])
        r = client.put(f"/v1/users/{user}/subscriptions/topic/news/sports", headers=headers)
        assert r.status_code in (200, 201), r.text
    c = sign_in(app, tenant.api_key)
    page = c.get(f"/console/s/{service}/publish?template=TOPIC/news")
    assert page.status_code == 200 and 'name="var.name"' in page.text
    form = form_fields(page.text, "publish") | {"topic": "sports", "var.name": "Ann"}
    key = form["idempotency_key"]
    assert key

    preview = c.post(f"/console/s/{service}/publish/preview.json", data=form)
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert body["reach"]["users"] == 3 and not body["zero"]
    locales = {v["locale"]: v for v in body["variants"]}
    assert set(locales) == {"default", "fr"} and locales["default"]["title"] == "Hi Ann"
    assert locales["fr"]["title"] == "Salut Ann"
    sizes = locales["default"]["platforms"]
    assert (
        sizes["AOS"]["limit"] == 4096 and 0 < sizes["AOS"]["bytes"] < 4096 and sizes["IOS"]["limit"] > 0
    )  # iOS goes through FCM with only its credentials

    # Review: the confirmation restates target, reach, time and message; nothing is written yet.
    review = c.post(f"/console/s/{service}/publish", data=form)
    assert review.status_code == 200 and 'id="confirm"' in review.text
    assert "3 users" in review.text and "sports" in review.text and "Hi Ann" in review.text and ">now<" in review.text
    assert client.get("/v1/jobs", headers=headers).json()["items"] == []
    confirm = form_fields(review.text, "confirm")
    assert confirm["idempotency_key"] == key and confirm["confirmed"] == "1"
    first = c.post(f"/console/s/{service}/publish", data=confirm)
    second = c.post(f"/console/s/{service}/publish", data=confirm)  # a double click
    assert first.status_code == second.status_code == 303
    assert first.headers["location"] == second.headers["location"]
    listed = client.get("/v1/jobs", headers=headers).json()["items"]
    assert len(listed) == 1 and first.headers["location"].endswith(listed[0]["job_id"])

    # Back from a confirmation to change something: a new page, a new Idempotency-Key.
    back = c.post(f"/console/s/{service}/publish/edit", data=confirm)
    assert back.status_code == 200 and form_fields(back.text, "publish")["topic"] == "sports"
    assert form_fields(back.text, "publish")["idempotency_key"] not in ("", key)

    # A typo'd topic reaches nobody: the confirmation warns and sends only when told to.
    typo = form | {"topic": "sprots", "idempotency_key": secrets.token_urlsafe(12)}
    review = c.post(f"/console/s/{service}/publish", data=typo)
    assert review.status_code == 200 and 'id="zero-warning"' in review.text
    confirm = form_fields(review.text, "confirm")
    r = c.post(f"/console/s/{service}/publish", data=confirm)
    assert r.status_code == 422 and "reaches nobody" in r.text
    assert len(client.get("/v1/jobs", headers=headers).json()["items"]) == 1
    r = c.post(f"/console/s/{service}/publish", data=confirm | {"zero_ok": "1"})
    assert r.status_code == 303
    assert len(client.get("/v1/jobs", headers=headers).json()["items"]) == 2

    # Bad input: the API model's 422, in the error format, nothing written.
    bad = form | {"target": "filter", "filter": "[[{not json"}
    r = c.post(f"/console/s/{service}/publish/preview.json", data=bad)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
    r = c.post(f"/console/s/{service}/publish", data=bad | {"confirmed": "1"})
    assert r.status_code == 422
    r = c.post(f"/console/s/{service}/publish/preview.json", data=form | {"when": "local", "local_time": "25:00"})
    assert r.status_code == 422 and "local_time" in r.text
    assert len(client.get("/v1/jobs", headers=headers).json()["items"]) == 2

    # A second tenant's session: every composer route of this service is 404 and shows nothing.
    other = make_tenant()
    o = sign_in(app, other.api_key)
    token = _csrf(o, f"/console/s/{other.service}/publish")
    for path in ["publish/preview.json", "publish", "publish/edit"]:
        r = o.post(f"/console/s/{service}/{path}", data=form | {"csrf": token, "confirmed": "1"})
        assert r.status_code == 404 and "Hi Ann" not in r.text and service not in r.text, path
    assert o.get(f"/console/s/{service}/publish").status_code == 404
    assert len(client.get("/v1/jobs", headers=headers).json()["items"]) == 2


@pytest.mark.tenant(credentials=True)
def test_the_composer_reaches_audiences_filters_segments_and_users(app, client, tenant):
    service = tenant.service
    tenant.template("TOPIC", "news", title="Hi", body="b")
    for n in range(2):
        tenant.user(f"aud-{n}", devices=[(f"tok-{secrets.token_hex(8)}", "AOS")])
    c = sign_in(app, tenant.api_key)
    form = form_fields(c.get(f"/console/s/{service}/publish?template=TOPIC/news").text, "publish")
    r = c.post(
        f"/console/s/{service}/publish/preview.json", data=form | {"target": "users", "users": "aud-0\naud-1\nnobody"}
    )
    assert r.status_code == 200, r.text
    assert (r.json()["reach"]["users"], r.json()["reach"]["devices"], r.json()["reach"]["unknown_users"]) == (2, 2, 1)
    r = c.post(
        f"/console/s/{service}/publish/preview.json",
        data=form | {"target": "users", "users": "aud-0", "platform_IOS": "1"},
    )
    assert r.status_code == 200 and r.json()["reach"]["devices"] == 0 and r.json()["zero"]
    r = c.post(f"/console/s/{service}/publish/preview.json", data=form | {"target": "segments", "include": "nosuch"})
    assert r.status_code == 422 and "nosuch" in r.text


@pytest.mark.tenant(credentials=True)
def test_a_jobs_page_breaks_failures_down_by_reason_and_platform(app, client, runtime, tenant, make_tenant):
    service = tenant.service
    key = tenant.template("TOPIC", "news", title="Hi {{name}}", body="b")["notification_key"]
    job = topic_job(runtime, service, key, "sports")
    other_job = topic_job(runtime, service, key, "other")
    letters = [("Unavailable", "AOS")] * 3 + [("InternalServerError", "IOS")] * 2 + [("Unavailable", "IOS")]
    with runtime.sessions.begin() as s:
        deadletter.record(
            s,
            [
                deadletter.DeadLetter(
                    service, j, f"tok-{i}", os, "fcm" if os == "AOS" else "apns", reason, 4, {"title": "t"}
                )
                for i, ((reason, os), j) in enumerate(
                    [(x, job.job_id) for x in letters] + [(("Unavailable", "AOS"), other_job.job_id)]
                )
            ],
            now=datetime.now(UTC).replace(tzinfo=None),
        )
    c = sign_in(app, tenant.api_key)
    view = c.get(f"/console/s/{service}/jobs/{job.job_id}.json").json()
    assert view["failures"] == [
        {"reason": "Unavailable", "platform": "AOS", "count": 3},
        {"reason": "InternalServerError", "platform": "IOS", "count": 2},
        {"reason": "Unavailable", "platform": "IOS", "count": 1},
    ]
    assert view["dead_lettered"] == 6
    api = client.get(f"/v1/jobs/{job.job_id}/failures", headers=tenant.headers)  # the same read in the API
    assert api.status_code == 200 and api.json() == {
        "job_id": job.job_id,
        "dead_lettered": 6,
        "items": view["failures"],
    }
    page = c.get(f"/console/s/{service}/jobs/{job.job_id}")
    assert page.status_code == 200 and 'id="failure-chart"' in page.text and "<svg" in page.text
    assert f"dead-letters?job={job.job_id}" in page.text and 'id="replay-job"' in page.text
    letters_page = c.get(f"/console/s/{service}/dead-letters?job={job.job_id}")
    assert letters_page.text.count("data-letter=") == 6
    assert c.get(f"/console/s/{service}/dead-letters").text.count("data-letter=") == 7

    other = make_tenant()
    stolen = client.get(f"/v1/jobs/{job.job_id}/failures", headers=other.headers)
    missing = client.get(f"/v1/jobs/{uuid.uuid4()}/failures", headers=other.headers)
    assert stolen.status_code == missing.status_code == 404 and "Unavailable" not in stolen.text
    assert stolen.json()["error"]["code"] == missing.json()["error"]["code"] == "not_found"
    o = sign_in(app, other.api_key)
    for path in [f"jobs/{job.job_id}", f"jobs/{job.job_id}.json", f"dead-letters?job={job.job_id}"]:
        r = o.get(f"/console/s/{other.service}/{path}")
        assert r.status_code in (200, 404), path
        assert "Unavailable" not in r.text and "tok-" not in r.text, path
        assert o.get(f"/console/s/{service}/{path}").status_code == 404
    token = _csrf(o, f"/console/s/{other.service}/jobs")
    r = o.post(f"/console/s/{other.service}/dead-letters/replay", data={"csrf": token, "job": job.job_id})
    assert r.status_code == 303 and "replayed=0" in r.headers["location"]
    assert c.get(f"/console/s/{service}/jobs/{job.job_id}.json").json()["dead_lettered"] == 6
