"""The console shows ``ttl_expired`` (pushes held by a provider outage past their TTL: not sent, not
dead-lettered, not in targeted) beside sent, failed and pruned, in headless Chromium against a real
`notee api`: in the jobs page's last-24-hours summary and on the job's page, also after the page's
live refresh. Before, neither showed it, so a job whose held pushes expired looked as if it had sent
everything it targeted. (How pushes come to expire: tests/integration/test_provider_outage_hold.py;
here the job's task rows carry the counts a worker would have written.)"""

from __future__ import annotations

import secrets

from sqlalchemy import text

from notee.store import jobs_sql
from tests.support import browser
from tests.support.fanout import topic_job_row
from tests.support.logscan import remember_secret
from tests.support.registry import new_service


def _running_job(runtime, service: str, *, sent: int, pruned: int, ttl_expired: int) -> str:
    """A running one-task topic job of ``service`` whose task recorded these counts so far (leased
    for an hour: no claim takes it; running, so its page keeps refreshing itself)."""
    job = topic_job_row(
        service, [(0, 0)], {"title": "Hi", "body": "held", "data": {}, "ttl_seconds": 60, "priority": "high"}
    )
    job_id = job.job_id
    with runtime.sessions.begin() as session:
        jobs_sql.insert_job(session, job)
        session.execute(
            text(
                "UPDATE fanout_task SET state = 'running', targeted = :t, sent = :s, pruned = :p, ttl_expired = :x,"
                " lease_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE job_id = :j"
            ),
            {"t": sent + pruned, "s": sent, "p": pruned, "x": ttl_expired, "j": job_id},
        )
        session.execute(
            text("UPDATE fanout_job SET state = 'running', started_at = UTC_TIMESTAMP(6) WHERE job_id = :j"),
            {"j": job_id},
        )
    return job_id


def test_the_console_shows_pushes_past_their_ttl_beside_sent_failed_and_pruned(processes, client, runtime, settings):
    api_proc = processes.api()
    service = "W" + secrets.token_hex(5).upper()
    key = new_service(client, settings, service)["Authorization"].removeprefix("Bearer ")
    remember_secret(key)
    job_id = _running_job(runtime, service, sent=4, pruned=1, ttl_expired=6)
    try:
        _walk(api_proc.url, service, key, job_id)
    finally:  # no job of this test is left running
        with runtime.sessions.begin() as session:
            session.execute(text("DELETE FROM fanout_job WHERE job_id = :j"), {"j": job_id})


def _walk(url: str, service: str, key: str, job_id: str) -> None:
    with browser.Browser(url, browser.artifacts("console-ttl")) as b:
        b.visit(f"/console/s/{service}/jobs", "sign-in")
        b.submit("sign-in", {"secret": key})
        assert b.d.current_url.endswith(f"/console/s/{service}/jobs")
        b.record("jobs")
        summary = {f: b.text(f'[data-sum="{f}"]') for f in ("sent", "failed", "pruned", "ttl_expired")}
        assert summary == {"sent": "4", "failed": "0", "pruned": "1", "ttl_expired": "6"}, summary

        b.visit(f"/console/s/{service}/jobs/{job_id}", "job")
        fields = {f: b.text(f'[data-field="{f}"]') for f in ("sent", "failed", "pruned", "ttl_expired")}
        assert fields == {"sent": "4", "failed": "0", "pruned": "1", "ttl_expired": "6"}, fields
        # The page refreshes itself from its JSON every second: the figure stays (the JSON names it).
        b.d.execute_script('document.querySelector(\'[data-field="ttl_expired"]\').textContent = ""')
        b.wait(lambda: b.text('[data-field="ttl_expired"]') == "6", 30, "the live refresh to show ttl_expired")
        assert b.find('[data-field="ttl_expired"]').is_displayed()

        b.phone()  # one more figure in each list: still nothing sticks out sideways on a phone
        for page, name, figure in (
            ("jobs", "phone-jobs", '[data-sum="ttl_expired"]'),
            (f"jobs/{job_id}", "phone-job", '[data-field="ttl_expired"]'),
        ):
            b.visit(f"/console/s/{service}/{page}", name)
            assert b.text(figure) == "6"
            assert b.horizontal_overflow() <= 0, page
