"""A cycle unsubscribe racing the deletion of its user or a re-subscribe of the same type
(docs/RELIABILITY.md "Deletion wins every race"), made deterministic: the other request is started at
the exact point inside the unsubscribe (or the subscribe) where an unlocked remover let it through;
it either finishes there (no lock kept it out) or times out waiting for the user's row lock and runs
again after the first one committed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from notee.core.vocabulary import CycleTarget, Recipient
from notee.domain import cycle_subscriptions, users
from notee.domain import subscriptions as subs
from notee.domain.cycle_subscriptions import ScheduleRequest
from notee.store.cql.counters import max_slot
from notee.store.cql.recipients import stream_recipients
from tests.support.registry import make_device, make_template, make_user

MON = ScheduleRequest(["MON"], 9, 0, "UTC")
TUE = ScheduleRequest(["TUE"], 9, 0, "UTC")


class _Hooked:
    """The process's Statements, with ``hook`` run once: before the first call of ``method``, or
    right after it returned (``after``)."""

    def __init__(self, st: Any, method: str, hook: Callable[[], None], *, after: bool = False) -> None:
        self._st, self._method, self._hook, self._after = st, method, hook, after

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._st, name)
        if name != self._method or self._hook is None:
            return real

        def hooked(*args: Any, **kwargs: Any) -> Any:
            hook, self._hook = self._hook, None
            if not self._after:
                hook()
            result = real(*args, **kwargs)
            if self._after:
                hook()
            return result

        return hooked


class _Rival:
    """Another request in a thread of its own, in its own transaction, on its own connection. Its first
    try waits at most 1 s for a row lock (``innodb_lock_wait_timeout``): a try that timed out was blocked
    by the caller's lock, and ``join`` runs it again, as its client would, once the caller committed."""

    def __init__(self, runtime: Any, work: Callable[[Any], Any]) -> None:
        self.runtime, self.work = runtime, work
        self.blocked = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._first_try, daemon=True)

    def _try(self, lock_wait_s: int | None) -> None:
        with self.runtime.sessions() as session:
            try:
                if lock_wait_s is not None:  # a session variable: no read, so no snapshot taken yet
                    session.execute(text(f"SET SESSION innodb_lock_wait_timeout = {int(lock_wait_s)}"))
                self.work(session)
                session.commit()
            finally:
                session.rollback()
                if lock_wait_s is not None:  # the pooled connection goes back as it came
                    session.execute(text("SET SESSION innodb_lock_wait_timeout = DEFAULT"))
                    session.commit()

    def _first_try(self) -> None:
        try:
            self._try(1)
        except OperationalError as exc:
            if exc.orig is None or exc.orig.args[0] != 1205:
                self.error = exc
            self.blocked = True
        except BaseException as exc:  # reported by join()
            self.error = exc

    def start_and_let_it_run_or_block(self) -> None:
        """Start it; come back when it finished, or gave up waiting for a row lock the caller holds."""
        self.thread.start()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the rival request neither finished nor timed out on a lock"

    def join(self) -> None:
        if self.error is not None:
            raise self.error
        if self.blocked:
            self._try(None)


def _cycle_rows(st, service, key, target):
    out = []
    for slot in range(max_slot(st, service, "CYCLE", "remind") + 1):
        for page, _ in stream_recipients(st, key, target, slot, 500):
            out += map(Recipient._make, page)
    return out


def test_a_cycle_unsubscribe_racing_the_users_deletion_takes_the_user_off_the_count_once(runtime, st, store_tenant):
    svc = store_tenant
    key = make_template(runtime, svc, "CYCLE", "remind")
    u = make_user(runtime, svc)
    make_device(runtime, svc, u, f"tok-{u}")
    with runtime.sessions.begin() as s:
        cycle_subscriptions.subscribe_cycle(s, st, svc, u, "remind", MON)
    assert st.counters(svc, "CYCLE", "remind")[1] == 1

    deletion = _Rival(runtime, lambda s: users.delete_user(s, st, svc, u))
    # The deletion arrives once the unsubscribe has read the user's rows of the type, before it removes them.
    hooked = _Hooked(st, "user_type_rows", deletion.start_and_let_it_run_or_block, after=True)
    with runtime.sessions.begin() as s:
        removed = cycle_subscriptions.unsubscribe_cycle(s, hooked, svc, u, "remind")
    deletion.join()

    assert removed is True
    assert st.user_rows(u, svc) == []
    assert _cycle_rows(st, svc, key, CycleTarget("UTC", "MON", 9, 0)) == []
    # Without the user's lock both took the user off the count: -1 for a type nobody is subscribed to.
    assert st.counters(svc, "CYCLE", "remind")[1] == 0


def test_a_cycle_unsubscribe_racing_a_resubscribe_leaves_no_subscription_without_its_device_rows(
    runtime, st, store_tenant
):
    svc = store_tenant
    key = make_template(runtime, svc, "CYCLE", "remind")
    u = make_user(runtime, svc)
    tok = f"tok-{u}"
    make_device(runtime, svc, u, tok)
    with runtime.sessions.begin() as s:
        cycle_subscriptions.subscribe_cycle(s, st, svc, u, "remind", MON)

    def unsubscribe(session: Any) -> None:
        cycle_subscriptions.unsubscribe_cycle(session, st, svc, u, "remind")

    rival = _Rival(runtime, unsubscribe)
    # The unsubscribe arrives once the re-subscribe wrote its device rows, before its user-level row.
    hooked = _Hooked(st, "write_user_level", rival.start_and_let_it_run_or_block)
    with runtime.sessions.begin() as s:
        cycle_subscriptions.subscribe_cycle(s, hooked, svc, u, "remind", TUE)
    rival.join()

    with runtime.sessions() as s:
        listed = [x["schedule"]["canonical"] for x in subs.list_subscriptions(s, st, svc, u)]
    device_rows = {r.target for r in st.user_rows(u, svc) if r.device_token == tok}
    sent_to = {
        day: [r.device_token for r in _cycle_rows(st, svc, key, CycleTarget("UTC", day, 9, 0))]
        for day in ("MON", "TUE")
    }
    # Either the unsubscribe came last (nothing left) or the subscribe did (TUE on the device); without the
    # lock the unsubscribe removed the new device rows and the user-level row came after it: listed as
    # subscribed, counted, and never sent.
    assert set(listed) == device_rows, (listed, device_rows, sent_to)
    assert sent_to["MON"] == []
    assert sent_to["TUE"] == ([tok] if listed else [])
    assert st.counters(svc, "CYCLE", "remind")[1] == len(listed)
