"""Notee's own FCM + APNs emulator: a local server speaking the FCM HTTP v1 and APNs provider wire
protocols over TLS (HTTP/2 and HTTP/1.1), with a control API under ``/_emu/*``.

A product feature for staging as much as a test tool: point a Notee at it with
``NOTEE_EMULATOR_URL=https://host:port`` and ``NOTEE_EMULATOR_CA_FILE=<state-dir>/ca.crt``.
"""
