"""Notee's version (semver, CHANGELOG.md "Versioning"): the installed distribution's, read once.
The API reports it (``/livez``, ``/readyz``, ``/healthz``, the OpenAPI document) and so does
``notee --version``."""

from __future__ import annotations

from importlib import metadata

VERSION: str = metadata.version("notee")
