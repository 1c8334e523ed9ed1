"""The composer and its confirmation with the keyboard only (issue 33 "keyboard reachable";
docs/CONSOLE.md "Accessibility"), in headless Chromium against a real `notee api`: from the top of
the page, Tab reaches every control of the composer in the order the page shows them (top to bottom,
then left to right; a radio group is one stop), Space opens the rich fields and ticks a checkbox,
Shift+Tab goes back one control, the arrow keys on the template picker do not load another template
(only its button does), Enter on "Review" opens the confirmation, Tab reaches its Send
before its "Change something", and Space on Send publishes. Every focused control shows a visible
focus ring (an outline of at least 2 px), and nothing on the way violates the console's CSP."""

from __future__ import annotations

import secrets
from typing import Any

import httpx
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from tests.support import browser
from tests.support.logscan import remember_secret
from tests.support.registry import admin_headers, bearer

# The focused element: a name to compare, where it is, and whether its focus ring shows.
FOCUSED = """
const el = document.activeElement;
if (!el || el === document.body) { return null; }
const s = getComputedStyle(el), r = el.getBoundingClientRect();
const name = el.name || el.id || (el.tagName.toLowerCase() + ':' + el.textContent.trim().slice(0, 40));
return {name: name, form: el.form ? el.form.id : (el.closest('form') ? el.closest('form').id : null),
        inForm: !!el.closest('#publish'), top: r.top + window.scrollY, left: r.left + window.scrollX,
        ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2, visible: el.matches(':focus-visible')};
"""
# The composer's controls a keyboard should reach, in document order: every visible control, and of
# a radio group the checked one only (arrow keys move inside a group; Tab leaves it).
CONTROLS = """
const seen = new Set();
return Array.from(document.querySelectorAll('#publish a[href], #publish input:not([type=hidden]), #publish select, '
                                          + '#publish textarea, #publish button, #publish summary'))
  .filter(el => el.getClientRects().length > 0 && !el.disabled)
  .filter(el => {
    if (el.type !== 'radio') { return true; }
    if (seen.has(el.name)) { return false; }
    seen.add(el.name);
    return true;
  })
  .map(el => el.type === 'radio' ? el.name : (el.name || el.id || el.tagName.toLowerCase() + ':' + el.textContent.trim().slice(0, 40)));
"""


def _tenant(api: httpx.Client, settings) -> tuple[str, str]:
    service = "K" + secrets.token_hex(5).upper()
    r = api.post(
        "/v1/admin/services",
        json={"service": service, "display_name": "Keyboard", "timezone": "UTC"},
        headers=admin_headers(settings),
    )
    assert r.status_code == 201, r.text
    key = api.post(f"/v1/admin/services/{service}/api-keys", json={}, headers=admin_headers(settings)).json()["api_key"]
    remember_secret(key)
    for type_ in ("news", "weather"):  # two to choose from: the arrow keys must not load the other
        r = api.put(
            f"/v1/templates/TOPIC/{type_}", json={"title": "Hi {{ name }}", "body": "News"}, headers=bearer(key)
        )
        assert r.status_code == 201, r.text
    user = api.put("/v1/users/kb-1", json={"name": "Kim"}, headers=bearer(key)).json()["user_id"]
    r = api.post(
        f"/v1/users/{user}/devices", json={"token": f"kb-{secrets.token_hex(8)}", "os": "AOS"}, headers=bearer(key)
    )
    assert r.status_code in (200, 201), r.text
    assert api.put(f"/v1/users/{user}/subscriptions/topic/news/sports", headers=bearer(key)).status_code in (200, 201)
    return service, key


def _press(b: browser.Browser, *keys: str) -> dict[str, Any] | None:
    ActionChains(b.d).send_keys(*keys).perform()
    return b.d.execute_script(FOCUSED)


def _shift_tab(b: browser.Browser) -> dict[str, Any] | None:
    ActionChains(b.d).key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT).perform()
    return b.d.execute_script(FOCUSED)


def _from_the_top(b: browser.Browser) -> None:
    """Focus before the page's first control, as a page just opened has it."""
    b.d.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);")


def _check_ring(focused: dict[str, Any], where: str) -> None:
    assert focused["ring"] and focused["visible"], (where, focused)  # a visible focus ring


