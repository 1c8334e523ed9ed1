"""The package as it is shipped (issue 15 items 4 and 5): declared dependencies match the imports,
both lock files pin every requirement with hashes, and a wheel built from this checkout installs into
a clean virtualenv from requirements.lock alone and migrates the stores from there.

Here, the rules that need no server; tests/integration/test_packaging.py has the rest."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from notee.core.settings import Settings
from tests.support.repo_files import notee_services, read_compose

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Declared but never named in an import statement, each for a stated reason.
LOADED_BY_NAME = {
    "pymysql": "SQLAlchemy loads it for the mysql+pymysql:// URL of NOTEE_MYSQL_URL",
}


def _requirements(group: str | None) -> list[Requirement]:
    project = PYPROJECT["project"]
    raw = project["dependencies"] if group is None else project["optional-dependencies"][group]
    return [Requirement(r) for r in raw]


def _imported_modules(folder: Path) -> set[str]:
    """Every absolute module named by an import statement anywhere in *folder* (function-level
    imports included)."""
    return {m for path in folder.rglob("*.py") for m in _modules_of(path)}


def _modules_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] not in sys.stdlib_module_names}


def _distribution_of(module: str, owners: dict[str, list[str]]) -> str | None:
    """The installed distribution providing *module*; a namespace package (``google``) is shared by
    several, so the one whose files hold the module's own folder or file wins."""
    top = module.split(".")[0]
    candidates = owners.get(top, [])
    if len(set(candidates)) <= 1:
        return canonicalize_name(candidates[0]) if candidates else None
    parts = module.split(".")
    for depth in range(len(parts), 1, -1):
        prefix = "/".join(parts[:depth])
        holders = {
            c
            for c in candidates
            if any(str(f).startswith((prefix + "/", prefix + ".py")) for f in md.distribution(c).files or [])
        }
        if len(holders) == 1:
            return canonicalize_name(holders.pop())
    return None


def _distributions(modules: Iterable[str]) -> dict[str, str]:
    owners = md.packages_distributions()
    out: dict[str, str] = {}
    for module in sorted(modules):
        # First party: this repository's packages (notee_sdk is clients/python, the SDK, which
        # make venv and the image install beside notee).
        if module.split(".")[0] in ("notee", "notee_sdk", "tests", "bench", "chaos"):
            continue
        dist = _distribution_of(module, owners)
        assert dist is not None, f"{module} is imported but no installed distribution provides it"
        out[module] = dist
    return out


def _production_modules() -> set[str]:
    """What notee/ imports outside notee/emulator/ (the emulator's server is its own extra)."""
    package = ROOT / "notee"
    return {m for p in package.rglob("*.py") if p.relative_to(package).parts[0] != "emulator" for m in _modules_of(p)}


def test_the_emulators_server_is_an_extra_production_does_not_carry() -> None:
    """`pip install notee` leaves the emulator's server out (granian: the `emulator` extra); only
    notee/emulator/ imports it, and the image's lock does not have it."""
    extra = {canonicalize_name(r.name) for r in _requirements("emulator")}
    assert extra == {"granian"}
    runtime = {canonicalize_name(r.name) for r in _requirements(None)}
    assert not extra & runtime
    production = set(_distributions(_production_modules()).values())
    assert not extra & production, f"notee/ outside the emulator imports {extra & production}"
    emulator = set(_distributions(_imported_modules(ROOT / "notee" / "emulator")).values())
    assert extra <= emulator | runtime
    lock = {
        canonicalize_name(line.split("==")[0])
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line
    }
    assert "granian" not in lock, "requirements.lock (the image's) carries the emulator's server"
    emulator_lock = (ROOT / "requirements-emulator.lock").read_text()
    assert all(f"{name}==" in emulator_lock for name in extra)


def test_every_runtime_dependency_is_imported_and_every_import_declared() -> None:
    declared = {canonicalize_name(r.name) for g in (None, "emulator", "tracing") for r in _requirements(g)}
    imported = _distributions(_imported_modules(ROOT / "notee"))
    undeclared = {m: d for m, d in imported.items() if d not in declared}
    assert not undeclared, f"notee/ imports distributions missing from [project.dependencies]: {undeclared}"
    unused = declared - set(imported.values()) - set(LOADED_BY_NAME)
    assert not unused, f"declared runtime dependencies notee/ never imports (move to an extra or drop): {unused}"


