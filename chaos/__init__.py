"""The chaos run (issue 31): every fault at once while tenants work, checked by an independent ledger.

Not part of Notee's runtime layers: it drives Notee from the outside, as an operator's tool would
(its HTTP API, its processes, the push emulator), and never trusts Notee's own counters for a
verdict. ``python -m chaos`` (``make chaos``); docs/RELIABILITY.md, "The chaos run".

- ``chaos.plan``: the seeded fault schedule (pure).
- ``chaos.ledger``: the invariants, checked from the workload's ledger and the emulator's delivery
  journal (pure; tests/unit/test_chaos_ledger.py).
- ``chaos.report``: the Markdown and HTML report with the timeline as inline SVG (pure).
- ``chaos.stack``: the processes (3-node Cassandra, a killable MariaDB, the emulator, Notee's).
- ``chaos.workload``, ``chaos.faults``, ``chaos.hostile``, ``chaos.receiver``: what runs meanwhile.
- ``chaos.run``: the whole run; ``chaos.attach``: against an existing deployment; ``chaos.__main__``:
  the command line; ``chaos.recheck``: a finished run's files checked again.
"""
