"""The workload's ledger file and the HTTP client that writes to it: every request's outcome (for the
timeline) and every acknowledgement (for the checker), one JSON line each, thread-safe."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

RETRYABLE = frozenset({429, 502, 503, 504})


class Recorder:
    """Appends ``{"kind": ..., "t": ..., **fields}`` lines to the ledger."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "t": round(time.time(), 4), **fields}, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file; a line cut short by a killed writer is skipped."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                continue


class Api:
    """Requests to the API processes in turn, retried like a service's backend would on 429/5xx and
    transport errors (with the same Idempotency-Key, when the caller gave one). ``None``: no answer."""

    def __init__(self, urls: list[str], rec: Recorder, headers: dict[str, str] | None = None) -> None:
        self.urls = urls
        self.rec = rec
        self.headers = headers or {}
        self._turn = itertools.count()
        self._http = httpx.Client(timeout=15)

    def with_headers(self, headers: dict[str, str]) -> Api:
        api = Api(self.urls, self.rec, headers)
        return api

    def call(self, method: str, path: str, *, op: str, tries: int = 6, **kw: Any) -> httpx.Response | None:
        headers = {**self.headers, **kw.pop("headers", {})}
        answer: httpx.Response | None = None
        for attempt in range(tries):
            base = self.urls[next(self._turn) % len(self.urls)]
            began = time.monotonic()  # each attempt's latency (ms) and API: the hostile phase's measure
            try:
                answer = self._http.request(method, base + path, headers=headers, **kw)
            except httpx.HTTPError as exc:
                ms = round((time.monotonic() - began) * 1000, 1)
                self.rec.write("req", op=op, status=0, error=type(exc).__name__, api=base, ms=ms)
                answer = None
            else:
                ms = round((time.monotonic() - began) * 1000, 1)
                self.rec.write("req", op=op, status=answer.status_code, api=base, ms=ms)
                if answer.status_code not in RETRYABLE:
                    return answer
            time.sleep(min(0.25 * 2**attempt, 4.0))
        return answer

    def close(self) -> None:
        self._http.close()
