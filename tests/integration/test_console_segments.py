"""The console's segment pages (docs/CONSOLE.md "Segments"): over plain HTTP, the list with counts,
create (a taken name refused), edit, delete only after its confirmation page, the builder's estimate
endpoint under the session's CSRF rule, and another tenant's session reaching none of it (404); then
in a real headless Chromium, a tenant builds a segment, watches the estimate change, saves it and
finds it through the API, while a second tenant's console cannot see it."""

from __future__ import annotations

import json
import re
import secrets

import httpx
import pytest
from fastapi.testclient import TestClient
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from sqlalchemy import text

from notee.store.runtime import Runtime
from tests.support import browser
from tests.support.logscan import remember_secret
from tests.support.registry import new_service

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
PRO = [[{"tag": "plan", "op": "=", "value": "pro"}]]


def _tag(runtime: Runtime, service: str, user_id: str, value: str) -> None:
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, updated_at)"
                " VALUES (:s, :u, 'plan', 's', :v, UTC_TIMESTAMP(6))"
            ),
            {"s": service, "u": user_id, "v": value},
        )


def _people(put_user, add_device, runtime: Runtime, service: str) -> None:
    """pro-a (AOS + IOS), pro-b (AOS), free-c (IOS): plan tags written to the store."""
    for name, plan, oses in (
        ("pro-a", "pro", ("AOS", "IOS")),
        ("pro-b", "pro", ("AOS",)),
        ("free-c", "free", ("IOS",)),
    ):
        user_id = put_user(name)
        for os_ in oses:
            add_device(user_id, f"{name}-{secrets.token_hex(8)}", os_)
        _tag(runtime, service, user_id, plan)


def _signed_in(app, key: str) -> TestClient:
    c = TestClient(app, follow_redirects=False)
    form = c.get("/console/sign-in")
    r = c.post("/console/sign-in", data={"csrf": CSRF.search(form.text).group(1), "secret": key, "next": "/console/"})  # type: ignore[union-attr]
    assert r.status_code == 303, r.text
    return c


@pytest.fixture()
def shop(client, tenant, runtime):
    def put_user(name: str) -> str:
        return tenant.user(name)

    def add_device(user_id: str, token: str, os_: str) -> None:
        r = client.post(f"/v1/users/{user_id}/devices", json={"token": token, "os": os_}, headers=tenant.headers)
        assert r.status_code in (200, 201), r.text

    _people(put_user, add_device, runtime, tenant.service)
    return tenant


