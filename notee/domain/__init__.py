"""Domain logic: pure rules and the units of work the API and CLI call (sessions passed in)."""
