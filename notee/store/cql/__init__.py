"""All of Notee's CQL, prepared once per process.

``Statements(session, keyspaces)`` (``statements``) prepares every statement when it is built; a
process builds it once (``runtime.statements``, kept on the Runtime) and passes it to the functions
that read or write Cassandra. Nothing here opens a connection or holds one in a module global.

Tables (schema/cql/0001_subscriptions.cql, decisions in docs/SCHEMA.md), one class of statements each
family, all of them one ``Statements``:
  topic_notification / cycle_notification  slot rows, one partition per slot of a (template, topic)
                                           or (template, tz, day, hour, minute) bucket: ``slots``
  notification_per_user                    the per-user reverse index: ``index.UserIndex``
  notification_per_token                   who may hold a device token's rows: ``index.TokenIndex``
  cycle_due / cycle_timezone               the scheduler's due index: ``due``
  target_slots / target_slots_known        which (slot, block) of a target hold rows: ``occupancy``
  numbering.notification / topic_subscribers  counters version / count / no, per-topic subscribers:
                                           ``counters``
  reconcile_cursor                         where the maintenance walks stopped: ``cursors``
The rows a subscription is made of (a slot row, its index rows) are written together by
``Statements`` itself (``statements``); ``rows`` holds the row types and the slot arithmetic helpers,
``binder`` the logged batches' fast binding and sizing, ``recipients`` the fan-out's page reads.

Execution: counter updates use the ``COUNTER_PROFILE`` (no retry: counters are not idempotent, a
timed-out increment is never resent; the caller sees the error). Writes of one subscription row
plus its index row go in one LOGGED batch: the atomicity across the two tables is the point
(an index row without its slot row, or the reverse, would be an orphan nobody can find).
"""
