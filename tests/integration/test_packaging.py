"""The package as it is shipped (issue 15 items 4 and 5): declared dependencies match the imports,
both lock files pin every requirement with hashes, and a wheel built from this checkout installs into
a clean virtualenv from requirements.lock alone and migrates the stores from there.

The rules of this topic that need no server are in tests/unit/test_packaging.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from notee.core.settings import Settings
from tests.support.repo_files import notee_services, read_compose

ROOT = Path(__file__).resolve().parents[2]

# The environment as collection found it: session fixtures (the emulator's) later point SSL_CERT_FILE
# at a test CA, which would stop pip from reaching the package index.
_PRISTINE_ENV = dict(os.environ)


def _run(
    args: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args,
        env=env if env is not None else _PRISTINE_ENV,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args[:3]} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist first, then the wheel built from that sdist (``python -m build``), as a release would."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)])
    (built,) = out.glob("notee-*.whl")
    return built


def test_wheel_carries_every_module_and_migration(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "notee").rglob("*.py")}
    assert sources <= names, f"modules missing from the wheel: {sorted(sources - names)}"
    migrations = {f"notee/_schema/{p.parent.name}/{p.name}" for p in (ROOT / "schema").glob("*/*.*ql")}
    assert migrations and migrations <= names, f"migrations missing: {sorted(migrations - names)}"
    console = ROOT / "notee" / "api" / "console"  # the web console's pages and assets (package data)
    assets = {p.relative_to(ROOT).as_posix() for p in console.glob("*/*") if p.suffix in (".html", ".css", ".js")}
    assert assets and assets <= names, f"console assets missing: {sorted(assets - names)}"
    assert not any(n.startswith(("tests/", "bench/", "schema/")) for n in names)


def test_both_distributions_are_licensed_apache_2(wheel: Path) -> None:
    """The wheel's metadata names the licence (PEP 639) and carries its text; the SDK's
    distribution declares the same licence with the same text."""
    archive = zipfile.ZipFile(wheel)
    (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    headers = archive.read(metadata).decode()
    assert "License-Expression: Apache-2.0" in headers.splitlines(), headers[:800]
    licence = (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in licence and b"Version 2.0, January 2004" in licence
    (carried,) = [n for n in archive.namelist() if n.endswith("licenses/LICENSE")]
    assert archive.read(carried) == licence
    sdk = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    assert (sdk["license"], sdk["license-files"]) == ("Apache-2.0", ["LICENSE"])
    assert (ROOT / "clients" / "python" / "LICENSE").read_bytes() == licence


@pytest.fixture(scope="module")
def wheel_env(settings: Settings) -> Iterable[dict[str, str]]:
    """NOTEE_* settings naming a database and keyspaces of their own, so the installed `notee
    migrate` starts from nothing; dropped afterwards."""
    url = make_url(settings.mysql_url.get_secret_value())
    url = url.set(database=f"{url.database}_wheel")
    env = {k: v for k, v in _PRISTINE_ENV.items() if not k.startswith(("NOTEE_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(
        {
            "NOTEE_MYSQL_URL": url.render_as_string(hide_password=False),
            "NOTEE_CASSANDRA_HOSTS": ",".join(settings.cassandra_hosts),
            "NOTEE_CASSANDRA_PORT": str(settings.cassandra_port),
            "NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION": f"{settings.cassandra_keyspace_notification}_wheel",
            "NOTEE_CASSANDRA_KEYSPACE_NUMBERING": f"{settings.cassandra_keyspace_numbering}_wheel",
        }
    )
    # Dropped before too: a run killed before its teardown leaves them migrated, and "starts from
    # nothing" would then read "applied 0 migration(s)" (the CI machine keeps its stores between runs).
    _drop_wheel_stores(settings, url.database or "", env)
    yield env
    _drop_wheel_stores(settings, url.database or "", env)


def _drop_wheel_stores(settings: Settings, database: str, env: dict[str, str]) -> None:
    assert database.endswith("_wheel")  # only the wheel test's own
    url = make_url(settings.mysql_url.get_secret_value())
    server = create_engine(url._replace(database=None))  # URL.set(database=None) keeps the name (SQLAlchemy 2.1)
    with server.begin() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS `{database}`"))
    server.dispose()
    from notee.store.runtime import Runtime

    runtime = Runtime(settings)
    try:
        for ks in (env["NOTEE_CASSANDRA_KEYSPACE_NOTIFICATION"], env["NOTEE_CASSANDRA_KEYSPACE_NUMBERING"]):
            assert ks.endswith("_wheel")
            runtime.cql.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=60)
    finally:
        runtime.close()


def test_wheel_installs_from_the_lock_and_migrates_from_a_clean_virtualenv(
    wheel: Path, wheel_env: dict[str, str], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    pip, notee = str(venv / "bin" / "pip"), str(venv / "bin" / "notee")
    _run([pip, "install", "-q", "--require-hashes", "-r", str(ROOT / "requirements.lock")], cwd=tmp_path)
    _run([pip, "install", "-q", "--no-deps", str(wheel)], cwd=tmp_path)
    # It runs from the virtualenv, not from this checkout.
    where = _run([str(venv / "bin" / "python"), "-c", "import notee; print(notee.__file__)"], cwd=tmp_path)
    assert where.stdout.strip().startswith(str(venv)), where.stdout

    expected = sorted(p.name for p in (ROOT / "schema" / "mysql").glob("*.sql")) + sorted(
        p.name for p in (ROOT / "schema" / "cql").glob("*.cql")
    )
    first = _run([notee, "migrate"], env=wheel_env, cwd=tmp_path)
    assert first.stdout.strip() == f"applied {len(expected)} migration(s): " + ", ".join(expected), first.stdout
    again = _run([notee, "migrate"], env=wheel_env, cwd=tmp_path)
    assert again.stdout.strip() == "applied 0 migration(s)"

    help_text = _run([notee, "api", "--help"], env=wheel_env, cwd=tmp_path).stdout
    assert "Serve the HTTP API" in help_text
    # The production install has no emulator server: the command says how to get it, in one line.
    emulator = subprocess.run(
        [notee, "emulator"], env=wheel_env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert emulator.returncode == 1 and "pip install 'notee[emulator]'" in emulator.stderr, emulator.stderr


def _notee_help(*args: str) -> str:
    env = _PRISTINE_ENV | {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    return _run([sys.executable, "-m", "notee", *args, "--help"], env=env).stdout


def test_compose_runs_only_real_notee_commands_and_options() -> None:
    compose = read_compose()
    commands = set(re.findall(r"^│ ([a-z][a-z-]*)\s", _notee_help(), flags=re.M))
    assert {"api", "worker", "scheduler", "migrate", "healthcheck"} <= commands, commands
    invocations = []
    for name, svc in notee_services(compose).items():
        invocations.append((name, svc["command"]))
        if "healthcheck" in svc:
            test = svc["healthcheck"]["test"]
            assert test[:2] == ["CMD", "notee"], f"{name}: healthcheck must run notee directly: {test}"
            invocations.append((f"{name} healthcheck", test[2:]))
    for where, argv in invocations:
        assert argv[0] in commands, f"{where}: `notee {argv[0]}` is not a command"
        options = set(re.findall(r"(--[a-z][a-z-]*)", _notee_help(argv[0])))
        used = [a for a in argv if a.startswith("--")]
        assert set(used) <= options, f"{where}: notee {argv[0]} has no {set(used) - options}"
    assert {"migrate", "api", "worker", "scheduler", "emulator"} <= set(notee_services(compose))
