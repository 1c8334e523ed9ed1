"""The HTTP API (FastAPI): thin routes over the domain functions."""
