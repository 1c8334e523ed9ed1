"""What the code, the docs and the deploy files point a reader at exists: every `docs/*.md`,
`deploy/...` and `tests/....py` path (a test named after `::` too; `tests/{unit,integration}/x.py`
names both lanes' file), and every quoted section of the README, SECURITY.md or a doc (`README "TLS"`,
`docs/FANOUT.md "Outages"`: a heading, or a paragraph's bold lead-in). CHANGELOG.md is history and
may name what has moved since."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = [
    ROOT / "README.md",
    ROOT / "SECURITY.md",
    ROOT / "compose.yaml",
    ROOT / ".env.example",
    ROOT / "Dockerfile",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file()),
    *sorted((ROOT / "notee").rglob("*.py")),
]
_PATH = re.compile(r"(?<![\w/.-])((?:docs/[A-Z][A-Z0-9-]*\.md)|(?:deploy/[\w./-]*[\w/]))")
_TEST = re.compile(r"(?<![\w/.-])(tests/[\w/{},.-]*?\.py)((?:::\w+)?)")
_SECTION = re.compile(r'((?:docs/)?[A-Z][A-Z0-9-]+\.md|README)[,:]? "([^"\n]{2,80})"')


@cache
def _sections(doc: Path) -> tuple[str, ...]:
    text = doc.read_text()
    headings = re.findall(r"^#+\s+(.+?)\s*$", text, flags=re.M)
    lead_ins = [bold.rstrip(".") for bold in re.findall(r"\*\*([^*\n]+?)\*\*", text)]
    return (*headings, *lead_ins)


def _dead(where: str, text: str) -> list[str]:
    """The references of ``text`` (the file ``where``) to nothing."""
    dead = [f"{where}: {ref}" for ref in _PATH.findall(text) if not (ROOT / ref.rstrip("/.")).exists()]
    for path, test in _TEST.findall(text):
        files = [ROOT / path.replace("{unit,integration}", lane) for lane in ("unit", "integration")]
        files = list(dict.fromkeys(files))
        if not all(f.is_file() for f in files) or (
            test and not any(re.search(rf"^\s*(?:async )?def {test[2:]}\(", f.read_text(), re.M) for f in files)
        ):
            dead.append(f"{where}: {path}{test}")
    for doc, section in _SECTION.findall(text):
        name = "README.md" if doc == "README" else doc
        target = next((p for p in (ROOT / name, ROOT / "docs" / name) if p.exists()), None)
        if target is not None and not any(s.startswith(section) for s in _sections(target)):
            dead.append(f'{where}: {doc} "{section}"')
    return dead


def test_every_doc_deploy_path_and_section_named_exists() -> None:
    dead = [ref for path in SCANNED for ref in _dead(str(path.relative_to(ROOT)), path.read_text(errors="replace"))]
    assert dead == []


def test_the_check_finds_a_dead_reference() -> None:
    text = (
        'See docs/OPERATIONS.md, deploy/prometheus.yml and README "TLS"; docs/METRICS.md "Alerts" exists;'
        " tests/test_layers.py moved, tests/unit/test_layers.py::test_nothing_here is no test,"
        " tests/unit/test_layers.py and tests/{unit,integration}/test_packaging.py exist."
    )
    assert _dead("probe", text) == [
        "probe: docs/OPERATIONS.md",
        "probe: deploy/prometheus.yml",
        "probe: tests/test_layers.py",
        "probe: tests/unit/test_layers.py::test_nothing_here",
        'probe: README "TLS"',
    ]
