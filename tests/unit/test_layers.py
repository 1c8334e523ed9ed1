"""Imports run one way (docs/ARCHITECTURE.md, "Layers"): a static check of every module of the
repository (notee/, bench/, the SDK), by reading their imports.

Every package of notee/ has one rank, and its folder shows it::

    6  __main__                                       ``python -m notee``
    5  cli                                            the ``notee`` command
    4  api | worker | scheduler | webhooks | emulator  processes, never each other
    3  usecases                                       publish, deliver, reconcile, ...
    2  domain                                         the rules of tenants, users, templates, subscriptions
    1  store | providers                              MySQL and Cassandra | the push providers' wire
    0  core                                           vocabulary, errors, settings, time, logs, metrics

A module imports a lower rank, or its own package; never up a rank, never a package beside its own
(the store and the transport stay apart, the processes too). The API reaches the stores only
through the domain and the use cases, but for the two modules of ``API_MAY_USE``. Neither modules
nor packages import each other in a circle. A function-level import is allowed in notee/cli/main.py
(each command loads only what it runs) and elsewhere only with a ``# deferred: <why>`` comment on
the line above. Domain code never commits, rolls back or opens a session (the caller owns the unit
of work).

Each checker runs on a synthetic bad package too, so it is known to be able to fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Top-level package (or loose module) of notee/ -> rank. A package not listed fails the test: a new
# package gets its rank here and in docs/ARCHITECTURE.md.
RANKS: dict[str, int] = {
    "notee": 0,  # the package's face (notee/__init__.py: the zone database)
    "notee.core": 0,
    "notee.store": 1,
    "notee.providers": 1,
    "notee.domain": 2,
    "notee.usecases": 3,
    "notee.api": 4,
    "notee.worker": 4,
    "notee.scheduler": 4,
    "notee.webhooks": 4,
    "notee.emulator": 4,
    "notee.cli": 5,
    "notee.__main__": 6,  # `python -m notee`: runs the cli
    # Outside the notee package: the benchmarks drive every layer; the SDK is its own distribution
    # and imports no Notee module (the remote CLI imports it).
    "bench": 7,
    "chaos": 7,  # the chaos run (issue 31): drives Notee from the outside, like the benchmarks
    "notee_sdk": 0,
    "tools": 1,  # clients/python/tools: the SDK's generator
}
# The API reaches the stores and the transport through the domain and the use cases; of the store
# it may use the process's Runtime (its per-request sessions) and the one classification of store
# errors (an outage answers 503 "retry later"; any other store error is a bug: 500), nothing else.
API_MAY_USE = {"notee.store.runtime", "notee.store.outage"}
FUNCTION_IMPORTS_ALLOWED = {"notee.cli.main"}
DEFERRED = "# deferred:"
FIRST_PARTY = ("notee", "bench", "chaos", "notee_sdk", "tools")


def package_of(module: str) -> str:
    """The ranked package a module belongs to: ``notee.x`` for notee's, else its first component."""
    parts = module.split(".")
    if parts[0] == "notee" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path) -> dict[str, Path]:
    """Every first-party module: notee/, bench/, chaos/ and the SDK (clients/python) by module name."""
    files = {module_name(root, p): p for d in ("notee", "bench", "chaos") for p in sorted((root / d).rglob("*.py"))}
    sdk = root / "clients" / "python"
    if sdk.is_dir():
        files |= {module_name(sdk, p): p for d in ("notee_sdk", "tools") for p in sorted((sdk / d).rglob("*.py"))}
    return files


def _targets(node: ast.Import | ast.ImportFrom, here: str, is_package: bool, known: set[str]) -> list[str]:
    """The first-party modules an import statement loads (``from pkg import mod`` names the module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] in FIRST_PARTY]
    base = node.module or ""
    if node.level:
        package = here.split(".") if is_package else here.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    if base.split(".")[0] not in FIRST_PARTY:
        return []
    return sorted({f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names})


def _says_why(lines: list[str], lineno: int) -> bool:
    """A ``# deferred:`` comment right above the import, or above the block of imports it is in."""
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith(("import ", "from ")):
        i -= 1
    return i >= 0 and lines[i].strip().startswith(DEFERRED)


