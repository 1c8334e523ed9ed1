"""The Kubernetes manifests (deploy/kubernetes/, docs/DEPLOY.md) hold against the Kubernetes API's own
schemas and against Notee: every object validates strictly (no unknown field) with the schemas the
kubernetes-validate package ships (offline); every container runs a real `notee` command; every
NOTEE_* key is a setting and the ConfigMap with the example Secret builds a valid Settings; the
probes ask paths the API serves; the grace periods cover the drain times the settings give; the
ServiceMonitors scrape ports their Services have."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography.fernet import Fernet

from notee.api.app import create_app
from notee.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.31"  # the oldest minor still supported upstream when these were written
OPERATOR_KINDS = {"ServiceMonitor"}  # monitoring.coreos.com/v1: no schema in kubernetes-validate


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(KUBE.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def _containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(object name, pod spec, container) of every workload."""
    out = []
    for _, doc in _documents():
        if doc["kind"] in ("Deployment", "Job"):
            pod = doc["spec"]["template"]["spec"]
            out += [(doc["metadata"]["name"], pod, c) for c in pod["containers"]]
    return out


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in _documents() if doc["kind"] == kind}


@pytest.mark.parametrize(("file", "doc"), [d for d in _documents() if d[1]["kind"] not in OPERATOR_KINDS])
def test_every_object_validates_against_the_kubernetes_schemas(file: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_can_fail() -> None:
    deployment = copy.deepcopy(_by_kind("Deployment")["notee-worker"])
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}  # a typo of livenessProbe
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_kustomization_applies_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    files = {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(kustomization["resources"]) == files
    assert {i["name"] for i in kustomization["images"]} == {c["image"] for _, _, c in _containers()} == {"notee"}


def _commands() -> set[str]:
    env = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "PATH": "/usr/bin:/bin"}
    shown = subprocess.run(
        [sys.executable, "-m", "notee", "--help"], env=env, capture_output=True, text=True, check=True
    )
    return set(re.findall(r"^│ ([a-z][a-z-]*)\s", shown.stdout, flags=re.M))


def test_every_container_and_probe_runs_a_real_notee_command() -> None:
    commands = _commands()
    for name, _, container in _containers():
        assert container["args"][0] in commands, f"{name}: `notee {container['args'][0]}` is not a command"
        probe = container.get("livenessProbe", {}).get("exec")
        if probe:
            assert probe["command"][0] == "notee" and probe["command"][1] in commands, (name, probe)
    ran = {c["args"][0] for _, _, c in _containers()}
    assert {"migrate", "api", "worker", "scheduler", "webhooks"} <= ran


def test_the_config_names_only_settings_and_makes_valid_settings() -> None:
    fields = {f"NOTEE_{name.upper()}" for name in Settings.model_fields}
    config = _by_kind("ConfigMap")["notee-config"]["data"]
    secret = _by_kind("Secret")["notee-secrets"]["stringData"]
    assert not (set(config) | set(secret)) - fields, (set(config) | set(secret)) - fields
    assert not set(config) & {"NOTEE_MYSQL_URL", "NOTEE_ADMIN_TOKEN", "NOTEE_CREDENTIALS_KEY"}  # secrets stay secret
    # the example's placeholders replaced as an operator would (SECURITY.md "Hardening checklist")
    filled = secret | {"NOTEE_CREDENTIALS_KEY": Fernet.generate_key().decode(), "NOTEE_ADMIN_TOKEN": "x" * 40}
    assert all("CHANGE-ME" in secret[k] for k in ("NOTEE_CREDENTIALS_KEY", "NOTEE_ADMIN_TOKEN", "NOTEE_MYSQL_URL"))
    values = {k.removeprefix("NOTEE_").lower(): v for k, v in (config | filled).items() if v != ""}
    Settings(_env_file=None, **values)  # raises on a value a process would refuse at start-up
    for _, _, container in _containers():
        sources = {s.get("configMapRef", s.get("secretRef", {})).get("name") for s in container["envFrom"]}
        assert sources == {"notee-config", "notee-secrets"}


def test_probes_ask_what_the_api_serves_and_grace_covers_the_drain(settings: Settings) -> None:
    paths = set(create_app(settings).openapi()["paths"])
    config = _by_kind("ConfigMap")["notee-config"]["data"]
    api = _by_kind("Deployment")["notee-api"]["spec"]["template"]["spec"]
    probes = [api["containers"][0][p]["httpGet"]["path"] for p in ("livenessProbe", "readinessProbe", "startupProbe")]
    assert set(probes) <= paths and probes[:2] == ["/livez", "/readyz"]
    pre_stop = api["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert api["terminationGracePeriodSeconds"] > pre_stop + int(config["NOTEE_API_SHUTDOWN_BUDGET_S"])
    worker = _by_kind("Deployment")["notee-worker"]["spec"]["template"]["spec"]
    assert worker["terminationGracePeriodSeconds"] > float(config["NOTEE_FANOUT_STOP_GRACE_S"])
    for name, pod, container in _containers():
        declared = {p["containerPort"] for p in container.get("ports", [])}
        for var in ("NOTEE_API_PORT", "NOTEE_API_ADMIN_PORT") if container["args"][0] == "api" else ():
            assert int(config[var]) in declared, (name, var)
        metrics = {
            "worker": "NOTEE_WORKER_METRICS_PORT",
            "scheduler": "NOTEE_SCHEDULER_METRICS_PORT",
            "webhooks": "NOTEE_WEBHOOKS_METRICS_PORT",
        }
        if container["args"][0] in metrics:
            assert int(config[metrics[container["args"][0]]]) in declared, name
        assert pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]


def test_every_process_has_a_disruption_budget_and_the_monitors_scrape_real_ports() -> None:
    budgets = {
        d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for d in _by_kind("PodDisruptionBudget").values()
    }
    assert budgets == set(_by_kind("Deployment"))
    services = _by_kind("Service").values()
    for monitor in _by_kind("ServiceMonitor").values():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        selector = monitor["spec"]["selector"]
        wanted = set(selector.get("matchExpressions", [{}])[0].get("values", [])) or {
            selector["matchLabels"]["notee.io/metrics"]
        }
        picked = [s for s in services if s["metadata"]["labels"].get("notee.io/metrics") in wanted]
        assert len(picked) == len(wanted), (monitor["metadata"]["name"], wanted)
        for endpoint in monitor["spec"]["endpoints"]:
            for service in picked:
                assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}, (service, endpoint)
