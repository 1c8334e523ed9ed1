"""No silent success (issue 13, items 4 and 6), against MariaDB, Cassandra and the emulator:

- the log provider only for a service an admin put in ``dry_run`` delivery mode, whose sends and
  jobs say ``dry_run: true``;
- a device of a platform the service has no credentials for is a counted failure ``no_credentials``
  (not sent, not pruned); a send or job where no device can be sent fails once with a clear error;
- a provider configuration error fails the whole job once, keeping the dead letters and pruned
  tokens collected before it;
- the emulator rerouting every push is announced by every process and shown by ``/healthz``.
Here, the rules that need no server; tests/integration/test_delivery_truth.py has the rest.
"""

from __future__ import annotations

import logging


def test_no_warning_without_the_emulator(tmp_path, caplog):
    from notee.core.logs import announce_emulator
    from notee.core.settings import Settings

    caplog.set_level(logging.INFO)
    announce_emulator(Settings(emulator_url=None), "worker")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    announce_emulator(Settings(emulator_url="https://x:1"), "worker")
    assert [r for r in caplog.records if r.levelno == logging.WARNING and "https://x:1" in r.getMessage()]
