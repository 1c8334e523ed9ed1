"""Notee: a self-hosted, multi-tenant push-notification platform."""

import zoneinfo

import tzdata  # type: ignore[import-untyped]  # (data package, no stubs)

# Every host resolves time zones from the same IANA release, the ``tzdata`` package pinned in the
# lock file, never the host's /usr/share/zoneinfo (which differs between images and ages): a cycle
# due at 22:00 Europe/Kyiv fires at the same instant wherever the scheduler runs.
zoneinfo.reset_tzpath(to=())
TZDATA_VERSION: str = tzdata.IANA_VERSION