def test_segment_pages_over_http(app, client, shop, make_tenant):
    c = _signed_in(app, shop.api_key)
    base = f"/console/s/{shop.service}/segments"
    page = c.get(base)
    assert page.status_code == 200 and "No segments yet." in page.text
    csrf = CSRF.search(page.text).group(1)  # type: ignore[union-attr]

    counted = c.post(f"{base}/estimate.json", data={"csrf": csrf, "filter": json.dumps(PRO)})
    assert counted.status_code == 200
    assert counted.json() == {
        "users": 2,
        "devices": 3,
        "devices_by_platform": {"AOS": 2, "IOS": 1},
        "exact": True,
        "method": "mysql_count",
    }
    bad = c.post(
        f"{base}/estimate.json", data={"csrf": csrf, "filter": '[[{"tag": "plan", "op": "<", "value": true}]]'}
    )
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["loc"] == ["body", "filter", "0", "0", "op"]
    assert c.post(f"{base}/estimate.json", data={"csrf": "forged", "filter": json.dumps(PRO)}).status_code == 403

    assert "/console/static/segments.js" in c.get(f"{base}/new").text
    made = c.post(
        base, data={"csrf": csrf, "mode": "create", "name": "pros", "description": "", "filter": json.dumps(PRO)}
    )
    assert made.status_code == 303 and made.headers["location"].endswith("/segments?saved=pros")
    listed = c.get(base).text
    assert re.search(r'data-segment="pros">.*?data-field="users">2<', listed, re.S)
    taken = c.post(base, data={"csrf": csrf, "mode": "create", "name": "pros", "filter": json.dumps(PRO)})
    assert taken.status_code == 409 and "exists" in taken.text
    forged = c.post(base, data={"csrf": "nope", "mode": "update", "name": "pros", "filter": "[]"})
    assert forged.status_code == 403
    assert client.get("/v1/segments/pros", headers=shop.headers).json()["filter"] == PRO

    edit = c.get(f"{base}/pros/edit")
    assert edit.status_code == 200 and "readonly" in edit.text
    ios = [[{"attribute": "platform", "op": "=", "value": "IOS"}]]
    assert (
        c.post(base, data={"csrf": csrf, "mode": "update", "name": "pros", "filter": json.dumps(ios)}).status_code
        == 303
    )
    assert client.get("/v1/segments/pros", headers=shop.headers).json()["reach"]["users"] == 2

    other = make_tenant()
    o = _signed_in(app, other.api_key)
    o_csrf = CSRF.search(o.get(f"/console/s/{other.service}/segments").text).group(1)  # type: ignore[union-attr]
    assert o.get(base).status_code == 404
    assert o.get(f"{base}/pros/edit").status_code == 404
    assert o.post(f"{base}/pros/delete", data={"csrf": o_csrf}).status_code == 404
    assert o.post(f"{base}/estimate.json", data={"csrf": o_csrf, "filter": json.dumps(PRO)}).status_code == 404
    assert "pros" not in o.get(f"/console/s/{other.service}/segments").text
    assert o.get(f"/console/s/{other.service}/segments/pros/edit").status_code == 404

    confirm = c.get(f"{base}/pros/delete")
    assert confirm.status_code == 200 and "Delete segment pros?" in confirm.text
    assert client.get("/v1/segments/pros", headers=shop.headers).status_code == 200  # asking deleted nothing
    gone = c.post(f"{base}/pros/delete", data={"csrf": csrf})
    assert gone.status_code == 303 and client.get("/v1/segments/pros", headers=shop.headers).status_code == 404


def _estimate(b: browser.Browser) -> int:
    users = b.find("#estimate").get_attribute("data-users")
    return int(users) if users is not None else -1


def _new_tenant(api: httpx.Client, settings, name: str) -> tuple[str, str]:
    """A service made through the admin API and its key: (key, service)."""
    service = name + secrets.token_hex(4).upper()
    key = new_service(api, settings, service)["Authorization"].removeprefix("Bearer ")  # type: ignore[arg-type]
    remember_secret(key)
    return key, service


