"""The emulator's scratch directories (notee/emulator/scratch.py): a new one first removes those
whose owning processes are all gone (a SIGKILLed emulator or test never removes its own), and
keeps every other: one a live process owns, one being made, one of older code a running process
names or made within the hour, another user's, anything not a directory of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from notee.emulator import scratch


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has it (until the kernel hands it out again)


def _dir(root: Path, name: str, *owners: int, age_s: float = 0.0) -> Path:
    path = root / (scratch.PREFIX + name)
    path.mkdir()
    (path / "ca.crt").write_text("x")
    for pid in owners:
        scratch.own(path, pid)
    if age_s:
        old = path.stat().st_mtime - age_s
        os.utime(path, (old, old))
    return path


def test_a_sweep_removes_only_the_directories_whose_owners_are_all_gone(tmp_path: Path) -> None:
    gone = _gone_pid()
    dead = _dir(tmp_path, "dead", gone)
    dead_both = _dir(tmp_path, "dead-both", gone, _gone_pid())
    live = _dir(tmp_path, "live", gone, os.getpid())  # the emulator died, its test process runs on
    making = _dir(tmp_path, "making")  # no owner written yet
    old_unmarked = _dir(tmp_path, "old-unmarked", age_s=2 * scratch.UNMARKED_AGE_S)
    named = _dir(tmp_path, "named", age_s=2 * scratch.UNMARKED_AGE_S)
    other = tmp_path / "not-ours"
    other.mkdir()
    (tmp_path / (scratch.PREFIX + "a-file")).write_text("x")
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", str(named)], stdin=subprocess.PIPE)
    try:
        assert scratch.sweep(tmp_path) == 3
    finally:
        holder.communicate(b"")
    assert not dead.exists() and not dead_both.exists() and not old_unmarked.exists()
    assert live.exists() and making.exists() and named.exists() and other.exists()
    assert (tmp_path / (scratch.PREFIX + "a-file")).exists()
    # once the process naming it is gone, the unmarked old one goes too
    assert scratch.sweep(tmp_path) == 1 and not named.exists()


def test_a_new_scratch_directory_is_owned_by_its_maker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its sweep reads this temp directory only
    stale = _dir(tmp_path, "stale", _gone_pid())
    path = scratch.make_dir()
    assert path.parent == tmp_path and path.name.startswith(scratch.PREFIX) and (path.stat().st_mode & 0o777) == 0o700
    assert (path / scratch.OWNERS).read_text().split() == [str(os.getpid())]
    assert not stale.exists()
