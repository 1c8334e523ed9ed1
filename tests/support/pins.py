"""The performance detours (docs/BENCHMARKS.md, "Performance detours"): Notee code that reaches into
a library's internals, each pinning that library to an exact version in pyproject.toml. A pin test
fails with ``Detour.loud``: the detour, what changed, the pinned and the installed versions, and what
to re-check before moving the pin. (The HTTP/2 client's jh2 pin has its own: tests/unit/test_http2_pins.py.)"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def pins() -> dict[str, str]:
    """``{distribution: version}`` of every runtime dependency pinned with ``==`` in pyproject.toml."""
    found = {}
    for dep in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([\w.]+)", dep)
        if m:
            found[m[1].lower()] = m[2]
    return found


@dataclass(frozen=True)
class Detour:
    name: str  # what it is and where
    libraries: tuple[str, ...]  # the distributions whose internals it uses, pinned exactly
    recheck: str  # what to look at in a new release before moving the pins

    def loud(self, what: str) -> str:
        pinned = pins()
        versions = ", ".join(
            f"{lib} pinned {pinned.get(lib, 'NOT PINNED')}, installed {version(lib)}" for lib in self.libraries
        )
        return (
            f"Performance detour {self.name!r}: {what}. {versions}. Before moving the pin: {self.recheck} "
            '(docs/BENCHMARKS.md, "Performance detours": re-measure it with bench/detours.py, or remove it).'
        )

    def assert_pinned_to_installed(self) -> None:
        pinned = pins()
        for lib in self.libraries:
            assert lib in pinned, self.loud(f"pyproject.toml must pin {lib} with ==")
            assert version(lib) == pinned[lib], self.loud(
                f"{lib} {version(lib)} is installed, not the pinned {pinned[lib]}"
            )


HTTP1 = Detour(
    "the API's HTTP/1.1 protocol, a subclass of uvicorn's HttpToolsProtocol (notee/api/http1.py)",
    ("uvicorn", "httptools"),
    "diff uvicorn/protocols/http/httptools_impl.py between the two versions and port what changed in "
    "data_received and in the overridden callbacks to notee/api/http1.py; run tests/unit/test_uvicorn_pins.py "
    "and tests/{unit,integration}/test_api_http1.py",
)
SHORTCUT = Detour(
    "TopicSubscribeShortcut (notee/api/routes/subscriptions.py)",
    ("fastapi", "starlette"),
    "run tests/unit/test_shortcut_pins.py and tests/integration/test_subscriptions_api.py::test_the_topic_subscribe_shortcut_answers_as_the_route, "
    "and read both release notes for changes to Response headers, path convertors, request.state, "
    "root_path handling and the exception handlers whose answers the shortcut's errors mirror "
    "(notee.api.errors.known_error_response)",
)
ROW_BINDER = Detour(
    "RowBinder appends to BatchStatement._statements_and_parameters (notee/store/cql/binder.py)",
    ("cassandra-driver",),
    "diff cassandra/query.py (BatchStatement.add, _add_statement_and_params, BoundStatement.bind) between "
    "the two versions; run tests/integration/test_cassandra_pins.py and tests/integration/test_cql_statements.py",
)
PAGE_TIMER = Detour(
    "pages() drops response_future._timer (notee/store/cassandra.py)",
    ("cassandra-driver",),
    "diff cassandra/cluster.py (ResponseFuture._start_timer, _cancel_timer, _on_timeout) and "
    "cassandra/connection.py (Timer) between the two versions; run tests/integration/test_cassandra_pins.py",
)
DRIVER_SQL = Detour(
    "the subscribe's MySQL statements on the DBAPI cursor, errors through Connection._handle_dbapi_exception "
    "(notee/store/subscription_sql.py)",
    ("sqlalchemy",),
    "diff sqlalchemy/engine/base.py (Connection._handle_dbapi_exception, _execute_context, "
    "exec_driver_sql) between the two versions; run tests/integration/test_sqlalchemy_pins.py",
)
PYMYSQL_TLS = Detour(
    "SharedTlsContextConnection overrides PyMySQL's private Connection._create_ssl_ctx (notee/store/mysql.py)",
    ("pymysql",),
    "diff pymysql/connections.py (Connection.__init__'s TLS options, _create_ssl_ctx, where the context is "
    "used) between the two versions; run tests/unit/test_pymysql_pins.py and tests/integration/test_pymysql_pins.py",
)
