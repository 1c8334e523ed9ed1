"""deploy/prometheus/alerts.yml (docs/METRICS.md "Alerts") holds as `promtool check rules` would check
it, every metric it reads is one Notee exposes, it covers what docs/METRICS.md names, and the check
itself fails on a typo'd metric, an expression that does not parse and the other mistakes it knows."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.prometheus_rules import check_rules, notee_series

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "METRICS.md"


def _rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
    return loaded


def _alerts(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in document["groups"] for rule in group["rules"] if "alert" in rule}


def test_the_shipped_alert_rules_pass_the_check() -> None:
    assert check_rules(_rules(), notee_series()) == []


def test_the_alerts_cover_what_the_metrics_doc_names() -> None:
    alerts = _alerts(_rules())
    wanted = {
        "NoteeSchedulerStalled": "notee_scheduler_last_minute_timestamp_seconds",
        "NoteeSchedulerSkippedMinutes": 'notee_scheduler_minutes_total{state="skipped"}',
        "NoteeJobQueueWaiting": "notee_job_queue_oldest_age_seconds",
        "NoteeCircuitBreakerOpen": 'notee_circuit_breaker_state{state="open"}',
        "NoteeWebhookOutboxAge": "notee_webhook_outbox_oldest_due_age_seconds",
        "NoteeWebhookOutboxDepth": "notee_webhook_outbox_due",
        "NoteeStoreOutage": 'notee_store_errors_total{kind="outage"}',
    }
    for alert, reads in wanted.items():
        assert reads in alerts[alert]["expr"], (alert, alerts[alert]["expr"])
    documented = set(re.findall(r"^\| `(Notee[A-Za-z]+)` \|", METRICS_DOC.read_text(), flags=re.M))
    assert documented == set(alerts), "docs/METRICS.md's table of alerts and alerts.yml differ"


def test_every_scrape_configuration_loads_the_rules() -> None:
    for name in ("prometheus.yml", "compose.yml"):
        config = yaml.safe_load((DEPLOY / name).read_text())
        assert config["rule_files"] == ["alerts.yml"], name  # relative to the configuration's own directory


def _broken(change: str) -> dict[str, Any]:
    document = copy.deepcopy(_rules())
    rule = document["groups"][0]["rules"][0]
    group = document["groups"][0]
    if change == "typo":
        rule["expr"] = rule["expr"].replace("notee_scheduler_last_minute", "notee_scheduler_last_minut")
    elif change == "syntax":
        rule["expr"] = "time() - max(notee_scheduler_last_minute_timestamp_seconds > 120"
    elif change == "types":
        rule["expr"] = "rate(notee_scheduler_last_minute_timestamp_seconds) > 0"  # rate wants a range
    elif change == "function":
        rule["expr"] = "rat(notee_scheduler_minutes_total[5m]) > 0"
    elif change == "label":
        rule["expr"] = 'sum(increase(notee_scheduler_minutes_total{stat="skipped"}[10m])) > 0'
    elif change == "duration":
        rule["for"] = "5 minutes"
    elif change == "no_for":
        del rule["for"]
    elif change == "severity":
        rule["labels"]["severity"] = "urgent"
    elif change == "summary":
        del rule["annotations"]["summary"]
    elif change == "template":
        rule["annotations"]["summary"] = "stalled for {{ $value | humanizeDuration }"
    elif change == "template_label":
        rule["annotations"]["summary"] = "{{ $labels.provider }} stalled"  # the expression keeps no label
    elif change == "unknown_key":
        rule["fro"] = "5m"
    elif change == "both":
        rule["record"] = "notee:stalled"
    elif change == "group_repeated":
        document["groups"].append(copy.deepcopy(group))
    return document


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("typo", "reads 'notee_scheduler_last_minut_timestamp_seconds', which Notee does not expose"),
        ("syntax", "expr does not parse"),
        ("types", "expr does not parse: expected type matrix"),
        ("function", "expr does not parse: unknown function"),
        ("label", "notee_scheduler_minutes_total has no label stat"),
        ("duration", "'5 minutes' is not a Prometheus duration"),
        ("no_for", "no for"),
        ("severity", "labels.severity must be one of"),
        ("summary", "no summary annotation"),
        ("template", "unbalanced"),
        ("template_label", "$labels.provider is not a label of the alert's series"),
        ("unknown_key", "unknown key 'fro'"),
        ("both", "exactly one of alert and record"),
        ("group_repeated", "group 'notee-scheduler' is repeated"),
    ],
)
def test_the_check_fails_on_each_mistake(change: str, problem: str) -> None:
    problems = check_rules(_broken(change), notee_series())
    assert len(problems) == 1 and problem in problems[0], problems


def test_notee_series_names_every_kind_of_metric() -> None:
    series = notee_series()
    assert series["notee_pushes_total"] == {"provider", "service", "outcome"}
    assert "le" in series["notee_provider_response_seconds_bucket"] and "notee_provider_response_seconds_sum" in series
    assert series["notee_circuit_breaker_state"] == {"provider", "state"}  # a level, computed when scraped
    assert series["notee_webhook_outbox_depth"] == frozenset()
    assert not [name for name in series if name.endswith("_created")]
