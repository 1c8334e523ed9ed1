"""Per-process resources: settings, the MySQL engine, the Cassandra session.

Every Notee process (api, worker, scheduler, CLI commands) builds one ``Runtime`` at start-up and
closes it at exit; nothing is a module global. Built lazily per store so a command that needs only
MySQL does not connect to Cassandra. ``runtime.sessions`` makes the callers' MySQL sessions and
``runtime.statements`` is the typed object domain functions receive for Cassandra.
"""

from __future__ import annotations

import threading
from functools import cached_property

from cassandra.cluster import Cluster
from cassandra.cluster import Session as CqlSession
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from notee.core.settings import Settings
from notee.store import cassandra, mysql
from notee.store.cql.statements import Statements


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._cluster: Cluster | None = None
        self._statements: Statements | None = None
        self._lock = threading.Lock()

    @cached_property
    def engine(self) -> Engine:
        return mysql.make_engine(self.settings)

    @cached_property
    def sessions(self) -> sessionmaker[Session]:
        return mysql.make_sessionmaker(self.engine)

    @cached_property
    def cql(self) -> CqlSession:
        self._cluster, session = cassandra.connect(self.settings)
        return session

    @cached_property
    def keyspaces(self) -> cassandra.Keyspaces:
        return cassandra.keyspaces(self.settings)

    @property
    def statements(self) -> Statements:
        """Every CQL statement, prepared on first use (once per process, whatever thread asks first)."""
        if self._statements is None:
            with self._lock:
                if self._statements is None:
                    statements = Statements(self.cql, self.keyspaces)
                    statements.journal_sessions = self.sessions  # failed writes' withdrawals kept in MySQL
                    self._statements = statements
        return self._statements

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None
        if "engine" in self.__dict__:
            self.engine.dispose()
