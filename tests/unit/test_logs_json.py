"""NOTEE_LOG_FORMAT=json (issue 16.2): one JSON object per line from real `notee api`, `notee worker`
and `notee emulator` processes (the scheduler's: tests/integration/test_metrics.py), with the request id, job id
and service where there is one; the access log included; third-party chatter at WARNING.

Here, the rules that need no server; tests/integration/test_logs_json.py has the rest."""

from __future__ import annotations

import json
import logging

from notee.core import logs


def test_third_party_info_chatter_is_held_at_warning() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers.clear()
    try:
        logs.setup("INFO", "json")
        for name in ("apscheduler.scheduler", "apscheduler.executors.default", "cassandra.cluster", "httpx"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
            assert logging.getLogger(name).isEnabledFor(logging.WARNING), name
        assert logging.getLogger("notee").isEnabledFor(logging.INFO)
        assert isinstance(root.handlers[0].formatter, logs.JsonFormatter)
    finally:
        root.handlers[:], root.level = saved


def test_context_variables_reach_the_json_line() -> None:
    record = logging.LogRecord("notee.worker.task", logging.INFO, __file__, 1, "task %s done", ("j/0",), None)
    with logs.task_context("job-1", "SVC"):
        inside = json.loads(logs.JsonFormatter().format(record))
    outside = json.loads(logs.JsonFormatter().format(record))
    assert inside["job_id"] == "job-1" and inside["service"] == "SVC" and inside["message"] == "task j/0 done"
    assert "job_id" not in outside and "service" not in outside
