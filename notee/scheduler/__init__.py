"""The cycle scheduler (`notee scheduler`): once a minute, claim the minute once across replicas
and create one fan-out job per cycle template with subscribers due at that local wall-clock time.

- ``clock``   pure wall-clock maths: which local buckets are due at a UTC minute (DST rules).
- ``ticks``   the ``cycle_tick`` table: claim a minute exactly once, record its outcome, prune.
- ``runner``  ``run_minute`` (the injectable-clock core) and the APScheduler process.
"""
