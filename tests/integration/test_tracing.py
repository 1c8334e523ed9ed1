"""OpenTelemetry tracing (issue 37; notee/core/tracing.py, docs/DEPLOY.md "Tracing"): off by
default (no span, nothing carried in the job); on, a publish, the worker's task of its job and each
provider request are one trace (the task joins it through the job's ``traceparent``), an immediate
single send is ``notee.send`` with its provider requests, and log lines inside a span carry the trace
id. Spans are read with the SDK's in-memory exporter."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from notee.core import logs, tracing
from notee.store import jobs_sql
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import new_user, random_token

pytestmark = pytest.mark.tenant(credentials=True)


@pytest.fixture()
def spans():
    """Tracing on for the test, into an in-memory exporter; off again after it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider.get_tracer("notee"))
    yield exporter
    tracing.disable()
    provider.shutdown()


def _payload(runtime, job_id: str) -> dict:
    with runtime.sessions() as session:
        job = jobs_sql.get_job(session, job_id)
    assert job is not None
    return json.loads(job.payload) if isinstance(job.payload, (str, bytes)) else job.payload


def _publish(client, headers) -> str:
    token = random_token("tr")
    user = new_user(client, headers, devices=[(token, "AOS")])
    assert client.put("/v1/templates/TOPIC/tr", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    assert client.put(f"/v1/users/{user}/subscriptions/topic/tr/all", headers=headers).status_code in (200, 201)
    r = client.post("/v1/topics/tr/all/publish", json={}, headers=headers)
    assert r.status_code == 202, r.text
    return str(r.json()["job_id"])


def test_tracing_is_off_by_default_and_carries_nothing(client, runtime, tenant, settings):
    _, headers = tenant
    assert settings.tracing is False and not tracing.enabled()
    job_id = _publish(client, headers)
    assert "trace" not in _payload(runtime, job_id)


def test_a_publish_its_task_and_the_provider_request_are_one_trace(client, runtime, tenant, emu_runtime, spans):
    service, headers = tenant
    job_id = _publish(client, headers)
    assert _payload(runtime, job_id)["trace"].startswith("00-")  # W3C traceparent, for the worker
    run_worker_until_idle(emu_runtime, [service])
    by_name = {}
    for span in spans.get_finished_spans():
        by_name.setdefault(span.name, []).append(span)
    [publish] = by_name["notee.publish"]
    [task] = [s for s in by_name["notee.task"] if s.attributes["notee.job_id"] == job_id]
    [send] = [s for s in by_name["notee.provider.send"] if s.parent and s.parent.span_id == task.context.span_id]
    assert publish.attributes["notee.job_id"] == job_id and publish.attributes["notee.service"] == service
    assert task.context.trace_id == publish.context.trace_id == send.context.trace_id
    assert task.parent is not None and task.parent.span_id == publish.context.span_id
    assert (send.attributes["notee.provider"], send.attributes["notee.messages"]) == ("fcm", 1)
    assert send.attributes["notee.outcome.Delivered"] == 1


def test_a_single_send_is_traced_with_its_provider_request(client, tenant, emu_app, spans):
    _, headers = tenant
    user = new_user(client, headers, devices=[(random_token("ts"), "AOS")])
    assert client.put("/v1/templates/SINGLE/tr", json={"title": "t", "body": "b"}, headers=headers).status_code == 201
    r = client.post(f"/v1/users/{user}/send", json={"type": "tr"}, headers=headers)
    assert r.status_code == 200 and r.json()["delivered"] == 1, r.text
    finished = spans.get_finished_spans()
    [send] = [s for s in finished if s.name == "notee.send"]
    [request] = [s for s in finished if s.name == "notee.provider.send" and s.context.trace_id == send.context.trace_id]
    assert request.parent is not None and request.parent.span_id == send.context.span_id


def test_log_lines_inside_a_span_carry_its_trace_id(spans):
    record = logging.LogRecord("notee.test", logging.INFO, __file__, 1, "inside", None, None)
    with tracing.span("notee.test") as span:
        json_line = json.loads(logs.JsonFormatter().format(record))
        text_line = logs.TextFormatter("%(message)s").format(record)
    trace_id = format(span.get_span_context().trace_id, "032x")
    assert json_line["trace_id"] == trace_id
    assert text_line == f"inside trace_id={trace_id}"
    assert "trace_id" not in json.loads(logs.JsonFormatter().format(record))  # outside a span: none
