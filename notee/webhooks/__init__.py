"""``notee webhooks``, a process (rank 4): send the services' webhook events from the outbox, signed
and retried (docs/WEBHOOKS.md)."""
