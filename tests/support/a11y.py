"""An automated accessibility pass over the page a ``Browser`` shows: axe-core (installed by
``make browser`` from tools/a11y/package-lock.json, never served by Notee) is injected through
WebDriver, which Chromium runs outside the page's Content-Security-Policy, and run with the WCAG 2
A/AA rules. ``serious`` returns the violations of impact serious or critical, each with the
selectors of the elements concerned, so a failing test names what to fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selenium import webdriver

AXE = Path(__file__).resolve().parents[2] / "tools" / "a11y" / "node_modules" / "axe-core" / "axe.min.js"

_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
  .then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                         nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)}))))
  .catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e), nodes: []}]));
"""


def available() -> bool:
    return AXE.exists()


def violations(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """Every WCAG 2 A/AA violation axe-core finds on the current page."""
    if not available():
        raise RuntimeError(f"{AXE} is missing: run `make browser` (npm ci --prefix tools/a11y)")
    if not driver.execute_script("return typeof axe !== 'undefined'"):
        driver.execute_script(AXE.read_text(encoding="utf-8"))
    driver.set_script_timeout(60)
    found: list[dict[str, Any]] = driver.execute_async_script(_RUN)
    return found


def serious(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """The violations of impact serious or critical (what the console must have none of)."""
    return [v for v in violations(driver) if v.get("impact") in ("serious", "critical")]
