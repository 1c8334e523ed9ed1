"""The emulator's scratch directories in the temp directory (``notee-emu-*``: a local emulator's
state directory with its test CA and log, ``notee.emulator.control.local_emulator``; the granian
socket's directory, ``notee.emulator.server``). Each holds the pids that own it (``owners.pid``);
a process SIGKILLed never removes its own, so every new one first removes those whose owners are
all gone (``sweep``), as ~1,000 of them had piled up on a shared test machine.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "notee-emu-"
OWNERS = "owners.pid"
# A directory without an owners file was made by older code: stale once no running process names
# it on its command line (the emulator's --state-dir) and it is older than any start-up takes.
UNMARKED_AGE_S = 3600.0


def make_dir() -> Path:
    """A new scratch directory (0700) owned by this process, after removing the stale ones."""
    sweep()
    path = Path(tempfile.mkdtemp(prefix=PREFIX))
    own(path, os.getpid())
    return path


def own(path: Path, pid: int) -> None:
    """Add ``pid`` to the owners of ``path``: it is kept while any of them runs."""
    with open(path / OWNERS, "a", encoding="ascii") as f:
        f.write(f"{pid}\n")


def sweep(root: Path | None = None, *, now: float | None = None) -> int:
    """Remove this user's scratch directories under ``root`` (the temp directory) whose owners are
    all gone; returns how many were removed."""
    root = root or Path(tempfile.gettempdir())
    now = time.time() if now is None else now
    named: bytes | None = None  # every running process's command line, read once, when needed
    removed = 0
    for path in root.glob(PREFIX + "*"):
        try:
            if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
            owners = _owners(path)
            if not owners:  # none yet (being made: the file is written after the directory) or older code's
                if now - path.stat().st_mtime < UNMARKED_AGE_S:
                    continue
                named = _command_lines() if named is None else named
                if os.fsencode(path) in named:
                    continue
            elif any(_alive(pid) for pid in owners):
                continue
        except OSError:  # removed meanwhile (another process's sweep)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += not path.exists()
    if removed:
        log.info("emulator: removed %d stale scratch directories under %s", removed, root)
    return removed


def _owners(path: Path) -> list[int]:
    try:
        text = (path / OWNERS).read_text(encoding="ascii")
    except FileNotFoundError:
        return []
    return [int(line) for line in text.split() if line.isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _command_lines() -> bytes:
    """The command lines of every process this host shows in /proc, joined (empty elsewhere)."""
    parts = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parts.append((proc / "cmdline").read_bytes())
        except OSError:
            continue
    return b"\n".join(parts)
