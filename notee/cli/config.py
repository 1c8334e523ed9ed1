"""What every `notee` command starts with: its Settings (command-line flags over NOTEE_* variables)
and logging set up from them."""

from __future__ import annotations

import typer
from pydantic import ValidationError

from notee.core import logs, tracing
from notee.core.settings import Settings


def load_settings(**overrides: object) -> Settings:
    """The process's settings (``overrides``: command-line flags over NOTEE_* variables); an invalid one
    stops it with one line per setting (never its value)."""
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        for error in exc.errors():
            name = "NOTEE_" + str(error["loc"][0]).upper() if error["loc"] else "settings"
            typer.echo(f"notee: invalid configuration: {name}: {error['msg']}", err=True)
        raise typer.Exit(2) from None
    logs.setup(settings.log_level, settings.log_format)
    try:
        tracing.setup(settings)
    except tracing.TracingUnavailable as exc:
        typer.echo(f"notee: invalid configuration: {exc}", err=True)
        raise typer.Exit(2) from None
    return settings
