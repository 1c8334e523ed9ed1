"""notee/store/tags_sql.py and the domain around it on the real MariaDB: one multi-row statement
sets tags of many users (bulk import's), a value changes kind in place, everything is scoped by the
service, the foreign key refuses a user that does not exist, and the domain's own checks (for
callers other than the API) refuse what the API's models would."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from notee.core.errors import InvalidInput
from notee.domain import users
from notee.store import tags_sql
from notee.store.tags_sql import TagRow, TagValue
from tests.support.registry import make_service, make_user, random_token


def test_upsert_many_sets_tags_of_many_users_in_one_statement(runtime, store_tenant, service_id):
    a, b = make_user(runtime, store_tenant), make_user(runtime, store_tenant)
    other = make_service(runtime, service_id + "X")
    c = make_user(runtime, other)
    with runtime.sessions.begin() as s:
        tags_sql.upsert_many(
            s,
            store_tenant,
            [TagRow(b, "plan", "s", "pro"), TagRow(a, "age", "n", None, 31.0), TagRow(a, "plan", "s", "free")],
        )
        tags_sql.upsert_many(s, other, [TagRow(c, "plan", "s", "theirs")])
    with runtime.sessions.begin() as s:
        assert tags_sql.read(s, store_tenant, a) == {"age": TagValue("n", None, 31.0), "plan": TagValue("s", "free")}
        assert tags_sql.count(s, store_tenant, a) == 2 and tags_sql.count(s, store_tenant, b) == 1
        # a value changes, kind and all, in place; the other value column is cleared
        tags_sql.upsert_many(s, store_tenant, [TagRow(a, "plan", "b", None, 1.0)])
        assert tags_sql.read(s, store_tenant, a)["plan"] == TagValue("b", None, 1.0)
        # the service scopes every read and write: c's tags are not the tenant's, nor a's the other's
        assert tags_sql.read(s, store_tenant, c) == {} and tags_sql.read(s, other, a) == {}
        assert tags_sql.delete_keys(s, other, a, ["plan"]) == 0
        tags_sql.replace(s, other, a, {})
        assert tags_sql.count(s, store_tenant, a) == 2
        assert tags_sql.read(s, other, c) == {"plan": TagValue("s", "theirs")}


def test_replace_and_delete_keys(runtime, store_tenant):
    user = make_user(runtime, store_tenant)
    with runtime.sessions.begin() as s:
        tags_sql.upsert(s, store_tenant, user, {"a": TagValue("n", None, 1.0), "b": TagValue("s", "x")})
        tags_sql.replace(s, store_tenant, user, {"b": TagValue("s", "y"), "c": TagValue("t", None, 0.0)})
        assert sorted(tags_sql.keys(s, store_tenant, user)) == ["b", "c"]
        assert tags_sql.read(s, store_tenant, user)["b"] == TagValue("s", "y")
        assert tags_sql.delete_keys(s, store_tenant, user, ["b", "nope"]) == 1
        assert tags_sql.keys(s, store_tenant, user) == ["c"]


def test_a_tag_of_a_user_that_does_not_exist_is_refused(runtime, store_tenant):
    with pytest.raises(IntegrityError), runtime.sessions.begin() as s:
        tags_sql.upsert_many(s, store_tenant, [TagRow("3f2504e0-4f89-11d3-9a0c-0305e82c3301", "a", "s", "x")])


def test_the_domain_checks_app_version_for_every_caller(runtime, store_tenant):
    user = make_user(runtime, store_tenant)
    with runtime.sessions() as s, pytest.raises(InvalidInput) as exc:
        users.add_device(s, store_tenant, user, token=random_token("av"), os="AOS", app_version="5.2 beta")
    assert exc.value.details[0]["loc"] == ["app_version"]