def _compose_by_keyboard(b: browser.Browser) -> list[dict[str, Any]]:
    """Tab through the composer from the top to its Review button, filling it in on the way; the
    controls inside the form in the order Tab reached them."""
    typed = {"topic": "sports", "var.name": "Kim", "payload.badge": "4"}
    reached: list[dict[str, Any]] = []
    _from_the_top(b)
    for _ in range(120):
        focused = _press(b, Keys.TAB)
        assert focused is not None, "Tab left the page before reaching Review"
        _check_ring(focused, "composer")
        if focused["inForm"]:
            reached.append(focused)
        name = focused["name"]
        if name == "template":  # the arrow keys go through the choices without leaving the page
            b.d.execute_script("window.noteeSamePage = true")
            _press(b, Keys.ARROW_DOWN)
            _press(b, Keys.ARROW_UP)
            assert b.find("#pick-template").get_attribute("value") == "TOPIC/news"
            assert _press(b, Keys.TAB)["name"] == "pick-use"  # type: ignore[index]
            assert b.d.execute_script("return window.noteeSamePage === true"), "a key loaded a template"
        elif name in typed:
            _press(b, typed[name])
        elif name in ("platform_AOS", "platform_IOS"):
            _press(b, Keys.SPACE)  # tick Android and iOS
        elif name.startswith("summary:"):
            _press(b, Keys.SPACE)  # open the rich fields, so Tab goes through them
        elif name == "review":
            return reached
    raise AssertionError(f"Review never reached: {[r['name'] for r in reached]}")


def test_the_composer_and_its_confirmation_with_the_keyboard_only(processes, settings):
    api_proc = processes.api()
    api = httpx.Client(base_url=api_proc.url, timeout=30)
    service, key = _tenant(api, settings)
    with browser.Browser(api_proc.url, browser.artifacts("console-keyboard")) as b:
        b.viewport(1280, 800)
        b.visit(f"/console/s/{service}/publish", "sign-in")
        b.submit("sign-in", {"secret": key})
        b.visit(f"/console/s/{service}/publish?template=TOPIC/news", "compose")

        reached = _compose_by_keyboard(b)
        names = [r["name"] for r in reached]
        # every control of the form, each once, in document order
        assert names == b.d.execute_script(CONTROLS), names
        for must in (
            "target",
            "topic",
            "platform_AOS",
            "var.name",
            "when",
            "payload.kind",
            "payload.badge",
            "ttl_seconds",
        ):
            assert must in names, must
        # the order the page shows them: top to bottom, and left to right within a row
        places = [(round(r["top"]), round(r["left"])) for r in reached]
        for (top, left), (next_top, next_left), name in zip(places, places[1:], names[1:], strict=False):
            assert next_top > top + 2 or (abs(next_top - top) <= 2 and next_left > left), (name, places)
        b.record("compose-keyboard-review")

        # Shift+Tab goes back one control, Tab forward again
        back = _shift_tab(b)
        assert back is not None and back["name"] == names[-2], (back, names[-2])
        _check_ring(back, "shift+tab")
        assert _press(b, Keys.TAB)["name"] == "review"  # type: ignore[index]

        # Enter on Review: the confirmation, with what the keyboard filled in
        old = b.find("html")
        ActionChains(b.d).send_keys(Keys.ENTER).perform()
        b._wait_replaced(old)
        assert "sports" in b.text("#restated-target") and "Hi Kim" in b.text("#confirm-preview")
        assert '"platforms": ["AOS", "IOS"]' in b.text("#restated-target")
        badge = b.find('#confirm-preview .device[data-platform="IOS"] [data-fact="badge"]')
        assert badge.text == "4"

        # Tab to Send (before "Change something"), Space sends
        _from_the_top(b)
        order: list[str] = []
        for _ in range(60):
            focused = _press(b, Keys.TAB)
            assert focused is not None, f"Tab left the page before Send: {order}"
            _check_ring(focused, "confirmation")
            order.append(focused["name"])
            if focused["name"] == "send":
                break
        else:
            raise AssertionError(order)
        after = _press(b, Keys.TAB)
        assert after is not None and after["name"] == "button:Change something", after
        assert _shift_tab(b)["name"] == "send"  # type: ignore[index]
        b.record("confirm-keyboard-send")
        old = b.find("html")
        ActionChains(b.d).send_keys(Keys.SPACE).perform()
        b._wait_replaced(old)
        assert "/jobs/" in b.d.current_url, b.d.current_url
        jobs = api.get("/v1/jobs", headers=bearer(key)).json()["items"]
        assert len(jobs) == 1 and b.d.current_url.endswith(jobs[0]["job_id"])
        assert b.csp_violations() == []
