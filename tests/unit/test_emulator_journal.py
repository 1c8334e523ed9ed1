"""The emulator's delivery journal (NOTEE_EMULATOR_JOURNAL): one JSON line per delivered push, the
record the chaos run's ledger checks against; a reset of the emulator keeps appending to it."""

from __future__ import annotations

import json
from pathlib import Path

from notee.emulator.state import State


def test_each_recorded_push_is_one_line_and_a_reset_keeps_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    state = State(journal=open(path, "a", buffering=1, encoding="utf-8"))  # noqa: SIM115 - the state owns it
    state.record("fcm", "t1", {"chaos": "m1"})
    journal = state.journal
    state.reset()
    assert state.journal is journal
    state.record("apns", "t2", None)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["api"], x["token"], x["data"]) for x in lines] == [("fcm", "t1", {"chaos": "m1"}), ("apns", "t2", None)]
    assert all(isinstance(x["t"], float) for x in lines)


def test_without_a_journal_nothing_is_written() -> None:
    state = State()
    assert state.journal is None
    state.record("fcm", "t1", {})  # a no-op, not an error
