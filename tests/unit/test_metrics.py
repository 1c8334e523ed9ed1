"""Prometheus metrics from every process (issue 16.1), scraped over HTTP from real `notee api`,
`notee worker` and `notee scheduler` processes and parsed with prometheus_client's parser:
counters move by exactly what happened, HTTP requests are labelled by route template, secrets never
appear, /metrics needs the admin token, and several workers of one host do not collide.

Here, the rules that need no server; tests/integration/test_metrics.py has the rest."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.metrics import metric_names_in


def test_the_promql_name_reader() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, provider) (rate(notee_provider_response_seconds_bucket{job="worker",'
        ' provider=~"$provider"}[$__rate_interval]))) / on(instance) group_left notee_x_total offset 5m'
    )
    assert metric_names_in(expr) == {"notee_provider_response_seconds_bucket", "notee_x_total"}


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_scrape_config_names_the_three_processes() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"notee-api", "notee-worker", "notee-scheduler"}
    assert jobs["notee-api"]["authorization"]["credentials_file"]  # /metrics of the API needs the admin token
    assert all(job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"] for job in jobs.values())
