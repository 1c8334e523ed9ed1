"""Build hook: the migrations live at the top of the repository (``schema/mysql/``, ``schema/cql/``,
the project's agreed layout) and are copied into the package as ``notee/_schema/`` when a wheel is
built, so an installed Notee can migrate its stores (notee/usecases/migrate.py reads them with
importlib.resources). Everything else about the package is declared in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SCHEMA_STORES = {"mysql": "*.sql", "cql": "*.cql"}


class BuildWithSchema(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads schema/ from the checkout itself
            return
        source = Path(__file__).resolve().parent / "schema"
        target = Path(self.build_lib) / "notee" / "_schema"
        for store, pattern in SCHEMA_STORES.items():
            files = sorted((source / store).glob(pattern))
            if not files:
                raise RuntimeError(f"no {pattern} migrations in {source / store}: the wheel would not migrate")
            (target / store).mkdir(parents=True, exist_ok=True)
            for path in files:
                shutil.copy2(path, target / store / path.name)


setup(cmdclass={"build_py": BuildWithSchema})
