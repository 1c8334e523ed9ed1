"""Logged batches of subscription rows: how big one may grow, and binding rows into one for a
fraction of the driver's CPU (``RowBinder``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cassandra.query import BatchStatement, BatchType, PreparedStatement

from notee.store.cql.rows import Row

ROWS_PER_DEVICE = 4  # topic_subscription_rows: slot row, target_slots row, index row, token index row
# Cassandra warns about logged batches over 5 KiB (batch_size_warn_threshold) and refuses them over
# 50 KiB: units share a batch up to the first, a unit over MAX_UNIT_BYTES is split.
BATCH_BYTES = 4096
MAX_UNIT_BYTES = 40_960


def row_bytes(row: Row) -> int:
    """About what a row weighs in a batch: its values as text, plus the per-row overhead. A plain
    loop: a generator per row cost ~5 % of a bulk subscribe's CPU."""
    size = 32
    for v in row[1]:
        size += len(v) if isinstance(v, str) else 8
    return size


def logged_batch() -> BatchStatement:
    batch = BatchStatement(batch_type=BatchType.LOGGED)
    batch.is_idempotent = True  # inserts/deletes of fixed rows only
    return batch


class RowBinder:
    """Adds rows of prepared statements to a batch for a fraction of the driver's CPU.

    ``BatchStatement.add`` binds through ``PreparedStatement.bind``, which builds a named tuple per
    value to ask a column-encryption policy (Notee sets none) before it serializes: ~14 µs for a
    9-column row, against ~3 µs for the column types' serializers alone (docs/BENCHMARKS.md, "Bulk
    subscribe: the driver's binding"). The first row of a batch still goes through
    ``BatchStatement.add``, which gives the batch its routing key; the others are appended as the
    driver appends them, (True, query id, serialized values), to its ``_statements_and_parameters``
    list: a private attribute, so a performance detour (docs/BENCHMARKS.md, "Performance detours"):
    cassandra-driver is pinned exactly, and
    ``tests/integration/test_cql_statements.py::test_rows_bound_by_the_binder_equal_the_drivers`` and
    tests/integration/test_cassandra_pins.py fail, naming it, when the driver changes what it relies on."""

    def __init__(self, protocol_version: int) -> None:
        self._version = protocol_version
        self._serializers: dict[int, tuple[bytes, list[Any]]] = {}  # id(statement) -> (query id, serializers)

    def add(self, batch: BatchStatement, stmt: PreparedStatement, params: Sequence[Any]) -> None:
        if not batch._statements_and_parameters:
            batch.add(stmt, params)
            return
        known = self._serializers.get(id(stmt))
        if known is None:
            known = self._serializers[id(stmt)] = (
                stmt.query_id,
                [column.type.serialize for column in stmt.column_metadata],
            )
        query_id, serializers = known
        if len(params) != len(serializers):  # the driver's own checks and errors
            batch.add(stmt, params)
            return
        version = self._version
        values = [None if v is None else ser(v, version) for ser, v in zip(serializers, params, strict=True)]
        batch._statements_and_parameters.append((True, query_id, values))