def _import_problem(here: str, target: str) -> str | None:
    """Why ``here`` may not import ``target``, or None."""
    mine, theirs = package_of(here), package_of(target)
    if mine == theirs:
        return None
    rank, t_rank = RANKS[mine], RANKS[theirs]
    if t_rank > rank:
        return f"imports {target} ({theirs}, rank {t_rank}) up from {mine}, rank {rank}"
    if t_rank == rank:
        return f"imports {target} ({theirs}) beside its own package {mine}, both rank {rank}"
    if mine == "notee.api" and t_rank == 1 and theirs == "notee.store" and target not in API_MAY_USE:
        return f"imports {target}: the API reaches the stores through the domain and the use cases"
    if mine == "notee.api" and theirs == "notee.providers":
        return f"imports {target}: the API reaches the transport through the use cases"
    return None


def check(root: Path) -> list[str]:
    """Every layering violation of the modules under ``root`` (a checkout: notee/, bench/, clients/)."""
    files = source_files(root)
    known = set(files)
    problems = [f"{m}: package {package_of(m)} has no rank (tests/unit/test_layers.py RANKS)" for m in files]
    problems = [p for p, m in zip(problems, files, strict=True) if package_of(m) not in RANKS]
    graph: dict[str, set[str]] = {m: set() for m in files}
    for here, path in files.items():
        source = path.read_text()
        lines = source.splitlines()
        is_package = path.name == "__init__.py"

        def visit(
            node: ast.AST, in_function: bool, here: str = here, lines: list[str] = lines, is_package: bool = is_package
        ) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    if (
                        in_function
                        and here.startswith("notee")
                        and here not in FUNCTION_IMPORTS_ALLOWED
                        and not _says_why(lines, child.lineno)
                    ):
                        problems.append(
                            f"{here}:{child.lineno}: function-level import without a "
                            f"'{DEFERRED} <why>' comment above it"
                        )
                    for target in _targets(child, here, is_package, known):
                        if package_of(here) in RANKS and package_of(target) in RANKS:
                            why = _import_problem(here, target)
                            if why is not None:
                                problems.append(f"{here}:{child.lineno}: {why}")
                        if target in graph and target != here:
                            graph[here].add(target)
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(source, str(path)), False)
    problems.extend(_cycles(graph))
    packages: dict[str, set[str]] = {}
    for m, targets in graph.items():
        packages.setdefault(package_of(m), set()).update(
            package_of(t) for t in targets if package_of(t) != package_of(m)
        )
    problems.extend(p.replace("import cycle", "package cycle") for p in _cycles(packages))
    return problems


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    found: list[str] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def walk(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                found.append("import cycle: " + " -> ".join([*stack[stack.index(n) :], n]))
            elif n not in state:
                walk(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            walk(m)
    return found


# Domain code receives the caller's session (docs/ARCHITECTURE.md, "Unit of work"): it never commits,
# rolls back or makes a session of its own. A SAVEPOINT (``begin_nested``) is the caller's transaction.
DOMAIN_MODULES = (
    "notee/domain",
    "notee/usecases/publish.py",
    "notee/usecases/job_requests.py",
    "notee/usecases/planning.py",
    "notee/usecases/jobs.py",
)
OWNS_A_TRANSACTION = {"commit", "rollback", "sessions", "begin"}


def transaction_owners(root: Path) -> list[str]:
    """Every call in the domain modules that commits, rolls back or opens a session."""
    found: list[str] = []
    paths = [p for d in DOMAIN_MODULES for p in ((root / d).rglob("*.py") if (root / d).is_dir() else [root / d])]
    for path in sorted(paths):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in OWNS_A_TRANSACTION:
                found.append(f"{path.relative_to(root)}:{node.lineno}: .{node.attr}")
    return found


def test_domain_code_never_owns_a_transaction(tmp_path: Path) -> None:
    assert transaction_owners(ROOT) == []
    (tmp_path / "notee" / "domain").mkdir(parents=True)
    (tmp_path / "notee" / "usecases").mkdir()
    (tmp_path / "notee" / "usecases" / "publish.py").write_text("def f(session):\n    session.begin_nested()\n")
    for name in ("job_requests.py", "planning.py", "jobs.py"):
        (tmp_path / "notee" / "usecases" / name).write_text("")
    (tmp_path / "notee" / "domain" / "bad.py").write_text(
        "def f(runtime, session):\n    session.commit()\n    with runtime.sessions() as s:\n        pass\n"
    )
    assert transaction_owners(tmp_path) == ["notee/domain/bad.py:2: .commit", "notee/domain/bad.py:3: .sessions"]


def test_imports_run_one_way() -> None:
    assert check(ROOT) == []


def test_every_package_of_notee_has_a_rank() -> None:
    """The folders are the layers: each directory (and loose module) under notee/ is ranked."""
    tops = {f"notee.{p.stem}" for p in (ROOT / "notee").iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert tops - set(RANKS) == {"notee.__init__"}


def test_the_checker_catches_each_kind_of_violation(tmp_path: Path) -> None:
    pkg = tmp_path / "notee"
    for d in ("core", "store", "providers", "usecases", "domain", "api", "worker", "mystery"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "vocabulary.py").write_text("")
    (pkg / "usecases" / "publish.py").write_text("from notee.core.vocabulary import X\n")  # fine
    (pkg / "store" / "cql.py").write_text("from notee.usecases import publish\n")  # up a rank
    (pkg / "providers" / "routing.py").write_text(
        "def load():\n"
        "    from notee.store import cql\n"  # beside its own package, and function-level without a reason
        "    # deferred: a heavy SDK, imported on first use\n"
        "    import json\n"
    )  # allowed: it says why
    (pkg / "api" / "sends.py").write_text("from notee.store import cql\n")  # skips the domain
    (pkg / "api" / "jobs.py").write_text("from notee.worker import lanes\n")  # a process beside another
    (pkg / "worker" / "lanes.py").write_text("")
    (pkg / "worker" / "ping.py").write_text("from notee.api import pong\n")  # the two packages in a circle,
    (pkg / "api" / "pong.py").write_text("")  # though no module imports one that imports it back
    (pkg / "domain" / "a.py").write_text("from notee.domain import b\n")
    (pkg / "domain" / "b.py").write_text("from notee.domain import a\n")  # a module cycle
    (pkg / "mystery" / "x.py").write_text("")  # a package without a rank
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "one.py").write_text("from bench import two\n")
    (tmp_path / "bench" / "two.py").write_text("from bench import one\n")  # a cycle in bench/
    problems = check(tmp_path)
    expected = [
        "notee.store.cql:1: imports notee.usecases.publish (notee.usecases, rank 3) up from notee.store, rank 1",
        "notee.providers.routing:2: imports notee.store.cql (notee.store) beside its own package notee.providers",
        "notee.providers.routing:2: function-level import",
        "notee.api.sends:1: imports notee.store.cql: the API reaches the stores",
        "notee.api.jobs:1: imports notee.worker.lanes (notee.worker) beside its own package notee.api",
        "import cycle: notee.domain.a -> notee.domain.b -> notee.domain.a",
        "import cycle: bench.one -> bench.two -> bench.one",
        "notee.worker.ping:1: imports notee.api.pong (notee.api) beside its own package notee.worker",
        "package cycle: notee.api -> notee.worker -> notee.api",
        "notee.mystery: package notee.mystery has no rank",
        "notee.mystery.x: package notee.mystery has no rank",
    ]
    for start in expected:
        assert any(p.startswith(start) for p in problems), (start, problems)
    assert not any("routing:4" in p for p in problems), problems
    assert len(problems) == len(expected), problems
