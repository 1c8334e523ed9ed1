"""The core, rank 0 (docs/ARCHITECTURE.md "Layers"): the vocabulary, errors, settings, time, logs,
metrics, crypto and heartbeat every other layer speaks. It imports no other Notee package."""
