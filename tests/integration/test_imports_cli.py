"""`notee import` and `notee export` as a user runs them: subprocesses against a real `notee api` and
a real `notee worker`, configured by NOTEE_URL and NOTEE_API_KEY alone (tests/support/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import notee, tenant_env
from tests.support.registry import random_token


def test_import_with_wait_then_export_round_trips(processes, admin_env, service_id, tmp_path: Path):
    env = tenant_env(admin_env, service_id)
    assert notee("template", "put", "TOPIC", "news", "--title", "t", "--body", "b", env=env).returncode == 0
    tokens = [random_token("cli"), random_token("cli")]
    good = [
        {"user": "cli-a", "name": "Ana", "tags": {"plan": "pro"}, "devices": [{"token": tokens[0], "platform": "AOS"}]},
        {
            "user": "cli-b",
            "devices": [{"token": tokens[1], "platform": "IOS"}],
            "topics": [{"type": "news", "topic": "x"}],
        },
    ]
    source = tmp_path / "users.ndjson"
    source.write_text(json.dumps(good[0]) + "\n{broken\n" + json.dumps(good[1]) + "\n")
    worker = processes.worker(service_id, lanes=1)
    try:
        ran = notee("import", str(source), "--wait", "--timeout", "90", env=env)
        # exit 1: a line failed; stdout: the import id, then the failed line; stderr: plain progress lines
        assert ran.returncode == 1, ran.stdout + ran.stderr
        import_id, *failed = ran.stdout.strip().splitlines()
        assert [json.loads(x)["line"] for x in failed] == [2]
        progress = [x for x in ran.stderr.splitlines() if not x.startswith("error:")]
        assert progress[-1].startswith("done: 3/3 lines · failed 1"), ran.stderr
        assert "\r" not in ran.stderr  # not a terminal: one line per change, no redrawn bar
        shown = json.loads(notee("import", str(source), "--json", env=env).stdout)  # the same file again
        assert shown["import_id"] != import_id

        out = tmp_path / "export.ndjson"
        exported = notee("export", str(out), env=env)
        assert exported.returncode == 0, exported.stderr
        records = [json.loads(x) for x in out.read_text().splitlines()]
        assert [r["user"] for r in records] == ["cli-a", "cli-b"]
        assert records[0]["tags"] == {"plan": "pro"} and records[1]["topics"] == [{"type": "news", "topic": "x"}]

        csv_out = tmp_path / "export.csv"
        assert notee("export", str(csv_out), env=env).returncode == 0  # csv from the file's name
        assert csv_out.read_text().startswith("user,name,")
        again = notee("import", str(csv_out), "--wait", "--timeout", "90", env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        stdout = notee("export", "-", "--format", "ndjson", env=env)
        assert stdout.stdout == out.read_text()  # re-importing its own export changed nothing
    finally:
        worker.stop(timeout=30)


def test_import_errors_are_one_line_and_their_exit_code(admin_env, service_id, tmp_path: Path):
    env = tenant_env(admin_env, service_id)
    missing = notee("import", str(tmp_path / "nope.ndjson"), env=env)
    assert missing.returncode == 2 and missing.stderr.startswith("error: cannot read"), missing.stderr
    empty = tmp_path / "empty.csv"
    empty.write_text("name\nx\n")
    refused = notee("import", str(empty), env=env)
    assert refused.returncode == 2 and "422 invalid_input" in refused.stderr, refused.stderr
    bad_format = notee("export", str(tmp_path / "x"), "--format", "xml", env=env)
    assert bad_format.returncode == 2, bad_format.stderr
