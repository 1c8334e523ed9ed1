"""Prometheus rule files checked as `promtool check rules` checks them, without promtool (a Go binary
we do not ship): the file's structure (groups, rules, known keys only, durations, label and annotation
names), every expression parsed by a real PromQL parser (promql-parser: Prometheus's grammar, function
signatures and argument types), every annotation template limited to what Prometheus expands; and
Notee's own rules on top: every alert has a ``for``, a ``severity`` and a summary and description, and
every metric an expression reads (with every label it matches on) is one Notee exposes.
``check_rules`` returns the problems found (empty: the file is good)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import promql_parser
from prometheus_client.metrics import MetricWrapperBase

from notee.core import metrics

__all__ = ["check_rules", "notee_series"]

# Prometheus's duration format (common/model ParseDuration): units largest first, integers, or "0".
_DURATION = re.compile(r"^(?:0|(?=\d)(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?)$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_ALERT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")  # Notee's style: NoteeSchedulerStalled
# A template action Prometheus expands in an alert's labels and annotations, as used here.
_ACTION = re.compile(
    r"^\s*\$(?:value|labels\.(?P<label>[a-zA-Z_][a-zA-Z0-9_]*))"
    r"(?:\s*\|\s*(?:humanize|humanize1024|humanizeDuration|humanizePercentage|humanizeTimestamp|toUpper|toLower))?\s*$"
)
_GROUP_KEYS = {"name", "interval", "limit", "query_offset", "labels", "rules"}
_RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
_SEVERITIES = {"critical", "warning", "info"}
_TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def notee_series() -> dict[str, frozenset[str]]:
    """Every series name the metrics of notee/core/metrics.py expose -> its label names (``le`` on a
    histogram's buckets): the metrics defined there and the levels computed when Prometheus scrapes."""
    series: dict[str, frozenset[str]] = {}
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            labels = frozenset(metric._labelnames)
            for family in metric.describe():
                for suffix in _SUFFIXES[family.type]:
                    series[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    for name, (_, labels) in metrics.LEVELS.items():
        series[name] = frozenset(labels)
    return series


def check_rules(document: Any, series: Mapping[str, frozenset[str]]) -> list[str]:
    """The problems of a parsed rule file (``yaml.safe_load`` of it); empty when there are none."""
    if not isinstance(document, dict) or set(document) != {"groups"} or not isinstance(document["groups"], list):
        return ["the file must be a mapping with one key, groups: a list"]
    problems: list[str] = []
    names = [group.get("name") for group in document["groups"] if isinstance(group, dict)]
    problems += [f"group {name!r} is repeated" for name in sorted({n for n in names if names.count(n) > 1})]
    for index, group in enumerate(document["groups"]):
        problems += _check_group(group, index, series)
    return problems


def _check_group(group: Any, index: int, series: Mapping[str, frozenset[str]]) -> list[str]:
    if not isinstance(group, dict):
        return [f"group {index}: not a mapping"]
    where = f"group {group.get('name', index)!r}"
    problems = [f"{where}: unknown key {key!r}" for key in sorted(set(group) - _GROUP_KEYS)]
    if not isinstance(group.get("name"), str) or not group["name"]:
        problems.append(f"{where}: no name")
    problems += [_bad_duration(f"{where}: {key}", group[key]) for key in ("interval", "query_offset") if key in group]
    rules = group.get("rules")
    if not isinstance(rules, list) or not rules:
        return [*filter(None, problems), f"{where}: rules must be a non-empty list"]
    for number, rule in enumerate(rules):
        problems += _check_rule(rule, f"{where} rule {number}", series)
    return [p for p in problems if p]


def _check_rule(rule: Any, where: str, series: Mapping[str, frozenset[str]]) -> list[str | None]:
    if not isinstance(rule, dict):
        return [f"{where}: not a mapping"]
    where = f"{where} ({rule.get('alert') or rule.get('record')})"
    problems: list[str | None] = [f"{where}: unknown key {key!r}" for key in sorted(set(rule) - _RULE_KEYS)]
    if ("alert" in rule) == ("record" in rule):
        return [*problems, f"{where}: exactly one of alert and record must be set"]
    problems += [_bad_duration(f"{where}: {key}", rule[key]) for key in ("for", "keep_firing_for") if key in rule]
    problems += _check_labels(rule, where)
    expression, problem = _parse(rule.get("expr"), where)
    if expression is None:
        return [*problems, problem]
    problems += _check_series(expression, where, series)
    if "record" in rule:
        return problems + _check_recording(rule, where)
    return problems + _check_alert(rule, where, expression, series)


def _bad_duration(where: str, value: Any) -> str | None:
    if isinstance(value, str) and _DURATION.match(value):
        return None
    return f"{where}: {value!r} is not a Prometheus duration (like 30s, 5m, 1h30m)"


def _check_labels(rule: dict[str, Any], where: str) -> list[str | None]:
    problems: list[str | None] = []
    for key in ("labels", "annotations"):
        values = rule.get(key, {})
        if not isinstance(values, dict):
            problems.append(f"{where}: {key} must be a mapping")
            continue
        for name, value in values.items():
            if not isinstance(name, str) or not _LABEL_NAME.match(name) or name == "__name__":
                problems.append(f"{where}: {key} has an invalid name {name!r}")
            if not isinstance(value, str):
                problems.append(f"{where}: {key}.{name} must be a string")
    return problems


def _parse(expr: Any, where: str) -> tuple[promql_parser.Expr | None, str | None]:
    if not isinstance(expr, str) or not expr.strip():
        return None, f"{where}: no expr"
    try:
        return promql_parser.parse(expr), None
    except ValueError as exc:
        return None, f"{where}: expr does not parse: {exc}"


def _nodes(expression: promql_parser.Expr, kind: type) -> list[Any]:
    found: list[Any] = []
    promql_parser.walk(expression, lambda node: found.append(node) if isinstance(node, kind) else None)
    return found


def _selected(selector: promql_parser.VectorSelector) -> tuple[str | None, list[str]]:
    """The metric name a selector reads and the label names it matches on."""
    matchers = list(selector.matchers.matchers) + [m for group in selector.matchers.or_matchers for m in group]
    name = selector.name or next((m.value for m in matchers if m.name == "__name__"), None)
    return name, [m.name for m in matchers if m.name != "__name__"]


def _check_series(expression: promql_parser.Expr, where: str, series: Mapping[str, frozenset[str]]) -> list[str | None]:
    problems: list[str | None] = []
    for selector in _nodes(expression, promql_parser.VectorSelector):
        name, matched = _selected(selector)
        if name not in series:
            problems.append(f"{where}: reads {name!r}, which Notee does not expose")
            continue
        unknown = set(matched) - series[name] - _TARGET_LABELS
        if unknown:
            problems.append(f"{where}: {name} has no label {', '.join(sorted(unknown))}")
    return problems


def _check_recording(rule: dict[str, Any], where: str) -> list[str | None]:
    problems: list[str | None] = [
        f"{where}: a recording rule has no {key}" for key in ("annotations", "for", "keep_firing_for") if key in rule
    ]
    if not isinstance(rule["record"], str) or not _METRIC_NAME.match(rule["record"]):
        problems.append(f"{where}: {rule['record']!r} is not a metric name")
    return problems


def _check_alert(
    rule: dict[str, Any], where: str, expression: promql_parser.Expr, series: Mapping[str, frozenset[str]]
) -> list[str | None]:
    """promtool's template check, and Notee's policy: a name in its style, for, severity, summary, description."""
    problems: list[str | None] = []
    if not isinstance(rule["alert"], str) or not _ALERT_NAME.match(rule["alert"]):
        problems.append(f"{where}: alert names are CamelCase words")
    if "for" not in rule:
        problems.append(f"{where}: no for (an alert fires on a condition that lasts)")
    if rule.get("labels", {}).get("severity") not in _SEVERITIES:
        problems.append(f"{where}: labels.severity must be one of {', '.join(sorted(_SEVERITIES))}")
    annotations = rule.get("annotations", {})
    problems += [f"{where}: no {key} annotation" for key in ("summary", "description") if not annotations.get(key)]
    kept = _labels_kept(expression, series)
    for key, value in {**rule.get("labels", {}), **annotations}.items():
        problems += _check_template(f"{where}: {key}", str(value), kept)
    return problems


def _labels_kept(expression: promql_parser.Expr, series: Mapping[str, frozenset[str]]) -> set[str]:
    """The labels an alert's series may carry: those its aggregations keep (``by``), else the labels of
    the series it reads."""
    kept: set[str] = set()
    for aggregate in _nodes(expression, promql_parser.AggregateExpr):
        if aggregate.modifier is not None and aggregate.modifier.type == promql_parser.AggModifierType.By:
            kept |= set(aggregate.modifier.labels)
    if kept or _nodes(expression, promql_parser.AggregateExpr):
        return kept
    for selector in _nodes(expression, promql_parser.VectorSelector):
        kept |= set(series.get(_selected(selector)[0] or "", ()))
    return kept | _TARGET_LABELS


def _check_template(where: str, text: str, labels: set[str]) -> list[str | None]:
    if text.count("{{") != text.count("}}"):
        return [f"{where}: unbalanced {{{{ }}}}"]
    problems: list[str | None] = []
    for action in re.findall(r"\{\{(.*?)\}\}", text, flags=re.S):
        found = _ACTION.match(action)
        if found is None:
            problems.append(
                f"{where}: template {{{{{action}}}}} is not $value or $labels.<name> (| a humanize function)"
            )
        elif found["label"] and found["label"] not in labels:
            problems.append(f"{where}: $labels.{found['label']} is not a label of the alert's series")
    return problems
