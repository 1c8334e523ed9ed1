"""A real browser for the console's tests: Debian's headless Chromium (services/chromium.sh
installs /usr/bin/chromium and /usr/bin/chromedriver), driven by selenium through that chromedriver
(selenium never downloads a driver or a browser when given their paths).

``Browser`` keeps a screenshot of every page it visits and each page's load time as the browser
measured it (Navigation Timing: navigation start to the end of the load event), in ``folder``: for the
console's walks, ``artifacts(walk)``, the folder a CI uploads (``NOTEE_CONSOLE_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
REPO = Path(__file__).resolve().parents[2]
# Where the console's browser walks keep their screenshots (docs/CONSOLE.md "Screenshots"): a CI sets
# it to the folder it uploads as the run's artifacts; `.ci/run` prints it at its end.
ARTIFACTS_ENV = "NOTEE_CONSOLE_ARTIFACTS"
DEFAULT_ARTIFACTS = REPO / ".run" / "artifacts" / "console"
DESKTOP = (1280, 900)
PHONE = (390, 844)  # an iPhone 12-14's CSS viewport

_NAV_TIMING = """
const n = performance.getEntriesByType('navigation')[0];
return n ? {url: location.pathname, load_ms: n.loadEventEnd - n.startTime,
            response_ms: n.responseEnd - n.requestStart, dom_content_loaded_ms: n.domContentLoadedEventEnd - n.startTime,
            transfer_bytes: n.transferSize} : null;
"""


def _replaced(exc: WebDriverException) -> bool:
    """The element belonged to a document that has since been replaced (a navigation)."""
    return isinstance(exc, StaleElementReferenceException) or "does not belong to the document" in str(exc)


def artifacts(walk: str) -> Path:
    """The folder of one walk's screenshots and page-load times: ``<NOTEE_CONSOLE_ARTIFACTS or
    .run/artifacts/console>/<walk>``, emptied of an earlier run's files, so it holds this run's only."""
    folder = Path(os.environ.get(ARTIFACTS_ENV) or DEFAULT_ARTIFACTS) / walk
    if folder.exists():
        for old in [*folder.glob("*.png"), *folder.glob("page-load-times.*")]:
            old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


@dataclass
class Browser:
    base_url: str
    folder: Path
    timings: list[dict[str, Any]] = field(default_factory=list)
    shots: list[Path] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    _profile: str = ""
    driver: webdriver.Chrome | None = None

    def __enter__(self) -> Browser:
        if not available():
            raise RuntimeError(f"{CHROMIUM} or {CHROMEDRIVER} is missing: run services/chromium.sh (make test does)")
        self.folder.mkdir(parents=True, exist_ok=True)
        self._profile = tempfile.mkdtemp(prefix="notee-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self._profile}")
        options.add_argument(f"--window-size={DESKTOP[0]},{DESKTOP[1]}")
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(60)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.driver is not None:
            self.driver.quit()
        shutil.rmtree(self._profile, ignore_errors=True)
        (self.folder / "page-load-times.json").write_text(json.dumps(self.timings, indent=2))

    @property
    def d(self) -> webdriver.Chrome:
        assert self.driver is not None
        return self.driver

    # --- navigation ------------------------------------------------------------------------------

    def record(self, name: str) -> dict[str, Any]:
        """Screenshot the current page as ``<name>.png`` and keep its Navigation Timing."""
        WebDriverWait(self.d, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")
        timing: dict[str, Any] = {}
        for _ in range(50):  # loadEventEnd is 0 until the load event handlers returned
            timing = self.d.execute_script(_NAV_TIMING) or {}
            if timing.get("load_ms", 0) > 0:
                break
            time.sleep(0.05)
        timing["page"] = name
        self.timings.append(timing)
        path = self.folder / f"{name}.png"
        self.d.save_screenshot(str(path))
        self.shots.append(path)
        return timing

    def visit(self, path: str, name: str) -> dict[str, Any]:
        self.d.get(self.base_url + path)
        return self.record(name)

    def submit(self, form_id: str, fields: dict[str, str] | None = None, button: str = "button[type=submit]") -> None:
        for attempt in range(3):
            form = self.d.find_element(By.ID, form_id)
            try:
                for name, value in (fields or {}).items():
                    element = form.find_element(By.NAME, name)
                    if element.tag_name == "select":
                        element.find_element(By.XPATH, f".//option[normalize-space()='{value}']").click()
                    else:
                        element.clear()
                        element.send_keys(value)
                submit = form.find_element(By.CSS_SELECTOR, button)
                old = self.d.find_element(By.TAG_NAME, "html")
                submit.click()
            except (StaleElementReferenceException, WebDriverException) as exc:
                # The form belonged to a document replaced after we found it: nothing was clicked,
                # so the form is found again and filled again. Anything else is a real failure.
                if not _replaced(exc) or attempt == 2:
                    raise
                continue
            self._wait_replaced(old)
            return

    def click(self, element: WebElement) -> None:
        """Click something that loads a new page, and wait until the old page is gone (a form's
        POST answered by a redirect: otherwise the next read could still see the old page)."""
        old = self.d.find_element(By.TAG_NAME, "html")
        element.click()
        self._wait_replaced(old)

    def _wait_replaced(self, old: WebElement) -> None:
        def gone(_: Any) -> bool:
            try:
                old.is_enabled()  # any call on an element of a replaced document fails
            except (StaleElementReferenceException, WebDriverException) as exc:
                if _replaced(exc):
                    return True
                raise
            return False

        # selenium's staleness_of knows only StaleElementReferenceException; ChromeDriver may answer
        # "Node with given id does not belong to the document" for the same thing
        WebDriverWait(self.d, 60).until(gone)
        WebDriverWait(self.d, 60).until(lambda d: d.execute_script("return document.readyState") == "complete")

    def find(self, css: str) -> WebElement:
        return self.d.find_element(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return self.find(css).text

    def wait(self, predicate: Any, timeout: float, what: str) -> Any:
        return WebDriverWait(self.d, timeout, poll_frequency=0.2).until(lambda d: predicate(), message=what)

    def csp_violations(self) -> list[str]:
        """Every Content-Security-Policy violation the browser reported since it started (blocked
        inline script or style, a fetch from elsewhere): Chromium logs each as a SEVERE entry of
        source ``security``. Reading the browser's log empties it, so what is read is kept here."""
        for entry in self.d.get_log("browser"):
            message = str(entry.get("message", ""))
            if entry.get("source") == "security" or "Content Security Policy" in message:
                self.violations.append(message)
        return list(self.violations)

    # --- phone width -----------------------------------------------------------------------------

    def phone(self) -> None:
        """A phone's viewport (390 x 844 CSS px, touch, mobile) from now on."""
        self.d.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 2, "mobile": True},
        )

    def viewport(self, width: int, height: int, *, mobile: bool = False) -> None:
        """This viewport (CSS px) from now on: ``(1280, 800)`` a laptop, ``PHONE`` a phone."""
        self.d.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 2 if mobile else 1, "mobile": mobile},
        )

    def horizontal_overflow(self) -> int:
        """CSS pixels the page is wider than the viewport (0: nothing sticks out sideways)."""
        return int(
            self.d.execute_script(
                "return Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - window.innerWidth"
            )
        )
