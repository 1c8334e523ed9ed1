"""``notee.store.mysql.retried``: which MySQL errors run a transaction again, how often, after which pauses."""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any

import pymysql
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from notee.store.mysql import Retry, retried, transient_kind


def _error(code: int) -> OperationalError:
    return OperationalError("UPDATE fanout_task", {}, pymysql.err.OperationalError(code, "x"))


class _Failing:
    """A sessionmaker whose first ``fail`` transactions raise ``error`` as they end."""

    def __init__(self, error: Exception, fail: int) -> None:
        self.error, self.fail, self.runs = error, fail, 0

    def __call__(self) -> Any:
        return self.begin()

    @contextmanager
    def begin(self) -> Any:
        self.runs += 1
        yield None
        if self.runs <= self.fail:
            raise self.error


@pytest.mark.parametrize(
    ("code", "kind"),
    [(1213, "deadlock"), (1205, "lock_wait_timeout"), (2006, "lost_connection"), (2013, "lost_connection")],
)
def test_transient_errors_are_named_and_others_are_not(code, kind):
    assert transient_kind(_error(code)) == kind
    assert transient_kind(pymysql.err.OperationalError(code, "x")) == kind
    assert transient_kind(_error(1062)) is None and transient_kind(_error(2003)) is None
    assert transient_kind(ValueError("1213")) is None


def test_a_deadlock_runs_the_transaction_again_after_jittered_pauses_up_to_the_bound():
    pauses: list[float] = []
    policy = Retry(attempts=5, base_s=0.05, cap_s=0.15, sleep=pauses.append, rng=random.Random(7))
    sessions = _Failing(_error(1213), fail=4)
    assert retried(sessions, lambda _s: "done", name="unit", retry=policy) == "done"  # type: ignore[arg-type]
    assert sessions.runs == 5 and len(pauses) == 4
    for n, pause in enumerate(pauses):
        assert 0 <= pause <= min(0.15, 0.05 * 2**n)
    assert len(set(pauses)) == 4  # jittered, not in step


def test_past_the_bound_and_for_other_errors_the_error_goes_to_the_caller():
    policy = Retry(attempts=3, sleep=lambda _s: None)
    sessions = _Failing(_error(1205), fail=3)
    with pytest.raises(OperationalError):
        retried(sessions, lambda _s: None, name="unit", retry=policy)  # type: ignore[arg-type]
    assert sessions.runs == 3
    duplicate = _Failing(IntegrityError("INSERT", {}, pymysql.err.IntegrityError(1062, "dup")), fail=1)
    with pytest.raises(IntegrityError):
        retried(duplicate, lambda _s: None, name="unit", retry=policy)  # type: ignore[arg-type]
    assert duplicate.runs == 1


def test_a_lost_connection_asks_whether_the_commit_landed_before_running_again():
    sessions = _Failing(_error(2013), fail=1)
    runs: list[int] = []
    answer = retried(
        sessions,  # type: ignore[arg-type]
        lambda _s: runs.append(1) or "ran",
        name="unit",
        applied=lambda _s: "landed",
        retry=Retry(sleep=lambda _s: None),
    )
    assert answer == "landed" and runs == [1]
    again = _Failing(_error(2013), fail=1)
    assert (
        retried(again, lambda _s: "ran", name="unit", applied=lambda _s: None, retry=Retry(sleep=lambda _s: None))  # type: ignore[arg-type]
        == "ran"
    )
    assert again.runs == 3  # the first run, the check, the second run


def test_a_plain_insert_is_not_run_again_after_a_lost_connection_but_is_after_a_deadlock():
    """Dead letters: a lost commit answer may hide rows that landed; running the inserts again would
    record each letter twice (and a replay would push it twice)."""
    lost = _Failing(_error(2013), fail=1)
    with pytest.raises(OperationalError):
        retried(lost, lambda _s: None, name="unit", idempotent=False, retry=Retry(sleep=lambda _s: None))  # type: ignore[arg-type]
    assert lost.runs == 1
    deadlocked = _Failing(_error(1213), fail=1)
    retried(deadlocked, lambda _s: None, name="unit", idempotent=False, retry=Retry(sleep=lambda _s: None))  # type: ignore[arg-type]
    assert deadlocked.runs == 2
