"""The hourly prune of the engagement counters' old months (docs/ENGAGEMENT.md "Retention of the
counters"): counters take no TTL, so the months 13 to 15 before the current one are deleted, and
only where they hold something: a process lists (service, day) in engagement_month the first time it
adds a counter for that day, and the prune reads each month's listing instead of every service's
every day (it read ~92 partitions a service an hour and timed out on a store of thousands of
services: the CI of stop 44).

The months used here (1988-06, 1989-11 to 1990-02) are no other test's: the prune deletes every
listed service's partitions of 1989-11 to 1990-01."""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime

from notee.core import notification_id
from notee.usecases import receipts, retention

TTL_S = 86_400
NOW = datetime(1991, 2, 10, 3, 0, tzinfo=UTC)  # the months pruned: 1990-01, 1989-12, 1989-11


def _service() -> str:
    return f"TR{secrets.token_hex(5).upper()}"


def test_the_months_pruned_are_13_to_15_before_the_current_one():
    assert retention.engagement_months_to_prune(NOW) == ["1990-01", "1989-12", "1989-11"]
    assert retention.engagement_months_to_prune(datetime(2027, 1, 1, tzinfo=UTC)) == ["2025-12", "2025-11", "2025-10"]


def test_a_month_prune_deletes_the_listed_days_and_scopes_and_their_listing(runtime):
    st = runtime.statements
    job_service, send_service, kept = _service(), _service(), _service()
    job = notification_id.source_of_job(str(uuid.uuid4()))
    on_day = receipts.scope_keys("promo", None, datetime(1990, 1, 15, 12, tzinfo=UTC), "UTC")
    st.count(job_service, {(job, on_day, "opened"): 3})
    send = notification_id.new_single_source()
    on_other_day = receipts.scope_keys("otp", None, datetime(1989, 11, 20, 12, tzinfo=UTC), "UTC")
    st.add_source(send_service, send, on_other_day, (1, 1), TTL_S)
    a_kept_month = receipts.scope_keys("promo", None, datetime(1990, 2, 1, 12, tzinfo=UTC), "UTC")
    st.count(kept, {(job, a_kept_month, "opened"): 1})

    assert st.month_listing("1990-01", [job_service, send_service]) == [(job_service, "1990-01-15")]
    assert st.month_listing("1989-11", [job_service, send_service]) == [(send_service, "1989-11-20")]
    assert st.day_counts(job_service, ["1990-01-15"]) == {("1990-01-15", "promo", ""): {"opened": 3}}
    assert st.scope_counts(send_service, "sent", ["1989-11"]) != {}

    deleted = retention.prune_engagement_months(runtime, now=NOW)

    assert deleted >= (4 + 1) + 4  # the job's day bucket and its scopes; the send's scopes (its day had no receipt)
    assert st.day_counts(job_service, ["1990-01-15"]) == {}
    assert st.scope_counts(send_service, "sent", ["1989-11"]) == {}
    assert st.month_listing("1990-01", [job_service]) == [] and st.month_listing("1989-11", [send_service]) == []
    # a month that is kept, and its listing, stay
    assert st.day_counts(kept, ["1990-02-01"]) == {("1990-02-01", "promo", ""): {"opened": 1}}
    assert st.month_listing("1990-02", [kept]) == [(kept, "1990-02-01")]
    assert retention.prune_engagement_months(runtime, now=NOW) >= 0  # again: nothing of these left to delete
    assert st.day_counts(kept, ["1990-02-01"]) != {}


def test_a_scoped_forget_touches_no_other_service(runtime):
    st = runtime.statements
    mine, other = _service(), _service()
    job = notification_id.source_of_job(str(uuid.uuid4()))
    keys = receipts.scope_keys("news", None, datetime(1988, 6, 3, 12, tzinfo=UTC), "UTC")
    for service in (mine, other):
        st.count(service, {(job, keys, "delivered"): 2})
    assert st.forget_months(["1988-06"], [mine]) == 1 + 4  # its day's one bucket, and its four scope partitions
    assert st.day_counts(mine, ["1988-06-03"]) == {}
    assert st.day_counts(other, ["1988-06-03"]) == {("1988-06-03", "news", ""): {"delivered": 2}}
    assert st.month_listing("1988-06", [other]) == [(other, "1988-06-03")]
    st.forget_months(["1988-06"], [other])
