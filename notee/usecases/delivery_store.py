"""A delivery's units of work on the stores (docs/ARCHITECTURE.md): the service's credentials read
in a short session of their own, one transaction per pruned token, one per batch of dead letters;
never a session held across a send. They block: a delivery runs them on a worker thread."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from notee.core import clock
from notee.core.logs import token_hint
from notee.core.vocabulary import ProviderCredentials
from notee.domain.credentials import credentials_box, load_credentials
from notee.domain.subscriptions import prune_token
from notee.store import deadletter
from notee.store.mysql import retried
from notee.store.runtime import Runtime

log = logging.getLogger(__name__)


def load_service_credentials(runtime: Runtime, service: str) -> ProviderCredentials | None:
    """The service's decrypted credentials (or None), read in a short session of their own."""
    with runtime.sessions() as session:
        return load_credentials(session, credentials_box(runtime.settings), service)


def prune_tokens(runtime: Runtime, service: str, invalid: dict[str, str]) -> None:
    """Remove the tokens a provider called invalid (token -> why), one transaction each."""
    for token, reason in invalid.items():

        def prune(session: Session, token: str = token, reason: str = reason) -> None:
            prune_token(session, runtime.statements, service, token, reason)

        try:  # Cassandra rows, then this commit of the MySQL rows; run again on a deadlock (deletes only)
            retried(runtime.sessions, prune, name="prune_token")
        except Exception:  # a store error must not lose the other prunes; the token comes back next send
            log.exception("service=%s: pruning token %s failed", service, token_hint(token))


def record_dead_letters(runtime: Runtime, letters: list[deadletter.DeadLetter]) -> None:
    """Record one delivery's dead letters, in one transaction: run again after a deadlock or lock wait
    timeout (not after a lost connection: the inserts may have landed; the page's outage path decides)."""
    now = clock.stored_now()
    retried(
        runtime.sessions,
        lambda session: deadletter.record(session, letters, now=now),
        name="dead_letters",
        idempotent=False,
    )
