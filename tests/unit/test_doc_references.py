"""What the code, the docs and the deploy files point a reader at exists: every `docs/*.md`,
`deploy/...` and `tests/....py` path (a test named after `::` too; `tests/{unit,integration}/x.py`
names both lanes' file), and every quoted section of the README, SECURITY.md or a doc (`README "TLS"`,
`docs/FANOUT.md "Outages"`: a heading, or a paragraph's bold lead-in). CHANGELOG.md is history and
may name what has moved since. In the docs of ``CODE_NAMED``, every code name given with its module
(`` `jobs_sql.prunable` ``, `` `notee.store.jobs_sql.prune_jobs` ``) is defined in that module
(docs/SCHEMA.md named a `jobs_sql.prune_finished` that never existed); a name quoted in double quotes
cites old text (what an applied migration's comment says) and is not checked."""

from __future__ import annotations

import ast
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
# `module.name` or `notee.pkg.module.name`, optionally called: `task_leases.claim(...)`; not "`quoted`"
_CODE_NAME = re.compile(r'(?<!")`((?:[a-z_][a-z0-9_]*\.)+)([A-Za-z_]\w*)(?:\([^`]*\))?`(?!")')
_FILE_SUFFIXES = {"py", "md", "sql", "cql", "json", "yaml", "yml", "toml", "txt"}
CODE_NAMED = [ROOT / "docs" / "SCHEMA.md"]
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


@cache
def _modules() -> dict[str, tuple[Path, ...]]:
    """Every module of notee/ by its name (``jobs_sql``) and by its dotted path (``notee.store.jobs_sql``)."""
    found: dict[str, list[Path]] = {}
    for path in sorted((ROOT / "notee").rglob("*.py")):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for key in {dotted, dotted.rsplit(".", 1)[-1]}:
            found.setdefault(key, []).append(path)
    return {key: tuple(paths) for key, paths in found.items()}


@cache
def _defined(path: Path) -> frozenset[str]:
    """The functions, classes, methods, assigned names and imported names of a module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return frozenset(names)


def _undefined(where: str, text: str) -> list[str]:
    """The `module.name` references of ``text`` whose module (of notee/) does not define the name;
    a dotted path under notee that names no module at all is dead too."""
    dead = []
    for match in _CODE_NAME.finditer(text):
        module, name = match.group(1).rstrip("."), match.group(2)
        if name in _FILE_SUFFIXES or f"{module}.{name}" in _modules():
            continue  # a file name, or a module named whole
        paths = _modules().get(module)
        if paths is None:
            if module.startswith("notee."):
                dead.append(f"{where}: {module}.{name}")
            continue  # not a module of ours: a column, a field, another library's name
        if not any(name in _defined(p) for p in paths):
            dead.append(f"{where}: {module}.{name}")
    return dead


def test_every_code_name_given_with_its_module_exists() -> None:
    dead = [ref for path in CODE_NAMED for ref in _undefined(str(path.relative_to(ROOT)), path.read_text())]
    assert dead == []


def test_the_code_name_check_finds_a_dead_name() -> None:
    text = (
        "`jobs_sql.prune_finished`, `notee.store.jobs_sql.prune_jobs`, `jobs_sql.prunable(session)`, `notee.fanout.x`,"
        ' `task_leases.py`, `notee.store.cql`, `device.app_version`, "`notee.delivery.prune_dead_letters`",'
        " `task_leases.claim(sessions, owner=o)`, `notee.store.task_leases.nothing`"
    )
    assert _undefined("probe", text) == [
        "probe: jobs_sql.prune_finished",
        "probe: notee.fanout.x",
        "probe: notee.store.task_leases.nothing",
    ]


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
