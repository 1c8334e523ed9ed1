"""Python client for the Notee push-notification API (sync and async).

    from notee_sdk import Client

    with Client("http://127.0.0.1:8080", api_key="nk_...") as notee:
        user = notee.put_user("alice-1", name="Alice")
        notee.add_device(user.user_id, token="...", os="AOS")
        job = notee.publish_topic("news", "sports", variables={"team": "Reds"})
        print(notee.wait(job.job_id, on_progress=lambda j: print(j.sent, "sent")))
"""

from notee_sdk import models
from notee_sdk._ids import by_service_id
from notee_sdk._ops import Op
from notee_sdk.client import AsyncClient, Client, ProgressCallback
from notee_sdk.errors import (
    BadRequest,
    Conflict,
    JobTimeout,
    NoteeError,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    ValidationFailed,
)

__all__ = [
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "JobTimeout",
    "NotFound",
    "NoteeError",
    "Op",
    "ProgressCallback",
    "RateLimited",
    "ServerError",
    "Unauthorized",
    "Unavailable",
    "ValidationFailed",
    "by_service_id",
    "models",
]
