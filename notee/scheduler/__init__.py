"""The cycle scheduler (`notee scheduler`), a process (rank 4): once a minute, claim the minute once across replicas
and create one fan-out job per cycle template with subscribers due at that local wall-clock time.

The wall-clock maths (DST rules) is ``notee.core.clock``, below every layer that needs it.

- ``ticks``   the ``cycle_tick`` table (``notee.store.ticks``): claim a minute exactly once, record its outcome, prune.
- ``runner``  ``Scheduler`` (``run_minute`` / ``tick`` on an injectable clock, the catch-up, the hourly and
  periodic claims) and the APScheduler process; one minute's jobs are the use case ``notee.usecases.cycle_fire``.
"""
