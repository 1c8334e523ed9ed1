"""The emulator as pytest fixtures, for any test that sends pushes.

Use it from a test module (or conftest) with::

    from tests.emulator_fixture import emulator, emulator_process  # noqa: F401

``emulator_process`` (session) starts ``notee emulator`` on a free port with a fresh test CA, exports
SSL_CERT_FILE / REQUESTS_CA_BUNDLE / NO_PROXY / NOTEE_EMULATOR_URL / NOTEE_EMULATOR_CA_FILE (before
any client is built) and stops the process by its pid. ``emulator`` (per test) resets its state
and hands back an :class:`Emulator` with the control API.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from notee.emulator.control import EmulatorControl as Emulator
from notee.emulator.control import local_emulator


@pytest.fixture(scope="session")
def emulator_process() -> Iterator[Emulator]:
    """A realistic emulator (``notee emulator --realistic``): OAuth access tokens, quotas, per-device
    rates, APNs stream limits and GOAWAY. A test that needs otherwise switches a behaviour off
    through ``emulator.realistic(...)``; ``reset()`` restores the realistic defaults."""
    with local_emulator(realistic=True) as emu:
        saved = {k: os.environ.get(k) for k in emu.env()}
        os.environ.update(emu.env())
        yield emu
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture()
def emulator(emulator_process: Emulator) -> Emulator:
    emulator_process.reset()
    return emulator_process