def test_a_tenant_builds_a_segment_in_a_real_browser(processes, runtime, settings):
    api_proc = processes.api()
    api = httpx.Client(base_url=api_proc.url, timeout=30)
    key, service = _new_tenant(api, settings, "SEG")
    other_key, other = _new_tenant(api, settings, "OTH")
    auth = {"Authorization": f"Bearer {key}"}

    def put_user(name: str) -> str:
        r = api.put(f"/v1/users/{name}", json={"name": name}, headers=auth)
        assert r.status_code in (200, 201), r.text
        return str(r.json()["user_id"])

    def add_device(user_id: str, token: str, os_: str) -> None:
        r = api.post(f"/v1/users/{user_id}/devices", json={"token": token, "os": os_}, headers=auth)
        assert r.status_code in (200, 201), r.text

    _people(put_user, add_device, runtime, service)
    with browser.Browser(api_proc.url, browser.artifacts("console-segments")) as b:
        b.visit(f"/console/s/{service}/segments/new", "segment-sign-in")
        b.submit("sign-in", {"secret": key})
        assert b.d.current_url.endswith(f"/console/s/{service}/segments/new")
        b.wait(lambda: b.find("#estimate").get_attribute("data-error"), 15, "the empty builder is refused")

        row = b.find("#builder .predicate")
        row.find_element(By.CSS_SELECTOR, "input.key").send_keys("plan")
        row.find_element(By.CSS_SELECTOR, "input.value").send_keys("pro")
        b.wait(lambda: _estimate(b) == 2, 15, "plan = pro reaches 2 users")
        assert "3 devices (AOS 2, IOS 1)" in b.text("#estimate")
        b.record("segment-builder-one")

        b.find("#builder .add-predicate").click()  # AND platform = IOS
        second = b.d.find_elements(By.CSS_SELECTOR, "#builder .predicate")[1]
        Select(second.find_element(By.CSS_SELECTOR, "select.subject")).select_by_value("platform")
        second.find_element(By.CSS_SELECTOR, "input.value").send_keys("IOS")
        b.wait(lambda: _estimate(b) == 1, 15, "and platform = IOS narrows it to pro-a")

        b.find("#builder .add-group").click()  # OR plan = free
        groups = b.d.find_elements(By.CSS_SELECTOR, "#builder .group")
        assert len(groups) == 2
        groups[1].find_element(By.CSS_SELECTOR, "input.key").send_keys("plan")
        groups[1].find_element(By.CSS_SELECTOR, "input.value").send_keys("free")
        b.wait(lambda: _estimate(b) == 2, 15, "or plan = free adds free-c")
        second.find_element(By.CSS_SELECTOR, ".remove-predicate").click()  # drop the platform again
        b.wait(lambda: _estimate(b) == 3, 15, "plan = pro or plan = free: all three")
        b.record("segment-builder-two-groups")

        b.submit("segment-form", {"name": "pro-or-free", "description": "built in Chromium"})
        assert b.d.current_url.endswith("/segments?saved=pro-or-free")
        assert b.text('tr[data-segment="pro-or-free"] [data-field="users"]') == "3"
        b.record("segments")
        saved = api.get("/v1/segments/pro-or-free", headers=auth).json()
        assert saved["filter"] == [
            [{"tag": "plan", "op": "=", "value": "pro"}],
            [{"tag": "plan", "op": "=", "value": "free"}],
        ]
        assert saved["reach"]["users"] == 3 and saved["description"] == "built in Chromium"

        b.click(b.find('tr[data-segment="pro-or-free"] a[href$="/edit"]'))  # the builder reads it back
        assert len(b.d.find_elements(By.CSS_SELECTOR, "#builder .group")) == 2
        b.wait(lambda: _estimate(b) == 3, 15, "the saved filter's estimate")
        b.phone()  # the builder fits a phone's width
        b.visit(f"/console/s/{service}/segments/new", "segment-builder-phone")
        assert b.horizontal_overflow() == 0

        b.visit(f"/console/s/{service}/segments", "segments-before-delete")
        b.click(b.find('tr[data-segment="pro-or-free"] a.delete'))  # asks first
        assert api.get("/v1/segments/pro-or-free", headers=auth).status_code == 200
        b.record("segment-delete-confirm")
        b.submit("delete-segment")
        assert b.text("#deleted") == "Deleted segment pro-or-free."
        assert api.get("/v1/segments/pro-or-free", headers=auth).status_code == 404
        api.put("/v1/segments/kept", json={"filter": saved["filter"]}, headers=auth)
        b.click(b.find("#who + form button"))  # sign out

        b.visit(f"/console/s/{other}/segments", "segment-other-sign-in")
        b.submit("sign-in", {"secret": other_key})
        assert "kept" not in b.find("main").text and "No segments yet." in b.d.page_source
        b.visit(f"/console/s/{service}/segments", "segment-other-tenant")
        assert "kept" not in b.find("main").text and b.find("h1").text == "Error"
        b.visit(f"/console/s/{service}/segments/kept/edit", "segment-other-edit")
        assert b.find("h1").text == "Error" and "plan" not in b.d.page_source
    assert api.get("/v1/segments", headers={"Authorization": f"Bearer {other_key}"}).json()["items"] == []
