"""The tenants' webhook endpoint of a chaos run: a threaded HTTP server on 127.0.0.1 that answers
most events 200, some 500 and lets some hang past the dispatcher's timeout (seeded), and writes
every request it gets to the ledger (``webhook``: event id, a digest of the body, the job it names,
what it answered)."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from chaos.record import Recorder


def _handler(rec: Recorder, rng: random.Random, lock: threading.Lock, hang_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                roll = rng.random()
            status = 500 if roll < 0.15 else 200
            try:
                event = json.loads(body)
            except ValueError:
                event = {}
            data = event.get("data") if isinstance(event.get("data"), dict) else {}
            rec.write(
                "webhook", event_id=str(event.get("id")), type=event.get("type"), job_id=data.get("job_id"),
                sha=hashlib.sha256(body).hexdigest(), status=0 if roll > 0.95 else status,
            )  # fmt: skip
            if roll > 0.95:  # hangs: the dispatcher's timeout must fire and the event be retried
                time.sleep(hang_s)
                return
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    return Handler


@contextmanager
def receiver(rec: Recorder, seed: int, hang_s: float = 8.0) -> Iterator[str]:
    """Serve until the block ends; yields the endpoint's URL."""
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), _handler(rec, random.Random(f"{seed}:hooks"), threading.Lock(), hang_s)
    )
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/notee"
    finally:
        server.shutdown()
        server.server_close()
