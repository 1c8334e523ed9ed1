"""Notee's benchmarks: ``make bench`` / ``make bench-quick`` (docs/BENCHMARKS.md).

Every figure is a ratio of Notee's own path to the bare ceiling of the same work, both measured in the
same run on the same machine (which is shared and noisy, so absolute numbers drift between runs).
"""
