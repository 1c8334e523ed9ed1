"""Running the integration lane on several processes (pytest-xdist, ``make test``): each test owns its
tenant (tests/support/tenants.py), its scheduler namespace, its emulator (one per process) and the
processes it starts, so almost every test runs beside any other. The exceptions are here, in one
place, each with its reason (docs/TESTING.md):

- ``SERIAL``: tests that read or change what every tenant shares, or start a process that acts on
  every tenant. They get the ``serial`` marker: the parallel pass leaves them out (``-m "not
  serial"``) and a pass of their own, before it, runs them alone, one after another (``-m serial``).
- ``GROUPS``: tests that only get in each other's way. The scheduler below (xdist's
  ``pytest_xdist_make_scheduler`` hook) gives each group to one process, which runs its tests one
  after another while the other tests go on beside them. (xdist's own ``--dist loadgroup`` renames
  node ids, which this pytest no longer takes: the groups are kept here, by node id, instead.)
- ``SLOW_FIRST``: the parallel pass starts with the longest tests.

An entry names a module of tests/integration/ (``test_x.py``), a test (``test_x.py::test_y``, every
parameter) or one parametrization (``test_x.py::test_y[p]``). Registered as a plugin by
tests/conftest.py.
"""

from __future__ import annotations

from typing import Any

import pytest

LANE = "tests/integration/"

_SCHEDULER_PROCESS = (
    "a `notee scheduler` process runs every tenant's due buckets of the real current minutes and, at"
    " each tenth minute, a reconcile batch over every tenant (due buckets without subscribers, rows of"
    " deleted templates)"
)

SERIAL: dict[str, str] = {
    "test_fuzz_api.py::test_fuzz_every_operation": (
        "compares the row counts of the admin tables (every service's) around each case"
    ),
    "test_fuzz_api.py::test_fuzz_over_http": (
        "compares the row counts of the admin tables (every service's) around each case, as the in-process run"
    ),
    "test_metrics.py::test_the_job_queue_levels_follow_the_queue": "the job queue's depth counts every tenant's tasks",
    "test_deletion_races.py::test_scheduled_reconcile_batches_walk_the_index_and_clean_the_due_index": (
        "walks the whole subscription index from the one reconcile cursor, deleting every tenant's stale rows"
    ),
    "test_deletion_races.py::test_the_scheduler_runs_one_reconcile_batch_per_period_across_replicas": (
        "a reconcile batch from the one shared cursor, over every tenant"
    ),
    "test_healthcheck.py::test_scheduler_beats_after_every_minute_tick": _SCHEDULER_PROCESS,
    "test_metrics.py::test_scheduler_counts_done_late_and_skipped_minutes_and_logs_json_without_apscheduler_info": (
        _SCHEDULER_PROCESS + "; this one catches up twenty minutes"
    ),
    "test_metrics.py::test_every_metric_of_the_dashboard_is_exposed_by_a_running_process": _SCHEDULER_PROCESS,
    "test_delivery_truth.py::test_every_process_warns_at_start_when_the_emulator_reroutes_pushes[scheduler]": (
        _SCHEDULER_PROCESS
    ),
    "test_scheduler_replicas.py::test_scheduler_process_ticks_at_start_and_stops_on_sigterm": _SCHEDULER_PROCESS,
    # Not shared data but the machine: these count what one process admits at full speed (tokens
    # are taken ahead only when requests come faster than a statement per request), so they need
    # the cores to themselves.
    "test_rate_limits.py::test_a_busy_process_admits_most_requests_without_an_update": "needs the CPU to itself",
    "test_rate_limits.py::test_tokens_taken_ahead_never_admit_more_than_the_limit": "needs the CPU to itself",
}

