"""Scraping a Notee process's Prometheus metrics over HTTP, parsed with prometheus_client's own parser."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape", "metric_names_in", "scrape", "worker_metrics_url"]

# Sample names a family of each type exposes (a counter family is named without its _total).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created", ""),
    "gauge": ("",),
    "untyped": ("",),
    "info": ("_info",),
}


@dataclass
class Scrape:
    text: str
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = field(default_factory=dict)
    exposed: set[str] = field(default_factory=set)  # every sample name the families declare

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name`` with exactly these labels; 0 when it does not exist (yet)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """The sum of every sample ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def has(self, name: str, **labels: str) -> bool:
        want = set(labels.items())
        return any(n == name and want <= ls for (n, ls) in self.samples)


def scrape(url: str, token: str | None = None) -> Scrape:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(url, headers=headers, timeout=30)
    assert r.status_code == 200, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("text/plain"), r.headers["content-type"]
    out = Scrape(r.text)
    for family in text_string_to_metric_families(r.text):
        out.exposed.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
        for sample in family.samples:
            out.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
            out.exposed.add(sample.name)
    return out


def worker_metrics_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/metrics"


# A metric name in a PromQL expression: an identifier not followed by "(" (a function) and not a
# label name (inside {...} or by/without (...)).
_BRACES = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
}


def metric_names_in(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, groupings, functions, durations
    and numbers left out)."""
    bare = _GROUPING.sub(" ", _BRACES.sub(" ", expr))
    bare = re.sub(r"\[[^\]]*\]", " ", bare)  # range selectors: [5m], [$__rate_interval]
    bare = re.sub(r'"[^"]*"', " ", bare)
    names = set()
    for match in _IDENT.finditer(bare):
        word = match.group(1)
        if word in _PROMQL_WORDS or word.startswith("$"):
            continue
        names.add(word)
    return names
