"""What the tests share, one home per concern:

- ``registry``: registry rows. ``make_*`` write them through the store's own row writers (store
  and domain tests); ``new_*`` create them through the HTTP API (API tests, which need its keys).
- ``stores``: read-side checks on the stores: a tenant's rows in MySQL and Cassandra
  (``snapshot``, to prove a rejected request wrote nothing) and its fan-out rows.
- ``fanout`` / ``scheduler``: topic subscribers seeded at scale, publish jobs, in-process workers,
  cycle templates marked due, scheduler instances.
- ``emulator``: the emulator fixtures and the one way to count deliveries per token (``census``).
- ``processes``: the one launcher of ``python -m notee ...`` subprocesses (``processes`` fixture).

``tests/conftest.py`` registers the fixture modules as plugins: tests never import fixtures.
"""
