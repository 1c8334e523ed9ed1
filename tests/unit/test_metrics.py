"""Prometheus metrics from every process (issue 16.1), scraped over HTTP from real `notee api`,
`notee worker` and `notee scheduler` processes and parsed with prometheus_client's parser:
counters move by exactly what happened, HTTP requests are labelled by route template, secrets never
appear, /metrics needs the admin token, and several workers of one host do not collide.

Here, the rules that need no server; tests/integration/test_metrics.py has the rest."""

from __future__ import annotations

import secrets
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

from notee.core.metrics import BREAKER_STATES
from notee.providers.breaker import CircuitBreaker
from tests.support.metrics import metric_names_in


def test_the_promql_name_reader() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, provider) (rate(notee_provider_response_seconds_bucket{job="worker",'
        ' provider=~"$provider"}[$__rate_interval]))) / on(instance) group_left notee_x_total offset 5m'
    )
    assert metric_names_in(expr) == {"notee_provider_response_seconds_bucket", "notee_x_total"}


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_scrape_config_names_every_process() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"notee-api", "notee-worker", "notee-scheduler", "notee-webhooks"}
    assert jobs["notee-api"]["authorization"]["credentials_file"]  # /metrics of the API needs the admin token
    assert all(job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"] for job in jobs.values())


def test_the_breaker_state_is_one_series_per_state() -> None:
    """``notee_circuit_breaker_state{provider, state}``: 1 for the state the provider's breaker is in,
    0 for the others; no series for a provider it never guarded."""
    now = [0.0]
    breaker = CircuitBreaker(open_s=2.0, clock=lambda: now[0])
    provider = "test-" + secrets.token_hex(4)  # this process's other breakers never saw it

    def states() -> list[float | None]:
        return [
            REGISTRY.get_sample_value("notee_circuit_breaker_state", {"provider": provider, "state": state})
            for state in BREAKER_STATES
        ]

    assert states() == [None, None, None]
    assert not breaker.record(provider, sent=10, unreachable=1)
    assert states() == [1, 0, 0]  # closed
    assert breaker.record(provider, sent=10, unreachable=9)
    assert states() == [0, 0, 1]  # open
    now[0] = 2.5
    assert states() == [0, 1, 0]  # half-open: the next send is a probe
    assert not breaker.record(provider, sent=1, unreachable=0)
    assert states() == [1, 0, 0]
    assert BREAKER_STATES == ("closed", "half_open", "open")
