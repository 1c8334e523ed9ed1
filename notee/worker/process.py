"""The ``notee worker`` process: metrics, heartbeat, signals, one ``Worker`` on one asyncio loop.

SIGTERM/SIGINT: stop claiming; each lane finishes (sends and checkpoints) its in-flight page, drops
what it read ahead (not checkpointed, so not lost), releases the lease and exits. Lanes still busy
after ``fanout_stop_grace_s`` are abandoned; their leases expire and another worker resumes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Sequence

from notee.core import heartbeat, metrics
from notee.core.logs import announce_emulator
from notee.core.settings import Settings
from notee.store.runtime import Runtime
from notee.usecases.heartbeats import ProcessHeartbeat, beat_until
from notee.usecases.queue_levels import watch_queue
from notee.usecases.sender import DeliverySender
from notee.worker.imports import import_lane
from notee.worker.lanes import Worker, WorkerOptions

log = logging.getLogger(__name__)


async def _heartbeat(worker: Worker, path: str | None) -> None:
    """Beat while the event loop turns (a blocked loop stops the beats; notee healthcheck worker)."""
    while not worker.stop.is_set():
        heartbeat.beat(path)
        await worker.sleep(heartbeat.WORKER_INTERVAL_S)


async def _main(runtime: Runtime, lanes: int, services: Sequence[str] | None) -> None:
    announce_emulator(runtime.settings, "worker")
    exporter = metrics.serve(runtime.settings.worker_metrics_port, runtime.settings.metrics_host, "worker")
    watch_queue(runtime)  # the job queue's levels on every scrape
    stop = asyncio.Event()
    sender = DeliverySender(runtime, stop)
    options = WorkerOptions(lanes=lanes, spare_lane=runtime.settings.fanout_spare_lane, services=services)
    worker = Worker(runtime, sender, options, stop=stop)
    grace = runtime.settings.fanout_stop_grace_s
    loop = asyncio.get_running_loop()
    running = asyncio.ensure_future(worker.run())

    def abandon() -> None:
        if not running.done():
            log.warning(
                "worker %s: lanes still busy %.0f s after the stop signal; abandoning them (their "
                "leases expire and another worker resumes from the last checkpoint)",
                worker.worker_id,
                grace,
            )
            running.cancel()

    def on_signal() -> None:
        if not stop.is_set():
            stop.set()
            loop.call_later(grace, abandon)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    beats = asyncio.create_task(_heartbeat(worker, runtime.settings.heartbeat_file))
    # every process's row in MySQL (the health page): this worker's, with its breaker per provider
    shared = ProcessHeartbeat(runtime, "worker", breakers=sender.breaker.states, ident=worker.worker_id)
    shared_beats = asyncio.create_task(beat_until(shared, worker.stop))
    freeze_startup_heap()
    # Bulk imports (docs/AUDIENCES.md "Import and export"): lanes of their own beside the fan-out lanes
    # (a chunk waits on MySQL and Cassandra most of its time: two overlap).
    imports = asyncio.gather(
        *(import_lane(runtime, stop, worker.worker_id, services) for _ in range(runtime.settings.import_lanes))
    )
    try:
        await running
    except asyncio.CancelledError:
        if not stop.is_set():
            raise
    finally:
        worker.stop.set()
        await beats
        await shared_beats
        await imports
        await sender.close()
        if exporter is not None:
            exporter.close()


def freeze_startup_heap() -> None:
    """Move every object alive now (modules, the runtime, its pools and prepared statements: they live
    as long as the process) out of the garbage collector's generations (``gc.freeze``). A full
    collection then walks only what was allocated since: an import chunk allocates tens of thousands
    of objects and set off collections that walked the whole heap, about half the Python time of a
    chunk (docs/BENCHMARKS.md, "import_users_per_s"). Objects frozen are still freed by reference
    counting; only a cycle among them would stay."""
    gc.freeze()


def run(settings: Settings, *, lanes: int = 2, services: Sequence[str] | None = None) -> None:
    """Entry point of ``notee worker``: runs until SIGTERM/SIGINT, then stops gracefully."""
    runtime = Runtime(settings)
    try:
        asyncio.run(_main(runtime, lanes, services))
    finally:
        runtime.close()
