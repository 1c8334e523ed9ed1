"""Files of this repository that tests on both lanes read the same way: README.md's quickstart
block and compose.yaml's Notee services."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

__all__ = ["REPO", "notee_services", "quickstart_block", "read_compose"]

REPO = Path(__file__).resolve().parents[2]
_QUICKSTART = "<!-- quickstart: start", "<!-- quickstart: end -->"


def quickstart_block() -> str:
    """The bash block of README.md's quickstart, as written."""
    readme = (REPO / "README.md").read_text()
    start, end = _QUICKSTART
    section = readme[readme.index(start) : readme.index(end)]
    found = re.search(r"```bash\n(.*?)```", section, re.S)
    assert found, "README's quickstart has no ```bash block"
    return found.group(1)


def read_compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "compose.yaml").read_text())  # resolves the `<<` merge keys
    return loaded


def notee_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """compose.yaml's services that run a Notee image (the emulator's included)."""
    images = ("notee:local", "notee-emulator:local")  # the emulator's: the same Dockerfile, with its extra
    return {name: svc for name, svc in compose["services"].items() if svc.get("image") in images}
