"""The bulk import and export commands over HTTP (NOTEE_API_KEY): `notee import FILE` uploads an
NDJSON or CSV file (docs/AUDIENCES.md "Import and export") and, with ``--wait``, follows it with a
progress bar (one line per change when stderr is not a terminal); `notee export FILE` streams the
service's users, devices, tags and topic subscriptions into a file (``-`` for stdout).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer

from notee.cli.remote_client import AsJson, ExitCode, fail, print_json, say, sdk_client

_FORMAT_HELP = "ndjson or csv (default: from the file's name, .csv is csv)."


def _format(path: str, given: str | None) -> str:
    fmt = given or ("csv" if path.lower().endswith(".csv") else "ndjson")
    if fmt not in ("ndjson", "csv"):
        fail(f"--format must be ndjson or csv, not {fmt!r}", ExitCode.INVALID)
    return fmt


def import_file(
    file: str = typer.Argument(..., help="The NDJSON or CSV file to import."),
    format: str | None = typer.Option(None, "--format", help=_FORMAT_HELP),
    wait: bool = typer.Option(False, "--wait", help="Follow the import with a progress bar until it is done."),
    timeout: float | None = typer.Option(None, help="With --wait: give up waiting after this many seconds."),
    as_json: AsJson = False,
) -> None:
    """Import users, devices, tags and topic subscriptions; prints the import id (with --wait, then
    the failed lines, one JSON object each, and exits 1 when a line failed)."""
    fmt = _format(file, format)
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", ExitCode.INVALID)
    with sdk_client() as notee:
        created = notee.create_import(data, format=fmt)
        if not wait:
            say(created.import_id, created, as_json)
            return
        if not as_json:
            typer.echo(created.import_id)
        done = _follow(notee, created.import_id, timeout)
        failed = list(notee.iter_import_errors(created.import_id)) if done.lines_failed else []
    if as_json:
        print_json(done)
    for line in failed:
        print_json(line)
    if done.lines_failed:
        fail(f"import {done.import_id}: {done.lines_failed:,} of {done.lines_total:,} line(s) failed")


def _follow(notee: Any, import_id: str, timeout: float | None) -> Any:
    # deferred: the SDK is its own distribution, loaded only by these commands (remote_client.sdk_client).
    from notee_sdk import JobTimeout

    bar = ProgressBar()
    try:
        return notee.wait_import(import_id, on_progress=bar.update, poll_interval=0.5, timeout=timeout)
    except JobTimeout as exc:
        fail(str(exc))
    finally:
        bar.close()


class ProgressBar:
    """``[########------------]  41% 4,100/10,000 lines · failed 2 · 2,050/s`` on stderr: redrawn in
    place on a terminal, one plain line per change otherwise (logs, CI)."""

    WIDTH = 30

    def __init__(self, out: Any = None) -> None:
        self.out = out or sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.last = ""

    def line(self, found: Any) -> str:
        total = max(found.lines_total, 1)
        share = min(found.lines_done / total, 1.0)
        rate = found.lines_done / max(time.monotonic() - self.start, 1e-6)
        progress = f"{found.lines_done:,}/{found.lines_total:,} lines · failed {found.lines_failed:,} · {rate:,.0f}/s"
        if not self.tty:
            return f"{found.state}: {progress}"
        filled = round(share * self.WIDTH)
        return f"[{'#' * filled}{'-' * (self.WIDTH - filled)}] {share:4.0%} {progress}"

    def update(self, found: Any) -> None:
        line = self.line(found)
        if line == self.last:
            return
        self.last = line
        self.out.write("\r\x1b[2K" + line if self.tty else line + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.tty and self.last:
            self.out.write("\n")
            self.out.flush()


def export_file(
    file: str = typer.Argument(..., help="Where to write the export ('-': stdout)."),
    format: str | None = typer.Option(None, "--format", help=_FORMAT_HELP),
) -> None:
    """Export the service's users, devices, tags and topic subscriptions in the import's format."""
    fmt = _format(file, format)
    with sdk_client() as notee:
        if file == "-":
            written = notee.export_users_to(sys.stdout.buffer, format=fmt)
        else:
            with open(file, "wb") as out:
                written = notee.export_users_to(out, format=fmt)
    if file != "-":
        typer.echo(f"wrote {written:,} bytes to {file}")
