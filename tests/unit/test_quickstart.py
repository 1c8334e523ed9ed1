"""README.md's quickstart, run as written, so it cannot rot: its bash block goes through `bash -e`
against a real `notee api`, a real worker and the emulator, with the variables `make run` writes to
.run/env. Also `workers/run.sh` (what `make run` runs once the stores are up): it starts the emulator
with the other processes, prints the next steps and writes .run/env (mode 600).

Here, the rules that need no server; tests/integration/test_quickstart.py has the rest."""

from __future__ import annotations

from tests.support.repo_files import quickstart_block


def test_the_quickstart_is_at_most_15_commands():
    commands = [line for line in quickstart_block().splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) <= 15, commands


def test_the_stand_in_route_exists_only_when_asked_for(settings):
    """A service without credentials reaches the emulator only with NOTEE_EMULATOR_STANDIN (make run);
    otherwise its devices count as no_credentials, as they would in production."""
    import asyncio

    from notee.providers.routing import ProviderSet

    async def routes(standin: bool) -> bool:
        providers = ProviderSet(
            settings.model_copy(update={"emulator_url": "https://127.0.0.1:1", "emulator_standin": standin})
        )
        try:
            return providers.for_service("NOCREDS", None).any
        finally:
            await providers.close()

    assert asyncio.run(routes(True)) is True
    assert asyncio.run(routes(False)) is False
