"""The sync and async clients. Both run the operations of ``_ops`` through one retry policy:

- 429 is retried whatever the method (the server refused before doing any work);
- 502, 503 and 504, a connection that could not be opened, one dropped before the answer came
  (reset, closed) and a read timeout are retried only for repeatable operations (``Op.repeatable``:
  GET, PUT, DELETE, upserts, and publishes and scheduled sends, which always carry an
  Idempotency-Key), so a retry never does the work twice;
- the wait is what ``Retry-After`` says (seconds or an HTTP date), else exponential backoff with
  jitter; never more than ``max_retry_wait``; after ``max_retries`` the error is raised
  (``RateLimited``, ``Unavailable``, ``ServerError`` or httpx's own transport error).
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, BinaryIO, Protocol, TypeVar

import httpx

from notee_sdk import _ops
from notee_sdk import models as m
from notee_sdk._methods import AsyncMethods, SyncMethods
from notee_sdk._ops import Op
from notee_sdk.errors import JobTimeout, NoteeError, error_for

T = TypeVar("T")
ProgressCallback = Callable[[m.Job], None]
Item = TypeVar("Item", covariant=True)


class _Page(Protocol[Item]):
    """One page of a listing: every list of the API pages the same way (``cursor`` in, ``next_cursor`` out)."""

    @property
    def items(self) -> Sequence[Item]: ...

    @property
    def next_cursor(self) -> str | None: ...


PageAt = Callable[[str | None], Op[_Page[Item]]]  # the listing's operation for one cursor

USER_AGENT = "notee-sdk-python/0.1.0"

#: Answers retried: 429 for every operation, the others for repeatable ones only.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Transport failures retried for repeatable operations: the connection could not be opened, was
#: dropped before the whole answer came, or the answer did not come in time.
RETRY_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError,
    httpx.ReadTimeout,
)


class _Policy:
    """What both clients share: credentials, the request for an operation, the retry decision."""

    def __init__(self, base_url: str | None, api_key: str | None, admin_token: str | None,
                 max_retries: int, max_retry_wait: float, backoff: float) -> None:
        base_url = base_url or os.environ.get("NOTEE_URL")
        if not base_url:
            raise ValueError("base_url is required (or set NOTEE_URL)")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("NOTEE_API_KEY")
        self.admin_token = admin_token if admin_token is not None else os.environ.get("NOTEE_ADMIN_TOKEN")
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.backoff = backoff

    def request(self, client: httpx.Client | httpx.AsyncClient, op: Op[Any]) -> httpx.Request:
        # The admin API takes the admin token; everything else the service's API key.
        token = self.admin_token if op.path.startswith("/v1/admin/") else self.api_key
        headers = {"User-Agent": USER_AGENT, **op.headers}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return client.build_request(op.method, self.base_url + op.path, json=op.json, params=op.params,
                                    headers=headers, content=op.content)

    def result(self, op: Op[T], response: httpx.Response) -> T:
        if response.status_code >= 400:
            raise error_for(response.status_code, _json_or_none(response), _retry_after(response))
        if op.raw:
            return op.parse(response.content)
        return op.parse(_json_or_none(response) if response.content else None)

    def delay(self, op: Op[Any], attempt: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or None to give up now."""
        if attempt >= self.max_retries:
            return None
        if response is not None:
            status = response.status_code
            if status not in RETRY_STATUSES or (status != 429 and not op.repeatable):
                return None
            after = _retry_after(response)
            if after is not None:
                return min(after, self.max_retry_wait)
        elif not op.repeatable:
            return None
        # Exponential backoff with full jitter when the server gave no Retry-After.
        return float(min(self.max_retry_wait, self.backoff * 2**attempt * random.uniform(0.5, 1.0)))


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds from now: delay-seconds or an HTTP date (RFC 9110 10.2.3); None
    when absent or unreadable (the backoff applies)."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, as HTTP dates are
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


