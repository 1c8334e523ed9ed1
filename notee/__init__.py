"""Notee: a self-hosted, multi-tenant push-notification platform."""