# tests and bench start the emulator (and talk HTTP/2 with h2): `make venv` installs every extra
@pytest.mark.parametrize(
    ("folder", "groups"),
    [("tests", ("test", "emulator", "tracing")), ("bench", ("bench", "emulator")), ("chaos", ("test", "emulator"))],
)
def test_test_and_bench_imports_are_declared_in_their_extras(folder: str, groups: tuple[str, ...]) -> None:
    declared = {canonicalize_name(r.name) for g in (None, *groups) for r in _requirements(g)}
    imported = _distributions(_imported_modules(ROOT / folder))
    undeclared = {m: d for m, d in imported.items() if d not in declared}
    assert not undeclared, f"{folder}/ imports distributions missing from {groups}: {undeclared}"


def test_major_versions_are_bounded() -> None:
    unbounded = [
        str(r)
        for g in (None, *PYPROJECT["project"]["optional-dependencies"])
        for r in _requirements(g)
        if r.name != "tzdata" and not any(s.operator in ("<", "==", "~=") for s in r.specifier)
    ]
    assert not unbounded, f"requirements without an upper bound: {unbounded}"


def _closure(requirements: list[Requirement]) -> set[str]:
    """The installed distributions *requirements* need, transitively (markers and extras honoured)."""
    seen: set[str] = set()
    todo = [(r, "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        requires = [Requirement(r) for r in md.distribution(name).requires or []]
        for wanted in ("", *req.extras):
            key = f"{name}[{wanted}]"
            if key in seen:
                continue
            seen.add(key)
            todo.extend((r, wanted) for r in requires)
    return {k.split("[")[0] for k in seen}


def _lock(name: str) -> dict[str, tuple[Version, int]]:
    """``{distribution: (pinned version, number of hashes)}`` of a pip/uv lock file."""
    pins: dict[str, tuple[Version, int]] = {}
    current = None
    for line in (ROOT / name).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if m:
            current = canonicalize_name(m.group(1))
            pins[current] = (Version(m.group(3)), 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        elif line and not line.startswith((" ", "#")):
            current = None
    return pins


@pytest.mark.parametrize(
    ("lock", "groups"),
    [
        ("requirements.lock", (None,)),
        ("requirements-dev.lock", (None, *PYPROJECT["project"]["optional-dependencies"])),
    ],
)
def test_lock_files_pin_every_requirement_with_hashes(lock: str, groups: tuple[str | None, ...]) -> None:
    pins = _lock(lock)
    assert pins, f"{lock} pins nothing"
    unhashed = [d for d, (_, n) in pins.items() if n == 0]
    assert not unhashed, f"{lock}: pins without --hash: {unhashed}"
    for group in groups:
        for req in _requirements(group):
            name = canonicalize_name(req.name)
            assert name in pins, f"{lock} lacks {req} (run `make lock`)"
            assert req.specifier.contains(pins[name][0], prereleases=True), (
                f"{lock} pins {name}=={pins[name][0]}, outside pyproject's {req} (run `make lock`)"
            )
    if lock == "requirements.lock":  # the image's lock holds what the runtime needs, nothing more
        closure = _closure(_requirements(None))
        assert set(pins) == closure, (
            f"requirements.lock differs from the runtime closure: "
            f"extra {sorted(set(pins) - closure)}, missing {sorted(closure - set(pins))}"
        )
        dev = _lock("requirements-dev.lock")
        drift = {d: (v, dev[d][0]) for d, (v, _) in pins.items() if d in dev and dev[d][0] != v}
        assert not drift, f"requirements.lock and requirements-dev.lock disagree: {drift}"


def test_time_zones_come_from_the_tzdata_package() -> None:
    import zoneinfo

    import tzdata

    import notee

    assert zoneinfo.TZPATH == (), "zoneinfo would read the host's zone files"
    assert notee.TZDATA_VERSION == tzdata.IANA_VERSION
    assert zoneinfo.ZoneInfo("Europe/Kyiv").key == "Europe/Kyiv"  # resolved from the package, no host file


def test_compose_and_env_example_name_only_real_settings() -> None:
    compose = read_compose()
    fields = {f"NOTEE_{name.upper()}" for name in Settings.model_fields}
    for name, svc in notee_services(compose).items():
        unknown = {k for k in svc.get("environment", {}) if k.startswith("NOTEE_")} - fields
        assert not unknown, f"{name}: not settings: {unknown}"
    example = (ROOT / ".env.example").read_text()
    in_example = set(re.findall(r"^#?\s*(NOTEE_[A-Z0-9_]+)=", example, flags=re.M))
    assert in_example and not in_example - fields, f".env.example names non-settings: {in_example - fields}"
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", (ROOT / "compose.yaml").read_text()))
    assert required and required <= set(re.findall(r"^([A-Z0-9_]+)=", example, flags=re.M)), (
        f"compose.yaml requires variables .env.example does not list: {required}"
    )
    for secret in ("NOTEE_ADMIN_TOKEN", "NOTEE_CREDENTIALS_KEY", "MYSQL_PASSWORD"):
        assert re.search(rf"^{secret}=$", example, flags=re.M), f".env.example must leave {secret} empty"
    assert "notee:notee" not in (ROOT / "compose.yaml").read_text()


def _default(value: str) -> str:
    """A compose value with ``${VAR:-default}`` replaced by its default."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def test_compose_publishes_nothing_beyond_loopback_and_checks_every_notee_process() -> None:
    compose = read_compose()
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            parts = _default(str(port)).split(":")
            host_ip = parts[0] if len(parts) == 3 else ""  # "8080:8080" publishes on every interface
            assert host_ip == "127.0.0.1", f"{name} publishes {port} on {host_ip or 'all interfaces'}"
    services = notee_services(compose)
    for name in ("api", "worker", "scheduler", "webhooks", "emulator"):
        assert "healthcheck" in services[name], f"{name} has no healthcheck"
    assert services["emulator"].get("profiles") == ["emulator"], "the emulator must be an optional profile"
    assert "profiles" not in services["api"]
    for name in ("prometheus", "grafana"):
        assert compose["services"][name].get("profiles") == ["monitoring"], f"{name} must be an optional profile"
    for name in ("prometheus", "grafana"):
        assert compose["services"][name].get("profiles") == ["monitoring"], f"{name} must be an optional profile"


def _metrics_ports(compose: dict[str, Any]) -> dict[str, int]:
    env = notee_services(compose)["worker"]["environment"]  # the environment every Notee process shares
    return {name: int(env[f"NOTEE_{name.upper()}_METRICS_PORT"]) for name in ("worker", "scheduler", "webhooks")}


def test_compose_turns_metrics_on_inside_the_compose_network_only() -> None:
    compose = read_compose()
    ports = _metrics_ports(compose)
    assert len(set(ports.values())) == 3, ports
    for name, svc in notee_services(compose).items():
        if name == "emulator":
            continue
        assert svc["environment"]["NOTEE_METRICS_HOST"] == "0.0.0.0", f"{name}: metrics must bind in the container"
        published = {int(_default(str(p)).split(":")[-1]) for p in svc.get("ports", [])}
        assert not published & set(ports.values()), f"{name} publishes a metrics port: {published}"


def test_compose_starts_the_emulator_before_the_processes_that_read_its_ca() -> None:
    compose = read_compose()
    services = compose["services"]
    for name in ("api", "worker"):  # the processes that send pushes, through NOTEE_EMULATOR_CA_FILE's CA
        depends = services[name]["depends_on"]
        assert depends["emulator"] == {"condition": "service_healthy", "required": False}, name
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
    emulator = services["emulator"]
    assert emulator["healthcheck"]["test"] == ["CMD", "notee", "healthcheck", "emulator"]
    state_dir = emulator["command"][emulator["command"].index("--state-dir") + 1]
    assert emulator["environment"]["NOTEE_EMULATOR_CA_FILE"] == f"{state_dir}/ca.crt"
    example = (ROOT / ".env.example").read_text()
    assert f"NOTEE_EMULATOR_CA_FILE={state_dir}/ca.crt" in example  # what the other processes are told
    # Compose refuses a dependency on a service of a profile that may be off, unless it is optional.
    for name, svc in services.items():
        depends = svc.get("depends_on") or {}
        for dependency, how in (depends if isinstance(depends, dict) else {key: {} for key in depends}).items():
            if how.get("required") is False:
                continue
            wanted = set(services[dependency].get("profiles", []))
            assert not wanted or wanted & set(svc.get("profiles", [])), f"{name} needs {dependency} of {wanted}"


def _bind_mounts(svc: dict[str, Any]) -> dict[str, Path]:
    """Container path -> the checkout's file or folder, for each ``./host:container[:ro]`` volume."""
    mounts = {}
    for volume in svc.get("volumes", []):
        host, container = str(volume).split(":")[:2]
        if host.startswith("./"):
            mounts[container] = ROOT / host
    return mounts


def _mounted(mounts: dict[str, Path], container_path: str) -> Path:
    for container, host in sorted(mounts.items(), key=lambda m: -len(m[0])):
        if container_path == container or container_path.startswith(container + "/"):
            return host / container_path.removeprefix(container).lstrip("/")
    raise AssertionError(f"{container_path} is not mounted from the checkout")


def test_compose_monitoring_profile_scrapes_every_process_and_provisions_the_dashboard() -> None:
    import yaml

    compose = read_compose()
    services, ports = compose["services"], _metrics_ports(compose)
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert re.fullmatch(r"prom/prometheus:v\d+\.\d+\.\d+", prometheus["image"]), prometheus["image"]
    assert re.fullmatch(r"grafana/grafana:\d+\.\d+\.\d+", grafana["image"]), grafana["image"]
    for svc in (prometheus, grafana):
        assert all(path.exists() for path in _bind_mounts(svc).values()), _bind_mounts(svc)
    flag = next(a for a in prometheus["command"] if a.startswith("--config.file="))
    config_file = _mounted(_bind_mounts(prometheus), flag.split("=", 1)[1])
    config = yaml.safe_load(config_file.read_text())
    assert all((config_file.parent / rules).exists() for rules in config["rule_files"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"notee-api", "notee-worker", "notee-scheduler", "notee-webhooks"}
    api_port = services["api"]["command"][services["api"]["command"].index("--port") + 1]
    assert jobs["notee-api"]["static_configs"][0]["targets"] == [f"api:{api_port}"]
    [secret] = prometheus["secrets"]
    assert jobs["notee-api"]["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    assert compose["secrets"][secret] == {"environment": "NOTEE_ADMIN_TOKEN"}
    for process, port in ports.items():  # every replica: the service's name resolves to each container
        [lookup] = jobs[f"notee-{process}"]["dns_sd_configs"]
        assert (lookup["names"], lookup["type"], lookup["port"]) == ([process], "A", port), lookup
    provisioning = _mounted(_bind_mounts(grafana), "/etc/grafana/provisioning")
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090" and "127.0.0.1:9090:9090" in prometheus["ports"]
    [provider] = yaml.safe_load((provisioning / "dashboards" / "notee.yml").read_text())["providers"]
    dashboard = _mounted(_bind_mounts(grafana), provider["options"]["path"] + "/notee-dashboard.json")
    assert dashboard == ROOT / "deploy" / "grafana" / "notee-dashboard.json"


def test_image_is_built_from_the_wheel_and_the_lock_and_runs_unprivileged() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip wheel .*--no-deps", dockerfile)
    assert "pip install --no-cache-dir --require-hashes -r /tmp/requirements.lock" in dockerfile
    assert re.search(r"pip install --no-cache-dir --no-deps /tmp/notee-\*\.whl", dockerfile)
    users = re.findall(r"^USER\s+(\S+)", dockerfile, flags=re.M)
    assert users and users[-1] not in ("root", "0"), "the image must end on a non-root USER"
    copied = set(re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, flags=re.M))
    sources = {part for line in copied for part in line.split()}
    assert {"pyproject.toml", "setup.py", "requirements.lock", "notee", "schema", "clients/python"} <= sources
    assert re.search(r"pip install --no-cache-dir --no-deps /tmp/notee_sdk-\*\.whl", dockerfile)


def test_the_sdks_names_do_not_collide_with_a_client_generated_from_the_openapi_document():
    """openapi-python-client names a client of an API titled "Notee" ``notee-client`` (import package
    ``notee_sdk``): the SDK must be installable beside one (issue 37), and the server's own
    distribution ``notee`` must stay apart too."""
    from notee.api.app import create_app
    from notee.core.settings import Settings

    title = create_app(Settings()).openapi()["info"]["title"]
    generated = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") + "-client"
    sdk = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]["name"]
    packages = {p.name for p in (ROOT / "clients" / "python").iterdir() if (p / "__init__.py").exists()}
    assert generated == "notee-client"  # what the generator makes today: the name to stay clear of
    assert sdk not in (generated, "notee") and sdk == "notee-sdk"
    assert packages == {"notee_sdk"} and generated.replace("-", "_") not in packages