GROUPS: dict[str, dict[str, str]] = {
    # A scheduler minute (Scheduler.run_minute / tick, in the test's process) makes jobs for every
    # tenant's buckets due then, and these tests mark buckets (and remove them at their end) or
    # count the jobs a minute made; the retention runs among them prune every namespace's old ticks.
    "scheduler": {
        "test_scheduler_minutes.py": "runs chosen minutes, counts their jobs, prunes old tick rows",
        "test_scheduler_time.py": "runs minutes around the database clock, prunes old tick rows",
        "test_scheduler_replicas.py": "runs simulated hours of minutes",
        "test_job_list.py": "its data set includes a job made by a scheduler minute",
        "test_insight.py": "marks due buckets without subscribers and removes them",
        "test_insight_api.py": "its data set holds buckets due minutes from now (removed at its end)",
        "test_cli_http.py::test_subscriber_counts_calendar_and_summary_from_the_cli": "removes its due buckets",
        "test_localized_templates.py::test_a_cycle_push_is_localized": "runs a scheduler minute",
        "test_quiet_hours.py::test_cycle_pushes_are_not_affected": "runs a scheduler minute",
        "test_webpush_paths.py::test_a_browser_subscribed_to_a_cycle_gets_its_minutes_push": "runs a scheduler minute",
        "test_render_one.py::test_cycle_delivers_every_savable_shape_rendered": "runs a scheduler minute",
        "test_sparse_targets.py": "runs a scheduler minute; prunes every tenant's occupancy as if a day had passed",
        "test_bench_smoke.py::test_cycle_minute_smoke": "marks a bucket due this minute and runs it",
        "test_bench_smoke.py::test_sparse_smoke": "marks buckets due and runs their minutes",
    },
    # A webhook dispatcher claims every tenant's due deliveries (it has no tenant filter).
    "webhooks": {
        "test_webhooks.py": "dispatchers that claim every tenant's deliveries and count their attempts",
        "test_security_isolation.py": "its data set puts an event in the outbox",
        "test_publish_targets.py::test_locale_variants_dead_letters_and_webhooks_for_a_user_list": (
            "its job's events go to the outbox, whose depth test_webhook_metrics.py compares before and after"
        ),
        "test_webpush_paths.py::test_webhooks_carry_a_browser_jobs_events_with_true_counts": (
            "its job's events go to the outbox, whose depth test_webhook_metrics.py compares before and after"
        ),
        "test_webhook_metrics.py": "a dispatcher that claims every tenant's deliveries; reads the outbox's levels",
        "test_engagement_webhooks.py": "dispatchers that claim every tenant's deliveries; counts how rows merge",
        "test_process_heartbeats.py::test_real_processes_beat_a_killed_one_turns_stale_and_a_stopped_one_is_gone": (
            "a `notee webhooks` process, which claims every tenant's due deliveries"
        ),
        "test_metrics.py::test_every_metric_of_the_dashboard_is_exposed_by_a_running_process": (
            "a `notee webhooks` process, which claims every tenant's due deliveries"
        ),
        "test_healthcheck.py::test_webhook_dispatcher_healthcheck_follows_its_event_loop": (
            "a `notee webhooks` process, stopped (SIGSTOP) while it may hold deliveries"
        ),
    },
    # `python -m build` of this checkout writes build/ and notee.egg-info/ in it: one build at a time.
    "wheel": {
        "test_packaging.py::test_wheel_carries_every_module_and_migration": "builds the wheel",
        "test_packaging.py::test_wheel_installs_from_the_lock_and_migrates_from_a_clean_virtualenv": "builds the wheel",
    },
}

# Started first by the parallel pass (the longest ones, measured; docs/TESTING.md), so that no long
# test starts last and keeps one process busy after the others are done. Order only: a stale entry
# costs nothing but a few seconds.
SLOW_FIRST = (
    "test_packaging.py::test_wheel_installs_from_the_lock_and_migrates_from_a_clean_virtualenv",
    "test_rotation_races.py::test_tokens_rotated_during_a_publish_get_it_at_most_once_and_never_after_a_read",
    "test_console_browser.py",
    "test_cli_http.py",
    "test_fanout_scale.py",
    "test_quickstart.py::test_the_readme_quickstart_runs_as_written",
    "test_healthcheck.py",
    "test_fanout_fairness.py",
    "test_scheduled_send.py::test_a_scheduled_publish_survives_restarts_and_is_sent_once_at_send_at",
    "test_bench_smoke.py",
)


def _matches(nodeid: str, entry: str) -> bool:
    if not nodeid.startswith(LANE):
        return False
    path, _, test = nodeid[len(LANE) :].partition("::")
    module, _, wanted = entry.partition("::")
    if path != module:
        return False
    if not wanted:
        return True
    return test == wanted if "[" in wanted else test.split("[", 1)[0] == wanted


def group_of(nodeid: str) -> str | None:
    return next((group for group, entries in GROUPS.items() if any(_matches(nodeid, e) for e in entries)), None)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(_matches(item.nodeid, entry) for entry in SERIAL):
            item.add_marker(pytest.mark.serial)
    if hasattr(config, "workerinput"):  # an xdist worker: every worker orders its collection alike

        def rank(item: pytest.Item) -> int:
            return next((i for i, entry in enumerate(SLOW_FIRST) if _matches(item.nodeid, entry)), len(SLOW_FIRST))

        items.sort(key=rank)  # stable: the rest keeps its order


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist load`` (xdist's default), with each of GROUPS kept on one process."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling  # deferred: xdist is there only when -n is given

    class GroupedLoad(LoadScopeScheduling):
        """Every test its own work unit, as ``load`` does, but a group's tests are one unit."""

        def _split_scope(self, nodeid: str) -> str:
            group = group_of(nodeid)
            return f"group:{group}" if group else nodeid

    return GroupedLoad(config, log)
