"""``notee worker``, a process (rank 4): claim fan-out tasks, page recipients out of Cassandra, send
them through the providers, checkpoint (docs/FANOUT.md)."""
