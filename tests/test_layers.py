"""Imports run one way (docs/ARCHITECTURE.md, "Layers"): a static check of every module of notee/.

api -> (domain, fanout, scheduler, delivery, ...) -> (store, providers) -> shared vocabulary,
settings, errors. Within the middle layer the store side and the transport side never import each
other. A function-level import is allowed in notee/cli.py (each command loads only what it runs)
and elsewhere only with a ``# deferred: <why>`` comment on the line above (a cycle it breaks, or
the start-up cost it saves). The graph of module-level imports has no cycle. Domain code never
commits, rolls back or opens a session (the caller owns the unit of work).

Each checker runs on a synthetic bad package too, so it is known to be able to fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (module prefix, rank, side). A module may import a lower rank, or its own rank; at rank 1 only
# its own side (store and transport stay apart). The longest matching prefix wins.
LAYERS: list[tuple[str, int, str]] = [
    ("notee", 0, "shared"),  # the package itself
    ("notee.vocabulary", 0, "shared"),
    ("notee.settings", 0, "shared"),
    ("notee.errors", 0, "shared"),
    ("notee.logs", 0, "shared"),
    ("notee.crypto", 0, "shared"),
    ("notee.metrics", 0, "shared"),  # every Prometheus metric: counted by store, transport, domain and api
    ("notee.store", 1, "store"),
    ("notee.runtime", 1, "store"),  # the process's store connections
    ("notee.providers", 1, "transport"),
    ("notee.emulator", 1, "emulator"),
    ("notee.domain", 2, "domain"),
    ("notee.fanout", 2, "domain"),
    ("notee.scheduler", 2, "domain"),
    ("notee.delivery", 2, "domain"),
    ("notee.webhook_dispatcher", 2, "domain"),
    ("notee.reconcile", 2, "domain"),
    ("notee.occupancy", 2, "domain"),
    ("notee.retention", 2, "domain"),
    ("notee.migrate", 2, "domain"),
    ("notee.api", 3, "api"),
    ("notee.cli", 4, "entry"),
    ("notee.cli_http", 4, "entry"),
    ("notee.__main__", 4, "entry"),
]
# The API reaches the stores and the transport only through the domain; of the middle layer it
# may use the process's Runtime (its per-request sessions) and the one classification of store
# errors (an outage answers 503 "retry later"; any other store error is a bug: 500), nothing else.
API_MAY_USE = {"notee.runtime", "notee.store.outage"}
FUNCTION_IMPORTS_ALLOWED = {"notee.cli"}
DEFERRED = "# deferred:"


def layer_of(module: str) -> tuple[int, str]:
    best = max((p for p in LAYERS if module == p[0] or module.startswith(p[0] + ".")), key=lambda p: len(p[0]))
    return best[1], best[2]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _targets(node: ast.Import | ast.ImportFrom, here: str, known: set[str]) -> list[str]:
    """The notee modules an import statement loads (``from pkg import mod`` names the module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "notee"]
    base = node.module or ""
    if node.level:
        package = here.split(".")[: len(here.split(".")) - node.level]
        base = ".".join(package + ([base] if base else []))
    if base.split(".")[0] != "notee":
        return []
    return sorted({f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names})


def _says_why(lines: list[str], lineno: int) -> bool:
    """A ``# deferred:`` comment right above the import, or above the block of imports it is in."""
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith(("import ", "from ")):
        i -= 1
    return i >= 0 and lines[i].strip().startswith(DEFERRED)


def check(root: Path) -> list[str]:
    """Every layering violation under ``root`` (a directory holding the ``notee`` package)."""
    files = {module_name(root, p): p for p in sorted((root / "notee").rglob("*.py"))}
    known = set(files)
    problems: list[str] = []
    graph: dict[str, set[str]] = {m: set() for m in files}
    for here, path in files.items():
        source = path.read_text()
        lines = source.splitlines()
        rank, side = layer_of(here)

        # (the loop's values bound as defaults: visit runs within this iteration only)
        def visit(
            node: ast.AST,
            in_function: bool,
            here: str = here,
            lines: list[str] = lines,
            rank: int = rank,
            side: str = side,
        ) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    if in_function and here not in FUNCTION_IMPORTS_ALLOWED and not _says_why(lines, child.lineno):
                        problems.append(
                            f"{here}:{child.lineno}: function-level import without a "
                            f"'{DEFERRED} <why>' comment above it"
                        )
                    for target in _targets(child, here, known):
                        t_rank, t_side = layer_of(target)
                        skips_domain = side == "api" and t_rank == 1 and target not in API_MAY_USE
                        if t_rank > rank or (t_rank == rank and t_side != side) or skips_domain:
                            problems.append(
                                f"{here}:{child.lineno}: imports {target} "
                                f"({t_side}, rank {t_rank}) from {side}, rank {rank}"
                            )
                        if not in_function and target in graph and target != here:
                            graph[here].add(target)
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(source, str(path)), False)
    problems.extend(_cycles(graph))
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
DOMAIN_MODULES = ("notee/domain", "notee/fanout/jobs.py")
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
    (tmp_path / "notee" / "fanout").mkdir()
    (tmp_path / "notee" / "fanout" / "jobs.py").write_text("def f(session):\n    session.begin_nested()\n")
    (tmp_path / "notee" / "domain" / "bad.py").write_text(
        "def f(runtime, session):\n    session.commit()\n    with runtime.sessions() as s:\n        pass\n"
    )
    assert transaction_owners(tmp_path) == ["notee/domain/bad.py:2: .commit", "notee/domain/bad.py:3: .sessions"]


def test_imports_run_one_way() -> None:
    assert check(ROOT) == []


def test_the_checker_catches_each_kind_of_violation(tmp_path: Path) -> None:
    pkg = tmp_path / "notee"
    for d in ("store", "providers", "fanout", "domain"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "vocabulary.py").write_text("")
    (pkg / "fanout" / "jobs.py").write_text("from notee.vocabulary import X\n")
    (pkg / "store" / "cql.py").write_text("from notee.fanout import jobs\n")  # upward
    (pkg / "providers" / "routing.py").write_text(
        "def load():\n"
        "    from notee.store import cql\n"  # sideways, and function-level without a reason
        "    # deferred: a heavy SDK, imported on first use\n"
        "    import json\n"
    )  # allowed: it says why
    (pkg / "api").mkdir()
    (pkg / "api" / "sends.py").write_text("from notee.providers import routing\n")  # skips the domain
    (pkg / "domain" / "a.py").write_text("from notee.domain import b\n")
    (pkg / "domain" / "b.py").write_text("from notee.domain import a\n")  # a cycle
    problems = check(tmp_path)
    assert any(p.startswith("notee.store.cql:1: imports notee.fanout.jobs") for p in problems), problems
    assert any(p.startswith("notee.providers.routing:2: imports notee.store.cql") for p in problems), problems
    assert any(p.startswith("notee.providers.routing:2: function-level import") for p in problems), problems
    assert not any("routing:4" in p for p in problems), problems
    assert any(p.startswith("import cycle: notee.domain.a -> notee.domain.b -> notee.domain.a") for p in problems), (
        problems
    )
    assert any(p.startswith("notee.api.sends:1: imports notee.providers.routing") for p in problems), problems
    assert len(problems) == 5, problems
