"""The health page's summary of the process heartbeats per kind (``heartbeats.by_kind``): pure."""

from __future__ import annotations

from datetime import datetime

from notee.usecases.heartbeats import ProcessView, by_kind

T = datetime(2026, 12, 5, 8, 0)


def _view(kind: str, age: float, stale: bool = False, breakers: dict[str, str] | None = None) -> ProcessView:
    return ProcessView(kind, f"h:{int(age * 10)}:abc", "0.1.0", T, T, age, stale, breakers)


def test_every_kind_is_listed_live_and_stale_apart_with_breakers_of_live_workers():
    views = [
        _view("worker", 1.0, breakers={"fcm": "closed", "apns": "open", "webpush": "closed"}),
        _view("worker", 2.0, breakers={"fcm": "half_open", "apns": "open", "webpush": "closed"}),
        _view("worker", 40.0, stale=True, breakers={"fcm": "open", "apns": "open", "webpush": "open"}),
        _view("api", 3.0),
    ]
    kinds = {k.kind: k for k in by_kind(views)}
    assert list(kinds) == ["api", "worker", "scheduler", "webhooks"]
    worker = kinds["worker"]
    assert (worker.live, worker.stale, worker.newest_age_s) == (2, 1, 1.0)
    # a stale worker's breakers are not counted: its states are as old as its last beat
    assert worker.breakers == {"fcm": {"closed": 1, "half_open": 1}, "apns": {"open": 2}, "webpush": {"closed": 2}}
    assert (kinds["api"].live, kinds["api"].breakers) == (1, {})
    assert (kinds["scheduler"].live, kinds["scheduler"].stale, kinds["scheduler"].newest_age_s) == (0, 0, None)
