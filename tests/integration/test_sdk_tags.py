"""The SDK's tags operations (get_tags, patch_tags, replace_tags, delete_tag; put_user's tags) and
add_device's app_version, sync and async, against a real `notee api` process."""

from __future__ import annotations

import asyncio

import notee_sdk
import pytest
from notee_sdk import AsyncClient, Client, models

from tests.support.registry import random_token


@pytest.fixture()
def tenant(api_process, settings, service_id):
    """A new service and a client holding its API key."""
    with Client(api_process.url, admin_token=settings.admin_token.get_secret_value(), max_retries=0) as admin:
        admin.create_service(service_id, f"SDK {service_id}")
        key = admin.create_api_key(service_id, label="sdk").api_key
    with Client(api_process.url, api_key=key) as c:
        yield c, key


def test_tags_through_the_sync_client(tenant):
    notee, _ = tenant
    user = notee.put_user("tagged-1", tags={"plan": "pro", "age": 31})
    got = notee.get_tags(user.user_id)
    assert isinstance(got, models.UserTags) and got.tags == {"age": 31, "plan": "pro"}
    patched = notee.patch_tags(
        "ext:tagged-1", {"age": None, "beta": True, "renews": {"timestamp": "2026-12-31T00:00:00Z"}}
    )
    assert patched.tags == {"beta": True, "plan": "pro", "renews": {"timestamp": "2026-12-31T00:00:00Z"}}
    assert notee.replace_tags(user.user_id, {"only": 1.5}).tags == {"only": 1.5}
    notee.delete_tag(user.user_id, "only")
    assert notee.get_tags(user.user_id).tags == {}
    with pytest.raises(notee_sdk.NotFound):
        notee.delete_tag(user.user_id, "only")
    with pytest.raises(notee_sdk.ValidationFailed) as bad:
        notee.patch_tags(user.user_id, {"bad key": 1})
    assert bad.value.details[0]["loc"] == ["body", "bad key"]
    device = notee.add_device(user.user_id, random_token("sdk"), "AOS", app_version="5.2.1")
    assert device.app_version == "5.2.1"
    assert notee.list_devices(user.user_id)[0].app_version == "5.2.1"


def test_tags_through_the_async_client(tenant, api_process):
    _, key = tenant

    async def scenario() -> tuple[models.UserTags, models.UserTags]:
        async with AsyncClient(api_process.url, api_key=key) as notee:
            user = await notee.put_user("tagged-2")
            await notee.patch_tags(user.user_id, {"a": "x", "b": False})
            replaced = await notee.replace_tags(user.user_id, {"c": 2})
            await notee.delete_tag(user.user_id, "c")
            return replaced, await notee.get_tags(user.user_id)

    replaced, after = asyncio.run(scenario())
    assert replaced.tags == {"c": 2} and after.tags == {}
