"""The stores are real and the data layer works on them.

Here, the rules that need no server; tests/integration/test_foundation.py has the rest."""

from __future__ import annotations

from pathlib import Path


def _comment_block_above(lines: list[str], i: int) -> list[str]:
    block = []
    j = i - 1
    while j >= 0 and lines[j].lstrip().startswith("--"):
        block.append(lines[j])
        j -= 1
    return block


def test_every_table_declares_retention_and_every_index_its_query():
    import re

    for path in sorted((Path(__file__).resolve().parents[2] / "schema").glob("*/*.*ql")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if re.match(r"\s*CREATE TABLE", line, re.I):
                assert any("retention:" in b for b in _comment_block_above(lines, i)), f"{path.name}:{i + 1}"
            if re.match(r"\s*(UNIQUE\s+)?(KEY|INDEX)\s|\s*CREATE\s+(UNIQUE\s+)?INDEX", line, re.I):
                assert any("serves:" in b for b in _comment_block_above(lines, i)), f"{path.name}:{i + 1}"


def test_settings_are_built_at_startup_not_import():
    import importlib

    import notee.core.settings as mod

    importlib.reload(mod)
    assert not any(isinstance(v, mod.Settings) for v in vars(mod).values())


def test_readme_documents_every_setting():
    from pathlib import Path

    from notee.core.settings import Settings

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    missing = [f"NOTEE_{name.upper()}" for name in Settings.model_fields if f"`NOTEE_{name.upper()}`" not in readme]
    assert not missing, f"README configuration table lacks {missing}"
