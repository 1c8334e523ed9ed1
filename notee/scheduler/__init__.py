"""The cycle scheduler (`notee scheduler`), a process (rank 4): once a minute, claim the minute once
across replicas and create one fan-out job per cycle template with subscribers due at that local
wall-clock time.

- ``runner``  the process: its clocks (database and host, the skew check), the per-minute tick and
  its catch-up after downtime, the hourly retention and the periodic reconcile, APScheduler.
- What a minute does is the use case ``notee.usecases.cycle_fire`` (claim it in ``notee.store.ticks``,
  read the due buckets, create the jobs); the wall-clock maths (DST rules) is ``notee.core.clock``.
"""