class Client(SyncMethods):
    """Synchronous client. ``Client("https://notee.example", api_key="nk_...")``; with no arguments
    it reads ``NOTEE_URL``, ``NOTEE_API_KEY`` and ``NOTEE_ADMIN_TOKEN``. Use it as a context manager
    or call ``close()``."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None, admin_token: str | None = None,
                 timeout: float = 30.0, max_retries: int = 3, max_retry_wait: float = 60.0, backoff: float = 0.5,
                 verify: Any = True, http_client: httpx.Client | None = None) -> None:
        self._policy = _Policy(base_url, api_key, admin_token, max_retries, max_retry_wait, backoff)
        self._http = http_client or httpx.Client(timeout=timeout, verify=verify)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def call(self, op: Op[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.send(self._policy.request(self._http, op))
            except RETRY_ERRORS:
                wait = self._policy.delay(op, attempt, None)
                if wait is None:
                    raise
            else:
                wait = self._policy.delay(op, attempt, response)
                if wait is None:
                    return self._policy.result(op, response)
            time.sleep(wait)
            attempt += 1

    def wait(self, job_id: str, *, on_progress: ProgressCallback | None = None, poll_interval: float = 1.0,
             timeout: float | None = None) -> m.Job:
        """Poll a job until its counts are final; ``on_progress(job)`` is called after every poll.
        Raises ``JobTimeout`` after ``timeout`` seconds (the job goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if on_progress is not None:
                on_progress(job)
            if job.finished:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(f"job {job_id} still {job.state} after {timeout} s")
            time.sleep(poll_interval)

    def _walk(self, page_at: PageAt[Item]) -> Iterator[Item]:
        """Every item of a listing, following ``next_cursor`` a page at a time."""
        cursor: str | None = None
        while True:
            page = self.call(page_at(cursor))
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def iter_jobs(self, *, state: str | None = None, method: str | None = None, type: str | None = None,
                  page_size: int = 50) -> Iterator[m.Job]:
        """Every job of the service matching the filters, newest first, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_jobs(state=state, method=method, type=type, cursor=cursor,
                                                        limit=page_size))

    def iter_users(self, *, created_since: datetime | None = None, has_devices: bool | None = None,
                   platform: str | None = None, page_size: int = 50) -> Iterator[m.User]:
        """Every user of the service matching the filters, newest first, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_users(created_since=created_since, has_devices=has_devices,
                                                         platform=platform, cursor=cursor, limit=page_size))

    def iter_dead_letters(self, *, job_id: str | None = None, page_size: int = 100) -> Iterator[m.DeadLetter]:
        """Every dead letter of the service, newest first, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_dead_letters(limit=page_size, cursor=cursor, job_id=job_id))

    def iter_webhook_deliveries(self, endpoint_id: str, *, state: str | None = None,
                                page_size: int = 50) -> Iterator[m.WebhookDelivery]:
        """Every recent delivery of a webhook endpoint, newest first, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_webhook_deliveries(endpoint_id, state=state, cursor=cursor,
                                                                      limit=page_size))

    def iter_topics(self, *, type: str | None = None, page_size: int = 100) -> Iterator[m.TopicCount]:
        """Every topic of the service with its subscriber count, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_topics(type=type, cursor=cursor, limit=page_size))

    def iter_segments(self, *, counts: bool = False, page_size: int = 50) -> Iterator[m.Segment]:
        """Every segment of the service in name order, fetched a page at a time (``counts``: page_size <= 20)."""
        return self._walk(lambda cursor: _ops.list_segments(counts=counts, cursor=cursor, limit=page_size))
    def iter_import_errors(self, import_id: str, *, page_size: int = 100) -> Iterator[m.LineError]:
        """Every failed line of an import, in line order, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_import_errors(import_id, cursor=cursor, limit=page_size))

    def wait_import(self, import_id: str, *, on_progress: Callable[[m.Import], None] | None = None,
                    poll_interval: float = 1.0, timeout: float | None = None) -> m.Import:
        """Poll an import until it is done; ``on_progress(import_)`` after every poll. Raises
        ``JobTimeout`` after ``timeout`` seconds (the import goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self.get_import(import_id)
            if on_progress is not None:
                on_progress(found)
            if found.finished:
                return found
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(f"import {import_id} still {found.state} after {timeout} s")
            time.sleep(poll_interval)

    def export_users_to(self, out: BinaryIO, *, format: str = "ndjson") -> int:
        """Stream the service's export (``export_users``) into ``out`` as it arrives, never whole in
        memory; returns the bytes written. Not retried: a broken download starts again."""
        op = _ops.export_users(format=format)
        response = self._http.send(self._policy.request(self._http, op), stream=True)
        try:
            if response.status_code >= 400:
                response.read()
                self._policy.result(op, response)  # raises the typed error
            written = 0
            for chunk in response.iter_bytes():
                out.write(chunk)
                written += len(chunk)
            return written
        finally:
            response.close()


class AsyncClient(AsyncMethods):
    """Asynchronous client with the same methods as ``Client``, each a coroutine."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None, admin_token: str | None = None,
                 timeout: float = 30.0, max_retries: int = 3, max_retry_wait: float = 60.0, backoff: float = 0.5,
                 verify: Any = True, http_client: httpx.AsyncClient | None = None) -> None:
        self._policy = _Policy(base_url, api_key, admin_token, max_retries, max_retry_wait, backoff)
        self._http = http_client or httpx.AsyncClient(timeout=timeout, verify=verify)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, op: Op[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.send(self._policy.request(self._http, op))
            except RETRY_ERRORS:
                wait = self._policy.delay(op, attempt, None)
                if wait is None:
                    raise
            else:
                wait = self._policy.delay(op, attempt, response)
                if wait is None:
                    return self._policy.result(op, response)
            await asyncio.sleep(wait)
            attempt += 1

    async def wait(self, job_id: str, *, on_progress: ProgressCallback | None = None, poll_interval: float = 1.0,
                   timeout: float | None = None) -> m.Job:
        """Poll a job until its counts are final; see ``Client.wait``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = await self.get_job(job_id)
            if on_progress is not None:
                on_progress(job)
            if job.finished:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(f"job {job_id} still {job.state} after {timeout} s")
            await asyncio.sleep(poll_interval)

    async def _walk(self, page_at: PageAt[Item]) -> AsyncIterator[Item]:
        """Every item of a listing, following ``next_cursor`` a page at a time."""
        cursor: str | None = None
        while True:
            page = await self.call(page_at(cursor))
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def iter_jobs(self, *, state: str | None = None, method: str | None = None, type: str | None = None,
                  page_size: int = 50) -> AsyncIterator[m.Job]:
        """Every job of the service matching the filters, newest first, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_jobs(state=state, method=method, type=type, cursor=cursor,
                                                        limit=page_size))

    def iter_users(self, *, created_since: datetime | None = None, has_devices: bool | None = None,
                   platform: str | None = None, page_size: int = 50) -> AsyncIterator[m.User]:
        """Every user of the service matching the filters, newest first, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_users(created_since=created_since, has_devices=has_devices,
                                                         platform=platform, cursor=cursor, limit=page_size))

    def iter_dead_letters(self, *, job_id: str | None = None, page_size: int = 100) -> AsyncIterator[m.DeadLetter]:
        """Every dead letter of the service, newest first, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_dead_letters(limit=page_size, cursor=cursor, job_id=job_id))

    def iter_webhook_deliveries(self, endpoint_id: str, *, state: str | None = None,
                                page_size: int = 50) -> AsyncIterator[m.WebhookDelivery]:
        """Every recent delivery of a webhook endpoint, newest first, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_webhook_deliveries(endpoint_id, state=state, cursor=cursor,
                                                                      limit=page_size))

    def iter_topics(self, *, type: str | None = None, page_size: int = 100) -> AsyncIterator[m.TopicCount]:
        """Every topic of the service with its subscriber count, fetched a page at a time."""
        return self._walk(lambda cursor: _ops.list_topics(type=type, cursor=cursor, limit=page_size))

    def iter_segments(self, *, counts: bool = False, page_size: int = 50) -> AsyncIterator[m.Segment]:
        """Every segment of the service in name order, fetched a page at a time (``counts``: page_size <= 20)."""
        return self._walk(lambda cursor: _ops.list_segments(counts=counts, cursor=cursor, limit=page_size))


__all__ = ["AsyncClient", "Client", "NoteeError", "ProgressCallback"]
